"""One call's life, whatever the protocol (attnserve.v1 and KServe v2 over gRPC, KServe v2 REST).

:meth:`CallTracker.track` gives every call a request id, refuses work while the server
drains, counts it in flight (shutdown waits for zero), times it, maps the serving core's
typed errors to one status name and records it in the metrics and the per-model
statistics (KServe's ModelStatistics). Protocol layers only turn a :class:`CallFailed`
into their own answer: a gRPC status, an HTTP status with a JSON error body.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import Overloaded, RateLimited, ServingError, ShuttingDown, client_message
from .metrics import Metrics
from .rates import Caller, RateLimiter

log = logging.getLogger(__name__)

MAX_REQUEST_ID = 64
NO_MODEL = "-"  # the metrics' model label of a call not answered by a served model (none named, or unknown)
# The running gRPC call's access-log record (``access_log.Record``), told which Call it became.
access_record: contextvars.ContextVar[Any] = contextvars.ContextVar("attnserve_access_record", default=None)
# How a call ends when its client went away: cancelled, or a stream closed at its pending reply
# (grpcio throws GeneratorExit into the handler's generator).
HANGUPS = (asyncio.CancelledError, GeneratorExit)


@dataclass
class Call:
    method: str  # the metrics' method label: "Translate", "kserve.ModelInfer", "kserve.http.ModelInfer", ...
    model: str
    request_id: str
    status: str = "OK"
    items: int = 0  # texts or images answered: KServe's inference_count
    queue_s: float = 0.0  # time its items waited for a batch or decode admission (the longest)
    load_ms: float = 0.0  # time it waited for its model to load (lazy loading); sent as LOAD_MS_KEY
    key: str = ""  # sha256 of the caller's api key ("" without keys): whose stored glossaries it reads
    # who sends it (``Caller.client``: its token's sha256, else its address), whose request rates and
    # monthly characters it counts against; "" for a call no client's usage counts (a listing, the server's own)
    client: str = ""
    refused: str = ""  # the request rate that refused it ("requests_per_minute", "banned"), for its access-log line


LOAD_MS_KEY = "attnserve-load-ms"  # gRPC trailing metadata / HTTP header: a call that waited for a model load


class CallFailed(Exception):
    """A call that ended with ``status`` (a gRPC status name) and a message for the client."""

    def __init__(
        self, status: str, message: str, http_status: int | None = None, cause: ServingError | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.http_status = http_status  # a more precise HTTP status than the status maps to (413)
        self.cause = cause  # the typed error, for a door that words it its own way (a RateLimited)


@dataclass
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.ns += int(seconds * 1e9)


@dataclass
class ModelStats:
    """What KServe's ModelStatistics reports for one model (inference methods of every protocol)."""

    last_inference_ms: int = 0  # wall clock of the last answered inference, ms since the epoch
    inference_count: int = 0  # texts and images answered
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)


class CallTracker:
    """Request ids, draining, the in-flight count, metrics and statistics of every call."""

    def __init__(
        self,
        metrics: Metrics,
        max_inflight: int = 0,
        served: Callable[[str], bool] | None = None,
        *,
        hidden: tuple[str, ...] = (),
        rates: RateLimiter | None = None,
    ) -> None:
        self.metrics = metrics
        self.rates = rates  # --requests-per-minute / -hour / -day, --ban-after-refusals; None: no client is limited
        # Which names label the metrics and the statistics: a client's made-up model name must
        # not become a series of its own (10,000 random names would make 200,000 series).
        self.served = served or (lambda name: True)
        self.hidden = hidden  # left out of every message to a client: the model repository's absolute path
        self.max_inflight = max_inflight  # 0 = no limit here (gRPC enforces max_concurrent_rpcs itself)
        self.draining = False
        self.inflight = 0
        metrics.inflight.set_function(lambda: self.inflight)  # read at scrape time, not updated per call
        self.stats: dict[str, ModelStats] = {}
        self._idle = asyncio.Event()
        self._idle.set()

    @staticmethod
    def request_id(given: str | bytes | None = None) -> str:
        """The client's id (cut to 64 characters), else a new one."""
        if isinstance(given, bytes):
            given = given.decode("latin-1")
        # 64 random bits in 16 hex digits, as uuid4's first half, without uuid4's read of os.urandom per call
        return str(given or f"{random.getrandbits(64):016x}")[:MAX_REQUEST_ID]

    async def wait_idle(self) -> None:
        await self._idle.wait()

    @contextlib.asynccontextmanager
    async def track(
        self,
        method: str,
        model: str,
        request_id: str = "",
        *,
        inference: bool = False,
        limited: bool = False,
        deadline_passed: Callable[[], bool] | None = None,
        arrive: Callable[[], Awaitable[None]] | None = None,
        caller: Callable[[], Awaitable[Caller]] | None = None,
    ) -> AsyncIterator[Call]:
        """Run one call: ServingError -> CallFailed(its status), anything else -> CallFailed("INTERNAL").

        ``inference`` counts it in the model's statistics; ``limited`` applies ``max_inflight``
        (for protocols without a limit of their own); ``deadline_passed`` tells a cancellation
        by the client's deadline (DEADLINE_EXCEEDED) from one by the client (CANCELLED);
        ``arrive`` is awaited before the call counts in flight: an HTTP request's body arrives
        there, so a client that sends it slowly holds no slot; ``caller``, awaited once it has arrived,
        says who sends it (``Call.client``): the call counts against that client's request rates and
        is refused past them (None: a call no rate counts, such as a listing of the models).
        """
        call = Call(method, model or NO_MODEL, request_id or self.request_id())
        record = access_record.get()
        if record is not None:
            record.call = call
        start = time.perf_counter()
        counted = False
        try:
            if arrive is not None:
                await arrive()
            if caller is not None:
                who = await caller()
                call.client = who.client
                if self.rates is not None:
                    self._admit(call, who)
            counted = True
            self.inflight += 1
            self._idle.clear()
            if self.draining:
                raise ShuttingDown("server is shutting down; retry on another replica")
            if limited and self.max_inflight and self.inflight > self.max_inflight:
                raise Overloaded(f"{self.inflight - 1} calls in flight, the limit is {self.max_inflight}; retry later")
            yield call
        except ServingError as exc:
            raise self._failed(call, method, exc) from None
        except CallFailed as exc:  # already mapped by an inner layer (a stream's own error)
            call.status = exc.status
            raise
        except HANGUPS:
            call.status = "DEADLINE_EXCEEDED" if deadline_passed is not None and deadline_passed() else "CANCELLED"
            raise
        except Exception as exc:  # noqa: BLE001 - never a traceback to the client
            call.status = "INTERNAL"
            log.exception("request %s: %s on model %s failed", call.request_id, method, call.model)
            message = self.message(f"internal error: {type(exc).__name__}: {exc}")
            raise CallFailed("INTERNAL", f"{message} (request id {call.request_id})") from None
        finally:
            self._done(call, method, time.perf_counter() - start, counted=counted, inference=inference)

    def _failed(self, call: Call, method: str, exc: ServingError) -> CallFailed:
        """A typed refusal or failure as the client reads it; an INTERNAL one is logged with its request id."""
        call.status = exc.status
        message = self.message(str(exc))
        if exc.status == "INTERNAL":  # a server-side failure: the request id ties the reply to the log
            log.error("request %s: %s on model %s failed: %s", call.request_id, method, call.model, exc)
            message = f"{message} (request id {call.request_id})"
        return CallFailed(exc.status, message, getattr(exc, "http_status", None), exc)

    def _admit(self, call: Call, caller: Caller) -> None:
        """Count ``call`` against its caller's request rates; past one, RateLimited, counted in
        ``attnserve_rate_limited_total`` by door and rate."""
        try:
            self.rates.admit(caller)  # type: ignore[union-attr] - track checks it is set
        except RateLimited as exc:
            call.refused = exc.reason
            self.metrics.rate_limited.labels(door_of(call.method), exc.reason).inc()
            raise

    def _done(self, call: Call, method: str, elapsed: float, *, counted: bool, inference: bool) -> None:
        """A finished call leaves the in-flight count and is recorded in the metrics and model statistics."""
        if counted:
            self.inflight -= 1
            if self.inflight == 0:
                self._idle.set()
        model = call.model if self.served(call.model) else NO_MODEL
        self.metrics.call_done(model, method, call.status, elapsed)
        if inference and model != NO_MODEL:
            self._record(model, call, elapsed)

    def message(self, text: str) -> str:
        """``text`` as a client may read it (``errors.client_message``): capped, no repository path."""
        return client_message(text, self.hidden)

    def _record(self, model: str, call: Call, elapsed: float) -> None:
        stats = self.stats.setdefault(model, ModelStats())
        if call.status == "OK":
            stats.success.add(elapsed)
            stats.inference_count += call.items
            stats.last_inference_ms = int(time.time() * 1000)
            if call.items:
                stats.queue.add(call.queue_s)
        else:
            stats.fail.add(elapsed)


def door_of(method: str) -> str:
    """The door of a metrics method label: the label without its last part (``libretranslate``,
    ``deepl``, ``kserve.http``, ``kserve`` for KServe over gRPC), ``v1`` for attnserve.v1's RPCs."""
    return method.rpartition(".")[0] or "v1"
