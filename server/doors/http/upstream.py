"""LibreTranslate's conventions that its text routes and its file routes share: its keys (the
``Authorization`` header, else an ``api_key`` field) and its refusals' words, which its clients
match on."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from aiohttp import web

from ...service.routing import LanguageNotServed, language_name
from ...shared.calls import Call
from ...shared.errors import (
    Banned,
    InvalidOption,
    InvalidRequest,
    LimitExceeded,
    RateLimited,
    ServingError,
    UnknownFormat,
    echo,
)
from ...shared.security import bearer_token
from ..context import Auth
from .table import Token

UPSTREAM_LIMITS = ("max_request_chars", "max_text_chars", "max_texts_per_request")  # what upstream words


class Forbidden(ServingError):
    """A bad api_key: LibreTranslate answers 403."""

    status = "PERMISSION_DENIED"
    http_status = 403


class KeyMissing(ServingError):
    """No api_key where the server needs one: LibreTranslate answers 400, naming whom to ask."""

    status = "UNAUTHENTICATED"
    http_status = 400


class ApiKeys:
    """LibreTranslate's key checks over the server's bearer tokens."""

    def __init__(self, auth: Auth) -> None:
        self.auth = auth

    def header(self, label: str) -> Callable[[web.Request], None]:
        return functools.partial(self.check_header, label=label)

    def check_header(self, request: web.Request, label: str) -> None:
        """A key in the ``Authorization`` header is checked on the request's head, before its body
        is read: a wrong one is refused at once. Without the header, ``api_key`` decides."""
        header = request.headers.get("Authorization")
        if not header or self.auth.allows(header):
            return
        self.auth.refused(label, in_call=True)
        raise Forbidden("Invalid API key")

    def check_key(self, request: web.Request, fields: dict[str, Any], label: str, call: Call | None = None) -> None:
        """``api_key`` of the fields, where no ``Authorization`` header (checked first) was sent;
        ``call``: its key becomes the call's (whose stored glossaries the request reads)."""
        if not self.auth.keys_on or request.headers.get("Authorization"):
            return
        api_key = fields.get("api_key")
        if isinstance(api_key, str) and api_key and self.auth.allows(f"Bearer {api_key}"):
            if call is not None:
                call.key = self.auth.caller_key(f"Bearer {api_key}")
            return
        self.auth.refused(label, in_call=True)
        if not api_key:  # upstream's wording and status (400) for a request without a key
            raise KeyMissing("Please contact the server operator to get an API key")
        raise Forbidden("Invalid API key")

    def on_head(self, request: web.Request, label: str) -> None:
        """On the head, before the body is read: the ``Authorization`` header's key, else the query's ``api_key``."""
        self.check_header(request, label)
        if self.auth.keys_on and not request.headers.get("Authorization") and "api_key" in request.query:
            self.check_key(request, {"api_key": request.query["api_key"]}, label)

    def token(self, fields: Callable[[web.Request], Awaitable[dict[str, Any]]] | None = None) -> Token:
        """The api key a request presents, for its request rates, where the routes read it: the
        ``Authorization`` header's, else the query's ``api_key``, else the ``api_key`` of
        ``fields(request)`` (the body's fields, parsed once for the handler too)."""

        async def presented(request: web.Request) -> str | None:
            header = request.headers.get("Authorization")
            if header or "api_key" in request.query:
                return bearer_token(header) if header else request.query["api_key"]
            key = (await fields(request)).get("api_key") if fields is not None and request.body_exists else None
            return key if isinstance(key, str) else None

        return presented

    def caller_key(self, request: web.Request, fields: dict[str, Any]) -> str | None:
        """The api key the caller used (the header's token, else the form's), when keys are on."""
        if not self.auth.keys_on:
            return None
        return bearer_token(request.headers.get("Authorization")) or fields.get("api_key") or None


def slowdown(refused: RateLimited) -> tuple[int, str]:
    """A request past its client's request rate in LibreTranslate's status and words (its
    limiter's 429 ``Slowdown: 3 per 1 minute``), and a banned client's as its flood ban's (403)."""
    if isinstance(refused, Banned):
        return 403, "Too many request limits violations"
    return 429, f"Slowdown: {refused.limit} per 1 {refused.period}"


@contextlib.contextmanager
def upstream_words() -> Iterator[None]:
    """The service's typed refusals in LibreTranslate's words (its clients match on them)."""
    try:
        yield
    except LanguageNotServed as exc:
        if exc.code:
            raise InvalidRequest(f"{echo(exc.code, quoted=False)} is not supported") from None
        code, source = echo(exc.target, quoted=False), echo(exc.source, quoted=False)
        target = f"{echo(language_name(exc.target), quoted=False)} ({code}) is not available as a target language"
        if exc.target_only or not exc.source:
            raise InvalidRequest(target) from None
        raise InvalidRequest(f"{target} from {echo(language_name(exc.source), quoted=False)} ({source})") from None
    except LimitExceeded as exc:
        if exc.limit not in UPSTREAM_LIMITS:  # a file's limits: attnserve's own words, naming the setting
            raise
        what = "character" if exc.limit == "max_request_chars" else "text"
        raise InvalidRequest(f"Invalid request: request ({exc.value}) exceeds {what} limit ({exc.maximum})") from None
    except UnknownFormat as exc:
        raise InvalidRequest(f"{echo(exc.value, quoted=False)} format is not supported") from None
    except InvalidOption as exc:
        if exc.option != "beam_size" or exc.maximum is None:
            raise
        raise InvalidRequest(f"Invalid request: alternatives parameter must be <= {int(exc.maximum) - 1}") from None
