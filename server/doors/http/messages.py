"""HTTP request bodies read and answers written in the server's shapes, for every route: bodies
within the route's limit and --http-body-timeout-s, JSON objects checked once, errors as
``{"error": message}`` with the HTTP status of the gRPC status (:data:`HTTP_STATUS`)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import urllib.parse
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from ...shared.errors import DeadlineExceeded, InvalidRequest, Overloaded, ServingError

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


class PayloadTooLarge(Overloaded):
    """A body over --max-message-bytes: RESOURCE_EXHAUSTED, as gRPC answers an oversize message."""

    http_status = 413


class ClientGone(ServingError):
    """The client closed its connection before its body was in or read, or while its answer was
    written: nobody reads the answer."""

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
        if content.exception() is None:  # one set before the wait would never end it: no EOF comes
            await asyncio.wait_for(content.wait_eof(), timeout_s)
    except RequestPayloadError:
        pass  # the body's own fault, answered below
    except ConnectionResetError:  # aiohttp's "Connection lost", mid-body
        raise ClientGone(f"the client went away after {content.total_bytes} bytes of its body") from None
    except asyncio.TimeoutError:
        if content.total_bytes > limit:  # a chunked body over the limit: reading paused, nothing else to wait for
            raise PayloadTooLarge(too_large) from None
        raise BodyTimeout(
            f"the request body did not arrive within {timeout_s:g} s ({content.total_bytes} bytes came; "
            "--http-body-timeout-s)"
        ) from None
    if isinstance(failed := content.exception(), RequestPayloadError):  # bytes its Content-Encoding cannot decode
        reason = getattr(failed.__cause__, "message", None) or str(failed)
        raise InvalidRequest(f"the request body cannot be read: {' '.join(reason.split())}")
    if content.total_bytes > limit:
        raise PayloadTooLarge(too_large)


class DrainedBadBody(logging.Filter):
    """Drops aiohttp's "Unhandled exception" record (an ERROR with a traceback) of a body it could
    not decode (a ``Content-Encoding`` its bytes are not in, a broken chunked encoding), met again
    as it drains the request after the route answered it 400: the client's mistake is that
    answer and its access-log line. Installed on the ``aiohttp.server`` logger by the HTTP door."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], RequestPayloadError))


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


def json_response(data: Any, status: int = 200, *, ensure_ascii: bool = True) -> web.Response:
    """``ensure_ascii=False``: UTF-8 text as is (LibreTranslate's and Triton's generate replies)."""
    body = json.dumps(data, ensure_ascii=ensure_ascii).encode()
    return web.Response(body=body, status=status, content_type="application/json", charset="utf-8")


MAX_FORM_FIELDS = 1000  # aiohttp's default for multipart forms; the APIs' requests have a handful


def url_encoded_pairs(body: bytes) -> list[tuple[str, str]]:
    """A url-encoded form's (name, value) pairs, its bytes strictly UTF-8 as a JSON body's are
    (aiohttp's own parser replaces invalid bytes with U+FFFD, which would answer 200 where the same
    bytes in JSON get 400), at most ``MAX_FORM_FIELDS`` of them."""
    try:
        return urllib.parse.parse_qsl(
            body.decode("utf-8"), keep_blank_values=True, errors="strict", max_num_fields=MAX_FORM_FIELDS
        )
    except UnicodeDecodeError as exc:
        raise InvalidRequest(
            f"Invalid request: the form is not valid UTF-8: {exc.reason} at byte {exc.start}"
        ) from None
    except ValueError:  # parse_qsl's "Max number of fields exceeded"
        raise InvalidRequest(f"Invalid request: a form of more than {MAX_FORM_FIELDS} fields") from None


async def multipart_pairs(request: web.Request, limit: int) -> list[tuple[str, Any]]:
    """A multipart (or aiohttp-parsed) form's (name, value) pairs, within the body limit aiohttp
    applies (--max-message-bytes) and its limit on the number of fields."""
    try:
        form = await request.post()
    except web.HTTPRequestEntityTooLarge as exc:
        if "form fields" in (exc.text or ""):  # aiohttp's limit on the number of fields, not on bytes
            raise InvalidRequest(f"Invalid request: a form of more than {MAX_FORM_FIELDS} fields") from None
        raise PayloadTooLarge(f"request body over the limit of {limit} bytes (--max-message-bytes)") from None
    except (ValueError, AssertionError, UnicodeDecodeError) as exc:  # a malformed form or multipart body
        raise InvalidRequest(f"Invalid request: the form does not parse: {exc}") from None
    return list(form.items())
