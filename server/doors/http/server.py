"""The HTTP server: one aiohttp application on the server's own event loop, beside gRPC.

aiohttp was chosen by measurement over an ASGI app on uvicorn (benchmarks/README.md,
"HTTP server library"): equal on small JSON requests, faster on large binary bodies, and
it cancels a handler whose client went away (``handler_cancellation``), which frees a
translation's decoder row like a gRPC cancel does.

Routes are added with :meth:`HttpServer.route`: each handler runs inside the shared
:class:`~attnserve.server.calls.CallTracker` (request id ``X-Request-Id``, draining,
``--max-concurrent-rpcs``, metrics, errors), which counts a call only once its body has
arrived (``--http-body-timeout-s``; a request head has ``--http-header-timeout-s``), so slow
clients hold no slot; errors are answered as ``{"error": message}``
with the HTTP status of the gRPC status (:data:`HTTP_STATUS`). TLS and bearer tokens
(``Authorization: Bearer <token>``) come from the same settings as gRPC's; routes
registered with ``open=True`` (health) need no token. KServe v2's routes live in
``kserve_routes``, Triton's generate extension in ``generate_routes``, LibreTranslate's API
in ``libretranslate_routes`` and its file routes in ``file_routes``, DeepL's v2 API in
``deepl_routes`` (errors in its own shape: ``route(errors=)``), stored glossaries in
``glossary_routes``, the web page in ``web_routes``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler

from ... import access_log, security
from ...calls import LOAD_MS_KEY, Call, CallFailed
from ...errors import DeadlineExceeded, InvalidRequest, Overloaded, ServingError, client_message
from .parse_process import ParseProcess

log = logging.getLogger(__name__)

HTTP_STATUS = {
    "INVALID_ARGUMENT": 400,
    "UNAUTHENTICATED": 401,
    "NOT_FOUND": 404,
    "RESOURCE_EXHAUSTED": 429,
    "CANCELLED": 499,  # nobody reads it: the client has gone
    "INTERNAL": 500,
    "UNIMPLEMENTED": 501,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
REQUEST_ID = "X-Request-Id"
UNAUTHENTICATED_MESSAGE = "missing or invalid bearer token: send the header 'Authorization: Bearer <token>'"
Handler = Callable[[web.Request, Call], Awaitable[web.StreamResponse]]
CALL_KEY = web.RequestKey("attnserve_call", Call)  # a tracked request's Call, for its access-log line


class PayloadTooLarge(Overloaded):
    """A body over --max-message-bytes: RESOURCE_EXHAUSTED, as gRPC answers an oversize message."""

    http_status = 413


class ClientGone(ServingError):
    """The client closed its connection before its body was in: nobody reads the answer."""

    status = "CANCELLED"


class BodyTimeout(DeadlineExceeded):
    """A body that did not arrive within --http-body-timeout-s: 408, and the connection is closed."""

    http_status = 408


# The most bytes JSON or a url-encoded form spends on one character: "\ud83d\ude00" or
# "%F0%9F%98%80" (12) for a character outside the BMP.
BYTES_PER_CHAR = 12
BODY_SLACK = 64 << 10  # the other fields of a text request: languages, options, keys


def text_body_limit(settings: Any) -> int:
    """The largest body a text-only route (generate, LibreTranslate) needs: the request's
    characters at their longest spelling, plus its other fields; at most --max-message-bytes.
    A larger body is refused (413) before it is read or parsed."""
    return min(settings.max_message_bytes, BYTES_PER_CHAR * settings.max_request_chars + BODY_SLACK)


async def body_arrived(request: web.Request, limit: int, timeout_s: float, setting: str) -> None:
    """Wait until ``request``'s whole body (at most ``limit`` bytes, from ``setting``) is in its
    buffer, unread, so the handler's own read or form parse finds it there; PayloadTooLarge or
    BodyTimeout else."""
    if not request.body_exists:
        return
    length = request.content_length
    too_large = f"request body over the limit of {limit} bytes of this route ({setting})"
    if length is not None and length > limit:
        raise PayloadTooLarge(too_large)
    content = request.content
    content.set_read_chunk_size(length or limit)  # buffer it whole: reading is paused only past twice this
    try:
        await asyncio.wait_for(content.wait_eof(), timeout_s)
    except ConnectionResetError:  # aiohttp's "Connection lost", mid-body
        raise ClientGone(f"the client went away after {content.total_bytes} bytes of its body") from None
    except asyncio.TimeoutError:
        if content.total_bytes > limit:  # a chunked body over the limit: reading paused, nothing else to wait for
            raise PayloadTooLarge(too_large) from None
        raise BodyTimeout(
            f"the request body did not arrive within {timeout_s:g} s ({content.total_bytes} bytes came; "
            "--http-body-timeout-s)"
        ) from None
    if content.total_bytes > limit:
        raise PayloadTooLarge(too_large)


def error_response(status: str, message: str, http_status: int | None = None) -> web.Response:
    return web.json_response({"error": message}, status=http_status or HTTP_STATUS.get(status, 500))


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole body; ``limit`` is the application's ``client_max_size`` (--max-message-bytes)."""
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"request body over the limit of {limit} bytes (--max-message-bytes)") from None


def json_object(body: bytes, not_json: str, not_object: str, empty: dict[str, Any] | None = None) -> dict[str, Any]:
    """A request body that must be a JSON object, in each protocol's words: InvalidRequest
    ``"{not_json}: {reason}"`` for bad JSON, ``not_object`` for any other JSON value (and for an
    empty body unless ``empty`` is given)."""
    if not body.strip() and empty is not None:
        return empty
    try:
        doc = json.loads(body) if body.strip() else None
    except (ValueError, RecursionError) as exc:
        raise InvalidRequest(f"{not_json}: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidRequest(not_object)
    if _SURROGATE_ESCAPE.search(body):
        check_unicode(doc, not_json)
    return doc


# JSON may spell a lone UTF-16 surrogate ("\ud800"), which json.loads turns into a str that no
# UTF-8 encoder takes; raw UTF-8 bytes cannot hold one, so only a body with such an escape is walked.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def check_unicode(doc: Any, what: str) -> None:
    """InvalidRequest when a string anywhere in ``doc`` (a parsed JSON value) is not valid Unicode."""
    pending = [doc]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                bad = value[exc.start : exc.end].encode("unicode_escape").decode()
                raise InvalidRequest(
                    f"{what}: a string holds {bad}, a lone UTF-16 surrogate: not valid Unicode"
                ) from None


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
    def __init__(self, app: Any) -> None:  # app: attnserve.server.app.AttnServer
        self.app = app
        self.open_routes: set[str] = set()
        self.labels: dict[str, str] = {}  # route name -> metrics method label
        self.web = web.Application(
            client_max_size=app.settings.max_message_bytes, middlewares=[self._errors, self._auth]
        )
        self.parse_process = ParseProcess()  # large JSON bodies (KServe infer) off the event loop
        self._runner: web.AppRunner | None = None
        self._sock: socket.socket | None = None
        self._address: tuple[str, int] = ("", 0)
        from . import (
            deepl_routes,
            file_routes,
            generate_routes,
            glossary_routes,
            job_routes,
            kserve_routes,
            libretranslate_routes,
            openapi,
            web_routes,
        )

        kserve_routes.add_routes(self)
        generate_routes.add_routes(self)
        libre = libretranslate_routes.add_routes(self)
        job_routes.add_routes(self, file_routes.add_routes(self, libre))
        deepl_routes.add_routes(self)
        glossary_routes.add_routes(self)
        web_routes.add_routes(self)
        openapi.add_routes(self)

    def route(
        self,
        http_method: str,
        path: str,
        handler: Handler,
        *,
        label: str,
        inference: bool = False,
        open: bool = False,
        tracked: bool = True,
        cors: bool = False,
        body_limit: int | None = None,
        body_setting: str = "12 x --max-request-chars + 64 KiB",
        authenticate: Callable[[web.Request], None] | None = None,
        errors: Callable[[str, str, int | None], web.Response] | None = None,
    ) -> None:
        """Serve ``handler(request, call)`` at ``path``; ``label`` is its metrics method label.

        A tracked call's body (at most ``body_limit`` bytes, --max-message-bytes by default)
        arrives within --http-body-timeout-s before the call takes one of --max-concurrent-rpcs'
        slots; ``authenticate(request)`` (an open route checking its own keys) runs before that,
        on the head alone, and raises a ServingError to refuse. ``errors(status, message,
        http_status)``: a failed call's answer in the protocol's own shape (DeepL's), in place of
        ``{"error": message}``.

        ``tracked=False`` (health probes) skips the tracker: no metrics, answered while draining.
        ``cors=True`` (LibreTranslate's routes, which upstream serves to browser pages of any
        origin): every answer carries ``Access-Control-Allow-Origin: *`` and an ``OPTIONS``
        preflight at ``path`` is answered without a token (credentials travel in ``api_key``
        or the ``Authorization`` header, never in cookies).
        """
        name = f"{label}.r{len(self.labels)}"  # aiohttp route names: identifiers and dots
        self.labels[name] = label
        if open:
            self.open_routes.add(name)
        calls, settings = self.app.calls, self.app.settings
        limit = body_limit or settings.max_message_bytes
        setting = "--max-message-bytes" if limit == settings.max_message_bytes else body_setting

        async def wrapped(request: web.Request) -> web.StreamResponse:
            request_id = calls.request_id(request.headers.get(REQUEST_ID))
            if not tracked:
                return await handler(request, Call(label, "-", request_id))

            async def arrive() -> None:
                if authenticate is not None:
                    authenticate(request)
                await body_arrived(request, limit, settings.http_body_timeout_s, setting)

            call = None
            try:
                async with calls.track(
                    label,
                    request.match_info.get("model", ""),
                    request_id,
                    inference=inference,
                    limited=True,
                    arrive=arrive,
                ) as call:
                    request[CALL_KEY] = call
                    call.key = self.app.caller_key(request.headers.get("Authorization"))
                    response = await handler(request, call)
            except CallFailed as exc:
                response = (errors or error_response)(exc.status, exc.message, exc.http_status)
                if not request.content.is_eof():  # a body not read (refused, or too slow): "Connection: close"
                    response.force_close()
            if not response.prepared:
                response.headers[REQUEST_ID] = request_id
                if call is not None and call.load_ms:
                    response.headers[LOAD_MS_KEY] = f"{call.load_ms:.0f}"
                if cors:
                    response.headers["Access-Control-Allow-Origin"] = "*"
            return response

        self.web.router.add_route(http_method, path, wrapped, name=name)
        if cors:
            self._preflight(path, http_method, label)

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
        """aiohttp's own refusals (unknown path, wrong method, bad request line) as JSON errors too."""
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return web.json_response({"error": exc.reason}, status=exc.status, headers=_allow(exc))

    @web.middleware
    async def _auth(self, request: web.Request, handler) -> web.StreamResponse:
        checker = self.app.token_checker
        route = request.match_info.route
        name = getattr(route, "name", None)
        if checker is None or request.match_info.http_exception is not None or name in self.open_routes:
            return await handler(request)
        if checker.check(request.headers.get("Authorization")):
            return await handler(request)
        self.app._unauthenticated(self.labels.get(name, "http"))
        response = error_response("UNAUTHENTICATED", UNAUTHENTICATED_MESSAGE)
        response.headers["WWW-Authenticate"] = "Bearer"
        return response

    def bind(self, host: str, port: int) -> int:
        """Take ``host:port`` now (0 = any free port), before the models load; returns the port.
        Connections wait in the listen backlog until :meth:`start` serves them."""
        reuse_port = self.app.settings.workers > 1  # every worker process listens on the same port
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
        ssl_context = security.http_ssl_context(self.app.settings)
        # aiohttp closes a connection whose "keep-alive" wait outlasts keepalive_timeout, and that wait
        # lasts until a request's head is complete: so it is the header timeout too (slow-loris heads).
        access = self.app.settings.access_log
        runner = _Runner(
            self.web,
            access_log=logging.getLogger(access_log.__name__) if access else None,
            access_log_class=access_log.http_logger_class(CALL_KEY),
            handler_cancellation=True,
            shutdown_timeout=1.0,
            keepalive_timeout=self.app.settings.http_header_timeout_s,
        )
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


def _allow(exc: web.HTTPException) -> dict[str, str]:
    allow = exc.headers.get("Allow") if exc.headers else None
    return {"Allow": allow} if allow else {}


def json_response(data: Any, status: int = 200, *, ensure_ascii: bool = True) -> web.Response:
    """``ensure_ascii=False``: UTF-8 text as is (LibreTranslate's and Triton's generate replies)."""
    body = json.dumps(data, ensure_ascii=ensure_ascii).encode()
    return web.Response(body=body, status=status, content_type="application/json", charset="utf-8")
