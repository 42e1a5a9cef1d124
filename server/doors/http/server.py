"""The HTTP server: one aiohttp application on the server's own event loop, beside gRPC.

aiohttp was chosen by measurement over an ASGI app on uvicorn (benchmarks/README.md,
"HTTP server library"): equal on small JSON requests, faster on large binary bodies, and
it cancels a handler whose client went away (``handler_cancellation``), which frees a
translation's decoder row like a gRPC cancel does.

Routes come from one table (``table.RouteTable``: a (method, path, handler) row each, added by
every door's route module) and are served by :meth:`HttpServer.serve`: each handler runs inside the shared
:class:`~attnserve.server.shared.calls.CallTracker` (request id ``X-Request-Id``, draining,
``--max-concurrent-rpcs``, metrics, errors), which counts a call only once its body has
arrived (``--http-body-timeout-s``; a request head has ``--http-header-timeout-s``), so slow
clients hold no slot; errors are answered as ``{"error": message}``
with the HTTP status of the gRPC status (:data:`HTTP_STATUS`), or in a protocol's own shape: a
route's ``errors``, and for an unrouted path the shape of the door whose prefix it has
(``RouteTable.refuse``: DeepL's under ``/v2/`` and ``/v3/``, but for KServe's). TLS and bearer tokens
(``Authorization: Bearer <token>``) come from the same settings as gRPC's; routes
registered with ``open=True`` (health) need no token. KServe v2's routes live in
``kserve_routes``, Triton's generate extension in ``generate_routes``, LibreTranslate's API
in ``libretranslate_routes`` and its file routes in ``file_routes``, DeepL's v2 API in
``deepl_routes`` (errors in its own shape: a row's ``errors``), stored glossaries in
``glossary_routes``, the web page in ``web_routes``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler

from ...shared import security
from ...shared.calls import LOAD_MS_KEY, Call, CallFailed, access_record
from ...shared.errors import RateLimited, client_message, echo
from ...shared.rates import Caller
from .. import access_log
from ..context import DoorContext
from . import (
    deepl_glossary_routes,
    deepl_routes,
    deepl_v3_glossary_routes,
    file_routes,
    generate_routes,
    glossary_routes,
    job_routes,
    kserve_routes,
    libretranslate_routes,
    openapi,
    web_routes,
)
from .messages import REQUEST_ID, ClientGone, DrainedBadBody, body_arrived, error_response
from .parse_process import ParseProcess
from .table import Route, RouteTable

log = logging.getLogger(__name__)

# Every door's routes, added to one table in this order (KServe's /v2/models/stats before {model}).
ROUTE_MODULES = (
    kserve_routes.add_routes,
    generate_routes.add_routes,
    libretranslate_routes.add_routes,
    file_routes.add_routes,
    job_routes.add_routes,
    deepl_routes.add_routes,
    deepl_glossary_routes.add_routes,
    deepl_v3_glossary_routes.add_routes,
    glossary_routes.add_routes,
    web_routes.add_routes,
    openapi.add_routes,
)

UNAUTHENTICATED_MESSAGE = "missing or invalid bearer token: send the header 'Authorization: Bearer <token>'"
# a tracked request's access-log record: its Call, once the tracker has made one
ACCESS_RECORD = web.RequestKey("attnserve_access_record", access_log.Record)


class _JsonRefusals(RequestHandler):
    """aiohttp's connection handler, answering a request it cannot parse (a request line or a
    header over its 8,190-byte limit, a malformed head) in the server's JSON error shape, with one
    INFO line in the log: aiohttp answers those in plain text and logs an ERROR with a traceback,
    which any client could fill the log with."""

    def handle_error(self, request, status=500, exc=None, message=None):  # noqa: ANN001 - aiohttp's signature
        if not isinstance(exc, HttpProcessingError) or request.writer.output_size > 0:
            return super().handle_error(request, status, exc, message)
        if isinstance(exc, LineTooLong):
            reason = "the request line or a header is over the server's limit of 8190 bytes"
        else:
            reason = f"the request does not parse as HTTP/1.1: {client_message(str(exc.message)).splitlines()[0]}"
        log.info("HTTP: refused a request from %s: %s", request.remote, reason)
        response = error_response("INVALID_ARGUMENT", reason, exc.code if 400 <= exc.code < 500 else 400)
        response.force_close()
        return response


class _Server(web.Server):
    def __call__(self) -> RequestHandler:
        return _JsonRefusals(self, loop=self._loop, **self._kwargs)


class _Runner(web.AppRunner):
    """An AppRunner whose connections are :class:`_JsonRefusals` (aiohttp has no public hook
    for the answer to a request that does not parse; tests/server/http cover it)."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _Server
        return server


class HttpServer:
    def __init__(self, doors: DoorContext) -> None:
        self.doors = doors
        self.open_routes: set[str] = set()
        self.labels: dict[str, str] = {}  # route name -> metrics method label
        self.web = web.Application(
            client_max_size=doors.settings.max_message_bytes, middlewares=[self._errors, self._auth]
        )
        # large JSON bodies (KServe infer) off the event loop
        self.parse_process = ParseProcess(memory_bytes=doors.settings.parse_memory_bytes)
        self._runner: web.AppRunner | None = None
        self._sock: socket.socket | None = None
        self._address: tuple[str, int] = ("", 0)
        table = RouteTable(doors, self.web, self.parse_process)
        for add_routes in ROUTE_MODULES:
            add_routes(table)
        for row in table.rows:
            self.serve(row)
        self.refusal = table.refusal

    def serve(self, row: Route) -> None:
        """Serve ``row.handler(request, call)`` at ``row.path``; ``row.label`` is its metrics method label.

        A tracked call's body (at most ``body_limit`` bytes, --max-message-bytes by default) arrives
        within --http-body-timeout-s, then (``metered``) it counts against its client's request rates,
        before it takes one of --max-concurrent-rpcs' slots; ``authenticate(request)`` (an open route
        checking its own keys) runs on the head alone, and raises a ServingError to refuse; ``errors``
        answers a failed call in the protocol's own shape (DeepL's) in place of ``{"error": message}``.
        ``tracked=False`` (health probes) skips the tracker: no metrics, answered while draining.
        ``cors=True`` (LibreTranslate's routes, which upstream serves to browser pages of any
        origin): every answer carries ``Access-Control-Allow-Origin: *`` and an ``OPTIONS``
        preflight at ``path`` is answered without a token (credentials travel in ``api_key``
        or the ``Authorization`` header, never in cookies).
        """
        label, handler, tracked, who = row.label, row.handler, row.tracked, self._caller(row)
        name = f"{label}.r{len(self.labels)}"  # aiohttp route names: identifiers and dots
        self.labels[name] = label
        if row.open:
            self.open_routes.add(name)
        calls, settings = self.doors.calls, self.doors.settings
        limit = row.body_limit or settings.max_message_bytes
        setting = "--max-message-bytes" if limit == settings.max_message_bytes else row.body_setting

        async def wrapped(request: web.Request) -> web.StreamResponse:
            started = time.perf_counter()
            request_id = calls.request_id(request.headers.get(REQUEST_ID))
            if not tracked:
                return await handler(request, Call(label, "-", request_id))
            # the access-log line's call, told by the tracker even when it refuses the call
            request[ACCESS_RECORD] = record = access_log.Record()
            access_record.set(record)
            arrive = self._arrival(row, request, limit, setting)
            try:
                model = request.match_info.get("model", "")
                async with calls.track(
                    label, model, request_id, inference=row.inference, limited=True, arrive=arrive, caller=who(request)
                ) as call:
                    call.key = self.doors.auth.caller_key(request.headers.get("Authorization"))
                    try:
                        response = await handler(request, call)
                    except ConnectionResetError:  # aiohttp's "Connection lost": a read of the body or a write
                        raise ClientGone("the client went away before its answer") from None
            except asyncio.CancelledError:  # the client went away mid-answer: aiohttp cancels the handler, logs nothing
                if settings.access_log:
                    access_log.http_line(access_log.log, request, record.call, 499, time.perf_counter() - started, 0)
                raise
            except CallFailed as exc:
                response = _failed(row, exc)
                if not request.content.is_eof():  # a body not read (refused, or too slow): "Connection: close"
                    response.force_close()
            return _headed(response, request_id, record.call, row.cors)

        self.web.router.add_route(row.method, row.path, wrapped, name=name)
        if row.cors:
            self._preflight(row.path, row.method, label)

    def _arrival(self, row: Route, request: web.Request, limit: int, setting: str) -> Callable[[], Awaitable[None]]:
        """What a tracked call awaits before it counts: the head's key check of an open route
        (``row.authenticate``), then its whole body within ``limit`` bytes (from ``setting``)."""

        async def arrive() -> None:
            if row.authenticate is not None:
                row.authenticate(request)
            await body_arrived(request, limit, self.doors.settings.http_body_timeout_s, setting)

        return arrive

    def _caller(self, row: Route) -> Callable[[web.Request], Callable[[], Awaitable[Caller]] | None]:
        """Who sends a request of ``row``, for its request rates (None: a route no rate counts): the
        token the door reads (``row.token``, else the ``Authorization`` header's bearer) and the
        socket's peer address. ``X-Forwarded-For`` is never read: the server has no notion of a
        proxy it trusts, and any client could send one."""
        auth, token = self.doors.auth, row.token or _bearer
        if not row.metered:
            return lambda request: None

        def who(request: web.Request) -> Callable[[], Awaitable[Caller]]:
            async def caller() -> Caller:
                return auth.caller(await token(request) if auth.keys_on else None, request.remote)

            return caller

        return who

    def _preflight(self, path: str, method: str, label: str) -> None:
        """An OPTIONS answer at ``path`` for browsers' CORS preflight (one method per such path)."""

        async def preflight(request: web.Request) -> web.Response:
            return web.Response(
                status=204,
                headers={
                    "Access-Control-Allow-Origin": "*",
                    "Access-Control-Allow-Methods": f"{method}, OPTIONS",
                    "Access-Control-Allow-Headers": f"Content-Type, Authorization, {REQUEST_ID}",
                    "Access-Control-Max-Age": "600",
                },
            )

        name = f"{label}.preflight"
        self.open_routes.add(name)
        self.web.router.add_route("OPTIONS", path, preflight, name=name)

    @web.middleware
    async def _errors(self, request: web.Request, handler) -> web.StreamResponse:
        """aiohttp's own refusals (unknown path, wrong method, bad request line) as JSON errors too,
        in the shape of the protocol whose paths they fall under (``RouteTable.refuse``)."""
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            errors = self.refusal(request.path)
            if errors is None:
                return web.json_response({"error": exc.reason}, status=exc.status, headers=_allow(exc))
            allow = _allow(exc)
            takes = f"; it takes {allow['Allow']}" if allow else ""
            response = errors("", f"{exc.reason}: {request.method} {echo(request.path)}{takes}", exc.status)
            response.headers.update(allow)
            return response

    @web.middleware
    async def _auth(self, request: web.Request, handler) -> web.StreamResponse:
        auth = self.doors.auth
        route = request.match_info.route
        name = getattr(route, "name", None)
        if not auth.keys_on or request.match_info.http_exception is not None or name in self.open_routes:
            return await handler(request)
        if auth.allows(request.headers.get("Authorization")):
            return await handler(request)
        auth.refused(self.labels.get(name, "http"))
        response = error_response("UNAUTHENTICATED", UNAUTHENTICATED_MESSAGE)
        response.headers["WWW-Authenticate"] = "Bearer"
        return response

    def bind(self, host: str, port: int) -> int:
        """Take ``host:port`` now (0 = any free port), before the models load; returns the port.
        Connections wait in the listen backlog until :meth:`start` serves them."""
        reuse_port = self.doors.settings.workers > 1  # every worker process listens on the same port
        try:
            family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)[0][0]
            self._sock = socket.create_server((host, port), family=family, reuse_port=reuse_port)
        except OSError as exc:  # create_server's message wraps the OS's words in its own
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise OSError(f"cannot serve HTTP on {host}:{port}: {reason} (see --http-port)") from None
        self._sock.setblocking(False)
        self._address = (host, self._sock.getsockname()[1])
        return self._address[1]

    async def start(self) -> None:
        """Serve on the socket :meth:`bind` took."""
        ssl_context = security.http_ssl_context(self.doors.settings)
        # aiohttp closes a connection whose "keep-alive" wait outlasts keepalive_timeout, and that wait
        # lasts until a request's head is complete: so it is the header timeout too (slow-loris heads).
        access = self.doors.settings.access_log
        runner = _Runner(
            self.web,
            access_log=access_log.log if access else None,
            access_log_class=access_log.http_logger_class(ACCESS_RECORD),
            handler_cancellation=True,
            shutdown_timeout=1.0,
            keepalive_timeout=self.doors.settings.http_header_timeout_s,
        )
        aiohttp_log = logging.getLogger("aiohttp.server")
        if not any(isinstance(f, DrainedBadBody) for f in aiohttp_log.filters):
            aiohttp_log.addFilter(DrainedBadBody())
        await runner.setup()
        await web.SockSite(runner, self._sock, ssl_context=ssl_context).start()
        self._runner = runner
        host, port = self._address
        log.info(
            "HTTP (KServe v2 REST, generate, LibreTranslate, the web page) on %s://%s:%d",
            "https" if ssl_context else "http",
            host,
            port,
        )

    async def stop(self) -> None:
        self.parse_process.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None


async def _bearer(request: web.Request) -> str | None:
    return security.bearer_token(request.headers.get("Authorization"))


def _failed(row: Route, exc: CallFailed) -> web.Response:
    """A failed call in the route's protocol's shape; one refused past its client's request rate
    or for its ban in the protocol's status and words (``row.slowdown``) with ``Retry-After``."""
    message, http_status = exc.message, exc.http_status
    limited = exc.cause if isinstance(exc.cause, RateLimited) else None
    if limited is not None and row.slowdown is not None:
        http_status, message = row.slowdown(limited)
    response = (row.errors or error_response)(exc.status, message, http_status)
    if limited is not None:
        response.headers["Retry-After"] = str(limited.retry_seconds)
    return response


def _allow(exc: web.HTTPException) -> dict[str, str]:
    allow = exc.headers.get("Allow") if exc.headers else None
    return {"Allow": allow} if allow else {}


def _headed(response: web.StreamResponse, request_id: str, call: Call | None, cors: bool) -> web.StreamResponse:
    """A tracked route's answer with its request id, the model load it waited for, CORS's header."""
    if not response.prepared:
        response.headers[REQUEST_ID] = request_id
        if call is not None and call.load_ms:
            response.headers[LOAD_MS_KEY] = f"{call.load_ms:.0f}"
        if cors:
            response.headers["Access-Control-Allow-Origin"] = "*"
    return response
