"""The access log: one INFO line per request, gRPC and HTTP alike (``--access-log``, on by default).

A line names the door and its route or RPC, the client, the model that answered (``-`` when none
did), the status, the time from the request's arrival to its answer, the request and response
sizes in bytes and the request id, and never a text, a file or a key (the route is logged without
its query string); a request refused past its client's request rate ends in ``refused=`` and the
rate (``requests_per_minute``, ``requests_per_hour``, ``requests_per_day``), or ``banned``::

    access: HTTP POST /translate from 127.0.0.1 model=translator-en-de status=400 1.8 ms in=61 out=72 id=9f3c...
    access: gRPC /attnserve.v1.InferenceService/Translate from ipv4:127.0.0.1:51022 model=translator-en-de
        status=OK 7.5 ms in=34 out=58 id=...  (one line)

HTTP lines come from aiohttp's access-logger hook (:class:`HttpAccessLogger`), called once the
answer is written, so a streamed answer's size is what was sent. gRPC lines come from
:class:`AccessLogInterceptor`, the outermost interceptor: it counts the bytes its handler parses and
serialises and logs once when the RPC ends. The model and the request id come from the call's
:class:`~attnserve.server.shared.calls.Call`, which the :class:`~attnserve.server.shared.calls.CallTracker` hands
to the :class:`Record` in ``calls.access_record`` as it makes it (so a call it refuses has its line's id
too): the RPC's record (gRPC), or the one the HTTP door keeps on the request. With ``--no-access-log``
neither logger is installed: nothing of it on the hot path.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from ..shared.calls import HANGUPS, access_record
from ..shared.security import handler_like

# The name log configurations select the access log by, kept apart from where the module sits.
log = logging.getLogger("attnserve.server.access_log")

MAX_PATH = 200  # characters of a request path in the log


class Record:
    """What one gRPC call's line needs, filled in as the call goes."""

    __slots__ = ("call", "received", "sent", "answered", "peer")

    def __init__(self) -> None:
        self.call: Any = None  # the CallTracker's Call, when the RPC went through it
        # The client's address, read when the handler starts: grpcio frees the core call once the
        # RPC is over, and ``context.peer()`` then dereferences a null pointer (a segfault, where a
        # streaming client hung up as its last reply was sent).
        self.peer = "?"
        self.received = 0
        self.sent = 0
        self.answered: Any = None  # a unary RPC's context once its reply is returned, until it is serialised


LINE = "access: %s %s from %s model=%s status=%s %.1f ms in=%d out=%d id=%s"
REFUSED = LINE + " refused=%s"  # a call refused past its client's request rate, and which rate


def _line(call: Any) -> tuple[str, tuple[str, ...]]:
    """The line's format and its last arguments (the request id, and the rate that refused it)."""
    if call is None:
        return LINE, ("-",)
    return (REFUSED, (call.request_id, call.refused)) if call.refused else (LINE, (call.request_id,))


def _status_name(context: grpc.aio.ServicerContext, failed: BaseException | None) -> str:
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(code, int) and code != 0:  # grpcio keeps an int where the handler set one
        return next((s.name for s in grpc.StatusCode if s.value[0] == code), str(code))
    if failed is None:
        return "OK"
    return "CANCELLED" if isinstance(failed, HANGUPS) else "UNKNOWN"


class AccessLogInterceptor(grpc.aio.ServerInterceptor):
    """Logs one line per RPC (see the module docstring); the outermost interceptor, so calls refused
    by the inner ones (no token, a request that does not parse) are logged too."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or not log.isEnabledFor(logging.INFO):  # no line to write: nothing to wrap
            return handler
        record, method = Record(), details.method or "?"
        start = time.perf_counter()
        parse, write = handler.request_deserializer, handler.response_serializer

        def parsed(raw: bytes) -> Any:
            record.received += len(raw)
            return parse(raw) if parse is not None else raw

        def written(message: Any) -> bytes:
            raw = write(message) if write is not None else message
            record.sent += len(raw)
            if record.answered is not None:  # a unary reply is serialised after its handler returned
                done(record.answered, None)
            return raw

        def done(context: grpc.aio.ServicerContext, failed: BaseException | None) -> None:
            call, record.answered = record.call, None
            if not log.isEnabledFor(logging.INFO):  # --log-level warning: nothing to format
                return
            line, last = _line(call)
            log.info(
                line,
                "gRPC",
                method,
                record.peer,
                call.model if call is not None else "-",
                _status_name(context, failed),
                (time.perf_counter() - start) * 1e3,
                record.received,
                record.sent,
                *last,
            )

        behaviour = _wrap(handler, record, done)
        return handler_like(handler, behaviour, behaviour, request_deserializer=parsed, response_serializer=written)


def _wrap(handler: grpc.RpcMethodHandler, record: Record, done: Callable) -> Callable:
    """``handler``'s behaviour, run with ``record`` as ``calls.access_record`` and ``done`` called at its end."""
    inner = handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream
    if inspect.isasyncgenfunction(inner):

        async def stream(request: Any, context: grpc.aio.ServicerContext):
            access_record.set(record)
            record.peer = context.peer()
            failed = None
            try:
                async for reply in inner(request, context):
                    yield reply
            except BaseException as exc:
                failed = exc
                raise
            finally:
                done(context, failed)

        return stream

    async def unary(request: Any, context: grpc.aio.ServicerContext):
        access_record.set(record)
        record.peer = context.peer()
        try:
            reply = await inner(request, context)
        except BaseException as exc:
            done(context, exc)
            raise
        if reply is None:  # a handler that wrote its replies itself (context.write), or aborted
            done(context, None)
        else:  # logged once the reply is serialised, with its size
            record.answered = context
        return reply

    return unary


def http_logger_class(record_key: Any):
    """aiohttp's access-logger class for the HTTP door (imported only when HTTP is served); the
    door keeps a request's :class:`Record` under ``record_key``, its Call told by the tracker."""
    from aiohttp.abc import AbstractAccessLogger

    class HttpAccessLogger(AbstractAccessLogger):
        """One line per HTTP request, written after its answer (see the module docstring)."""

        @property
        def enabled(self) -> bool:  # aiohttp asks before it calls log()
            return self.logger.isEnabledFor(logging.INFO)

        def log(self, request: Any, response: Any, time: float) -> None:  # noqa: A002 - aiohttp's signature
            record = request.get(record_key)
            call = record.call if record is not None else None
            http_line(self.logger, request, call, response.status, time, response.body_length)

    return HttpAccessLogger


def http_line(logger: logging.Logger, request: Any, call: Any, status: int, seconds: float, sent: int) -> None:
    """One HTTP request's line: aiohttp's access logger writes it after the answer, the door for
    a request whose client went away before its answer (aiohttp writes none: status 499)."""
    if not logger.isEnabledFor(logging.INFO):
        return
    try:  # a request whose head did not parse was never routed: it has no match_info
        route = request.match_info.route.resource
    except (AssertionError, AttributeError):
        route = None
    path = route.canonical if route is not None else request.raw_path.split("?", 1)[0][:MAX_PATH]
    line, last = _line(call)
    logger.info(
        line,
        "HTTP",
        f"{request.method} {path}",
        request.remote,
        call.model if call is not None else "-",
        status,
        seconds * 1e3,
        request.content.total_bytes,
        sent,
        *last,
    )
