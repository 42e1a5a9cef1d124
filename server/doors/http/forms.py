"""Multipart forms carrying a file, and stored files sent back as downloads: what every HTTP door
that takes or returns files reads and writes (LibreTranslate's /translate_file, the jobs, DeepL's
/v2/document)."""

from __future__ import annotations

import asyncio
import re
import urllib.parse
from pathlib import Path

from aiohttp import BodyPartReader, hdrs, web
from aiohttp.multipart import parse_content_disposition

from ...shared.errors import InvalidRequest

FIELD_BYTES = 64 << 10  # source, target, api_key: a few bytes each
MAX_PARTS = 100  # file, source, target, api_key and room for what other clients add; aiohttp takes ~0.2 ms a part
FORM_SLACK = 256 << 10  # the form's other fields and part headers, over the file itself
# A body of up to twice --max-file-bytes is read, so a file somewhat over the limit gets the
# service's 400 naming its size and the limit; a larger body is refused unread (413).

# What a browser escapes in a form's file name (WHATWG's multipart/form-data encoding, RFC 7578's
# "percent-encoding" as Chrome, Firefox and Safari apply it): LF, CR and '"' as %0A, %0D and %22,
# and nothing else, not even "%" itself; so only these three are decoded (undici's rule), and a
# name's other "%" sequences stay as they were sent.
_BROWSER_ESCAPES = re.compile("%(0[AaDd]|22)")


def sent_filename(part: BodyPartReader) -> str:
    """The file name as the user had it: a browser's ``my %22report%22.docx`` is ``my "report".docx``
    (the download store then makes it safe). A name given as RFC 8187's ``filename*`` is read as
    aiohttp decodes it, nothing more."""
    name = part.filename or ""
    _, params = parse_content_disposition(part.headers.get(hdrs.CONTENT_DISPOSITION))
    if "filename" not in params or any(key.startswith("filename*") for key in params):
        return name
    return _BROWSER_ESCAPES.sub(lambda m: chr(int(m[1], 16)), name)


FORM = web.RequestKey("attnserve_form", tuple)


async def read_form(request: web.Request) -> tuple[dict[str, str], str, bytes]:
    """(text fields, the file's name, its bytes) of a multipart form; InvalidRequest when malformed.
    Read once: its ``api_key`` is read for the request rates before the handler reads the form."""
    if (known := request.get(FORM)) is not None:
        return known
    request[FORM] = form = await _read_form(request)
    return form


async def form_fields(request: web.Request) -> dict[str, str]:
    """The text fields of a multipart form (:func:`read_form`)."""
    return (await read_form(request))[0]


async def _read_form(request: web.Request) -> tuple[dict[str, str], str, bytes]:
    if not request.content_type.startswith("multipart/"):
        raise InvalidRequest("Invalid request: send the file as multipart/form-data (fields file, source, target)")
    fields: dict[str, str] = {}
    filename, content = "", b""
    parts = 0
    try:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            parts += 1
            if parts > MAX_PARTS:
                raise InvalidRequest(f"Invalid request: the form has more than {MAX_PARTS} parts")
            if not isinstance(part, BodyPartReader) or not part.name:
                continue
            if part.name == "file":
                filename = sent_filename(part)
                content = bytes(await part.read())  # the body is already in, within the route's limit
            else:
                value = await part.read_chunk(FIELD_BYTES)
                fields.setdefault(part.name, value.decode("utf-8"))
    except (ValueError, AssertionError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"Invalid request: the form does not parse: {exc}") from None
    return fields, filename, content


def content_disposition(filename: str) -> str:
    ascii_name = filename.encode("ascii", "replace").decode().replace('"', "_")
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{urllib.parse.quote(filename)}"


def file_response(path: Path, media_type: str, filename: str) -> web.FileResponse:
    """A stored file as its download: its media type, its name, never cached."""
    headers = {"Content-Type": media_type, "Content-Disposition": content_disposition(filename)}
    return web.FileResponse(path, headers={**headers, "Cache-Control": "no-store"})


async def sent_whole(request: web.Request, path: Path, media_type: str, filename: str) -> web.Response:
    """A stored file sent as :func:`file_response` sends it, returned once the client has it all
    (a client gone midway raises ``ConnectionError``), so that the caller may then remove it."""
    body = await asyncio.get_running_loop().run_in_executor(None, path.read_bytes)
    headers = {"Content-Type": media_type, "Content-Disposition": content_disposition(filename)}
    response = web.Response(body=body, headers={**headers, "Cache-Control": "no-store"})
    await response.prepare(request)
    await response.write_eof()
    return response
