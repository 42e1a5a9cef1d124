"""Access control: TLS / mutual TLS credentials and bearer-token authentication.

Tokens arrive as gRPC metadata ``authorization: Bearer <token>`` and are compared in
constant time: both sides are hashed (SHA-256) first, so neither the content nor the
length of a configured token leaks through timing, and every configured token is
compared on every call. The health service stays open (load balancers and
orchestrators probe it without credentials), and so do KServe's ServerLive, ServerReady
and ModelReady and the HTTP health routes; every other call, reflection included, needs a
token when tokens are configured (gRPC metadata or the HTTP ``Authorization`` header).
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import grpc

from .config import ConfigError, Settings
from .errors import echo
from .rate_table import shared_table
from .rates import RATE_NAMES, RateLimiter, rates_of

log = logging.getLogger(__name__)

OPEN_PREFIXES = ("/grpc.health.v1.Health/",)
QUOTA_NAME = "characters_per_month"  # a token's own monthly character quota in the token file
TOKEN_SETTINGS = (*RATE_NAMES, QUOTA_NAME)
UNAUTHENTICATED_MESSAGE = "missing or invalid bearer token: send metadata 'authorization: Bearer <token>'"


def _read(path: str, setting: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot read {path}: {exc.strerror or exc}") from None


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS credentials from ``tls_cert``/``tls_key`` (+ ``tls_client_ca`` = mutual TLS), or None."""
    if not settings.tls_cert:
        return None
    key, cert = _read(settings.tls_key, "tls_key"), _read(settings.tls_cert, "tls_cert")
    ca = _read(settings.tls_client_ca, "tls_client_ca") if settings.tls_client_ca else None
    try:
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)
    except Exception as exc:  # noqa: BLE001 - grpc raises untyped errors on bad PEM
        raise ConfigError(f"tls_cert/tls_key: not a usable PEM certificate and key: {exc}") from None


def http_ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The HTTP server's TLS from the same ``tls_*`` settings as gRPC's (mutual TLS with ``tls_client_ca``)."""
    if not settings.tls_cert:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(settings.tls_cert, settings.tls_key)
        if settings.tls_client_ca:
            context.load_verify_locations(settings.tls_client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"tls_cert/tls_key/tls_client_ca: not usable for HTTPS: {exc}") from None
    return context


def load_tokens(settings: Settings) -> list[str]:
    """Tokens from ``auth_tokens`` (comma-separated) and ``auth_token_file`` (one per line)."""
    tokens = [t.strip() for t in settings.auth_tokens.split(",") if t.strip()]
    if settings.auth_token_file:
        tokens += [token for token, _ in token_file(settings)]
        if not tokens:  # fail closed: a token file that lost its tokens must not open the server
            raise ConfigError(f"auth_token_file: {settings.auth_token_file} holds no token")
    if any(len(t) < 16 for t in tokens):
        log.warning("a bearer token shorter than 16 characters is configured: use long random tokens")
    return tokens


def token_file(settings: Settings) -> list[tuple[str, dict[str, int]]]:
    """The lines of ``auth_token_file``: a token, then optionally its own request rates and
    monthly character quota as ``name=N`` (``requests_per_minute``, ``requests_per_hour``,
    ``requests_per_day``, ``characters_per_month``; 0 = unlimited), all separated by whitespace;
    from a word starting with '#' on, a comment. A line's fault is a ConfigError naming its line,
    never its token."""
    path, found = settings.auth_token_file, []
    text = _read(path, "auth_token_file").decode("utf-8", "replace")
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        words = words[: next((i for i, word in enumerate(words) if word.startswith("#")), len(words))]
        if not words:
            continue
        rates: dict[str, int] = {}
        for word in words[1:]:
            name, equals, value = word.partition("=")
            if name not in TOKEN_SETTINGS or not value.isdigit():
                what = f"{echo(name)}={echo(value, 16, quoted=False)}" if equals else "a word with no '='"
                raise ConfigError(
                    f"auth_token_file: {path} line {number}: after the token, {what} is not "
                    "requests_per_minute=N, requests_per_hour=N, requests_per_day=N or characters_per_month=N "
                    "(N a whole number, 0 = unlimited)"
                )
            rates[name] = int(value)
        found.append((words[0], rates))
    return found


def token_rates(settings: Settings) -> dict[str, dict[str, int]]:
    """The request rates (and quotas) the token file gives its tokens, by key (each token's sha256, ``Call.key``)."""
    if not settings.auth_token_file:
        return {}
    return {key_digest(token): rates for token, rates in token_file(settings) if rates}


def character_quotas(settings: Settings) -> dict[str, int]:
    """The monthly character quotas the token file gives its tokens, by key (0: unlimited); the
    other tokens and the clients without one have ``--characters-per-month``."""
    return {key: own[QUOTA_NAME] for key, own in token_rates(settings).items() if QUOTA_NAME in own}


def rate_limiter(settings: Settings) -> RateLimiter | None:
    """Every client's request rates (``--requests-per-minute``, ``--requests-per-hour``,
    ``--requests-per-day``) and those the token file gives its tokens, each over the defaults it
    does not name, with the ban of ``--ban-after-refusals``, counted in the workers' shared table
    under ``--workers N``; None where no client has any rate."""
    defaults = {name: getattr(settings, name) for name in RATE_NAMES}
    rates = rates_of(defaults, _flag)
    overrides = {
        key: rates_of({**defaults, **own}, lambda name, own=own: _own(name) if name in own else _flag(name))
        for key, own in token_rates(settings).items()
    }
    if not rates and not any(overrides.values()):
        if settings.ban_after_refusals:
            log.warning("ban_after_refusals: no client has a request rate to be refused by, so none is banned")
        return None
    return RateLimiter(
        rates,
        overrides,
        ban_after=settings.ban_after_refusals,
        ban_seconds=settings.ban_seconds,
        clients=shared_table(),  # the workers' table with --workers N, else this process's memory
    )


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _own(name: str) -> str:
    return f"{name} of its token in --auth-token-file"


def _digest(token: str | bytes) -> bytes:
    return hashlib.sha256(token.encode() if isinstance(token, str) else token).digest()


def bearer_token(authorization: str | bytes | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value (the scheme in any case), else None."""
    if isinstance(authorization, bytes):
        authorization = authorization.decode("latin-1")
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def key_digest(api_key: str | None) -> str:
    """What a record keeps in place of the key that owns it (a download, a job, a glossary): its
    sha256, "" for none."""
    return hashlib.sha256(api_key.encode()).hexdigest() if api_key else ""


class TokenChecker:
    """Constant-time membership of a presented token in the configured set."""

    def __init__(self, tokens: list[str]) -> None:
        if not tokens:
            raise ValueError("TokenChecker needs at least one token")
        self._digests = [_digest(t) for t in tokens]

    def check(self, authorization: str | bytes | None) -> bool:
        token = bearer_token(authorization)
        presented = _digest(token if token is not None else "\0invalid")
        ok = False
        for digest in self._digests:  # no early exit: the time does not say which token matched
            ok |= hmac.compare_digest(presented, digest)
        return ok and token is not None


def _deny(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``handler`` that answers UNAUTHENTICATED."""

    async def unary(request, context):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)

    async def stream(request_or_iterator, context):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)
        yield  # pragma: no cover - makes this an async generator

    # never parse an unauthenticated request
    return handler_like(handler, unary, stream, request_deserializer=None, response_serializer=None)


def handler_like(
    handler: grpc.RpcMethodHandler, unary: Callable, stream: Callable, **serializers: Any
) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s kind (unary or streaming reply) running ``unary`` or ``stream``."""
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(unary, **serializers)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(stream, **serializers)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(unary, **serializers)
    return grpc.stream_stream_rpc_method_handler(stream, **serializers)


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):
    """Rejects calls without a valid bearer token (except :data:`OPEN_PREFIXES`) with UNAUTHENTICATED."""

    def __init__(
        self, checker: TokenChecker, on_reject: Callable[[str], None], open_prefixes: tuple[str, ...] = OPEN_PREFIXES
    ) -> None:
        self.checker = checker
        self.on_reject = on_reject
        self.open_prefixes = open_prefixes

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = details.method or ""
        if method.startswith(self.open_prefixes):
            return await continuation(details)
        authorization = next((v for k, v in details.invocation_metadata or () if k == "authorization"), None)
        if self.checker.check(authorization):
            return await continuation(details)
        handler = await continuation(details)
        if handler is None:  # unknown method: UNIMPLEMENTED either way
            return None
        self.on_reject(method.rsplit("/", 1)[-1])
        return _deny(handler)


class ParseGuardInterceptor(grpc.aio.ServerInterceptor):
    """Requests that do not parse as their message (corrupt wire format, invalid UTF-8 in a
    string field) get INVALID_ARGUMENT; grpcio alone answers them UNKNOWN with a traceback in the log."""

    def __init__(self, parsers: Mapping[str, Callable[[bytes], Any]] | None = None) -> None:
        # A method's own parser in place of its message's FromString (v1_wire's Classify, which
        # leaves image tensors in the received bytes); it raises like FromString on bad bytes.
        self.parsers = dict(parsers or {})
        # method -> (the handler it was given, its guarded copy): a method's handler is the same
        # object call after call, so its guard is built once (bounded by the served methods).
        self._guarded: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or handler.request_deserializer is None or handler.request_streaming:
            return handler
        method = details.method
        known = self._guarded.get(method)
        if known is not None and known[0] is handler:
            return known[1]
        guarded = self._guard(handler, method, self.parsers.get(method, handler.request_deserializer))
        self._guarded[method] = (handler, guarded)
        return guarded

    @staticmethod
    def _guard(handler: grpc.RpcMethodHandler, method: str, parse: Callable[[bytes], Any]) -> grpc.RpcMethodHandler:

        async def parsed(raw: bytes, context: grpc.aio.ServicerContext):
            try:
                return parse(raw)
            except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError, or a UnicodeDecodeError
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, f"request of {method} is not a valid message: {exc}"
                )

        if handler.unary_unary:
            inner = handler.unary_unary

            async def unary(raw, context):
                return await inner(await parsed(raw, context), context)

            return grpc.unary_unary_rpc_method_handler(
                unary, request_deserializer=None, response_serializer=handler.response_serializer
            )
        inner_stream = handler.unary_stream
        if inspect.isasyncgenfunction(inner_stream):

            async def stream(raw, context):
                async for reply in inner_stream(await parsed(raw, context), context):
                    yield reply

        else:  # a handler that writes its replies with context.write (grpc.health.v1's Watch)

            async def stream(raw, context):
                return await inner_stream(await parsed(raw, context), context)

        return grpc.unary_stream_rpc_method_handler(
            stream, request_deserializer=None, response_serializer=handler.response_serializer
        )
