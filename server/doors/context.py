"""What every door holds: the services it calls, a read-only view of the models and the auth hook,
never the application object. ``entry.app`` builds one :class:`DoorContext` for all doors."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import grpc

from ..service.classification import ClassificationService
from ..service.downloads import Downloads
from ..service.file_jobs import FileJobs
from ..service.files import FileTranslation
from ..service.models import ModelView
from ..service.stored_glossaries import StoredGlossaries
from ..service.translation import TranslationService
from ..service.vocabulary import ReloadOutcome
from ..shared.calls import LOAD_MS_KEY, Call, CallFailed, CallTracker
from ..shared.config import Settings
from ..shared.errors import RateLimited
from ..shared.metrics import Metrics
from ..shared.rates import Caller, peer_host
from ..shared.security import TokenChecker, bearer_token, key_digest

REQUEST_ID_KEY = "x-request-id"
RETRY_AFTER_KEY = "retry-after"  # trailing metadata of a call refused past its client's request rate


class Auth:
    """The bearer tokens (``checker``: None when the server has none) and the count of the calls
    they refuse."""

    def __init__(self, checker: TokenChecker | None, metrics: Metrics) -> None:
        self.checker, self._metrics = checker, metrics

    @property
    def keys_on(self) -> bool:
        return self.checker is not None

    def allows(self, authorization: str | bytes | None) -> bool:
        """Whether a call with this ``Authorization`` value is let in (always, without tokens)."""
        return self.checker is None or self.checker.check(authorization)

    def caller_key(self, authorization: str | None) -> str:
        """Whose records a call reads (``Call.key``): the sha256 of its bearer token, "" without keys."""
        return key_digest(bearer_token(authorization)) if self.checker is not None else ""

    def caller(self, token: str | None, address: str | None) -> Caller:
        """Who sends a call, for its request rates: its ``token`` where the server has tokens and it
        is one of them (its sha256, as ``Call.key``), else its peer's ``address``."""
        valid = token and self.checker is not None and self.checker.check(f"Bearer {token}")
        return Caller(key_digest(token) if valid else "", address or "")

    def refused(self, method: str, *, in_call: bool = False) -> None:
        """Count a refused call; one refused before it was tracked (``in_call`` False) is counted
        as a request answered UNAUTHENTICATED too, which its tracker would have done."""
        self._metrics.unauthenticated.labels(method).inc()
        if not in_call:
            self._metrics.requests.labels("-", method, "UNAUTHENTICATED").inc()


@dataclass(frozen=True)
class RepositoryActions:
    """KServe's repository load / unload and attnserve.v1's Reload: the only changes a door asks
    of the models (with ``--enable-admin``)."""

    load: Callable[[str], Awaitable[None]]
    unload: Callable[[str], Awaitable[None]]
    reload: Callable[[Sequence[str]], Awaitable[list[ReloadOutcome]]]


@dataclass(frozen=True)
class DoorContext:
    settings: Settings
    calls: CallTracker  # every door's call: request id, draining, in-flight count, status, metrics
    translation: TranslationService
    classification: ClassificationService
    files: FileTranslation
    jobs: FileJobs
    downloads: Downloads  # translated files kept for download (LibreTranslate's file routes)
    glossaries: StoredGlossaries  # stored glossaries per key (glossary_id)
    models: ModelView
    auth: Auth
    repository: RepositoryActions
    preprocess_pool: Executor  # the bounded off-loop work pool (--preprocess-threads)

    def grpc_caller(self, context: Any) -> Callable[[], Awaitable[Caller]]:
        """Who sends a gRPC call: its bearer token (metadata ``authorization``), else its peer's address."""

        async def caller() -> Caller:
            authorization = dict(context.invocation_metadata() or ()).get("authorization")
            return self.auth.caller(bearer_token(authorization), peer_host(context.peer()))

        return caller

    @contextlib.asynccontextmanager
    async def rpc(
        self, context: Any, method: str, model: str, *, inference: bool = False, metered: bool = True
    ) -> AsyncIterator[Call]:
        """One gRPC call (``context``: grpc.aio.ServicerContext) through the :class:`CallTracker`;
        its failure becomes the call's status. ``metered``: it counts against its client's request
        rates (not a listing of the models or the server's metadata)."""
        metadata = dict(context.invocation_metadata() or ())
        request_id = self.calls.request_id(metadata.get(REQUEST_ID_KEY))
        trailing = ((REQUEST_ID_KEY, request_id),)
        context.set_trailing_metadata(trailing)

        def deadline_passed() -> bool:
            remaining = context.time_remaining()
            return remaining is not None and remaining <= 0

        call = None
        caller = self.grpc_caller(context) if metered else None
        try:
            async with self.calls.track(
                method, model, request_id, inference=inference, deadline_passed=deadline_passed, caller=caller
            ) as call:
                call.key = self.auth.caller_key(metadata.get("authorization"))
                yield call
        except CallFailed as exc:
            if isinstance(exc.cause, RateLimited):  # as HTTP's Retry-After: seconds until one is let in
                context.set_trailing_metadata((*trailing, (RETRY_AFTER_KEY, str(exc.cause.retry_seconds))))
            await context.abort(grpc.StatusCode[exc.status], exc.message)
        finally:
            if call is not None and call.load_ms:
                context.set_trailing_metadata((*trailing, (LOAD_MS_KEY, f"{call.load_ms:.0f}")))
