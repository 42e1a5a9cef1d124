"""LibreTranslate's file routes on the HTTP server, codecs of the file service.

- ``POST /translate_file``: a multipart form of ``file``, ``source`` (a code or ``auto``),
  ``target``, ``api_key`` and attnserve's ``glossary_id`` (a stored glossary of the key) ->
  ``{"translatedFileUrl": ".../download_file/<name>"}``, the whole file translated first (as
  upstream does);
- ``GET /download_file/<name>``: the translated file, as an attachment under its original
  name; with api keys on, only for the key that asked for it (``api_key`` in the query or
  the ``Authorization`` header); 404 ``"... expired ..."`` once it is gone.

Errors are LibreTranslate's: 400 for a missing field, an unsupported or unreadable file, a
file over ``--max-file-bytes``, ``--max-file-chars`` or ``--file-cpu-seconds``; 403 for a wrong
key; 413 for a body over twice ``--max-file-bytes`` or a file over ``--file-memory-bytes``; 504
past ``--file-timeout-seconds``. A key in the ``Authorization`` header or the query's
``api_key`` is checked on the request's head, before the body is read; the form is read part
by part with its own limits (at most ``MAX_PARTS`` parts, each field but the file 64 KiB), so
no form, keyed or not, holds the event loop, and a file route needs no larger
``--max-message-bytes``. ``translatedFileUrl`` starts with ``--public-url`` when it is set,
else with the scheme and Host header of the request. Stored files: the service's
``Downloads`` (``service/downloads.py``), opened as these routes are built and swept while the
HTTP server runs.
"""

from __future__ import annotations

import functools
import urllib.parse

from aiohttp import web

from ...service.downloads import translated_filename
from ...service.files import FileRequest
from ...shared.calls import Call
from ...shared.errors import InvalidRequest
from .. import params
from .forms import FORM_SLACK, file_response, form_fields, read_form
from .table import RouteTable
from .upstream import ApiKeys, slowdown, upstream_words

LABEL = "libretranslate.translate_file"


class FileRoutes:
    def __init__(self, table: RouteTable) -> None:
        self.doors, self.keys = table.doors, ApiKeys(table.doors.auth)
        self.downloads = self.doors.downloads
        self.downloads.open()
        table.web.on_startup.append(self._start_sweeping)
        table.web.on_cleanup.append(self._stop_sweeping)

    async def _start_sweeping(self, _: web.Application) -> None:
        self.downloads.start()

    async def _stop_sweeping(self, _: web.Application) -> None:
        await self.downloads.stop()

    def authenticate(self, request: web.Request) -> None:
        self.keys.on_head(request, LABEL)

    async def translate_file(self, request: web.Request, call: Call) -> web.Response:
        fields, filename, content = await read_form(request)
        if "api_key" in request.query:  # checked with the head (authenticate)
            fields["api_key"] = request.query["api_key"]
        self.keys.check_key(request, fields, call.method, call)  # the form's key reads its glossaries
        if not filename and not content:
            raise InvalidRequest("Invalid request: missing file parameter")
        self.doors.files.check_size(len(content))
        for name in ("source", "target"):
            if not fields.get(name):
                raise InvalidRequest(f"Invalid request: missing {name} parameter")
        glossary_id = params.glossary_id(fields)
        wanted = FileRequest(call, filename, content, fields["source"], fields["target"], glossary_id=glossary_id)
        with upstream_words():
            done = await self.doors.files.translate(wanted)
        key = self.keys.caller_key(request, fields)
        saved_as = translated_filename(done.filename, fields["target"])
        name = await self.downloads.save(done.content, saved_as, done.media_type, key)
        return web.json_response(
            {"translatedFileUrl": self._public(request, f"/download_file/{urllib.parse.quote(name)}")}
        )

    def _public(self, request: web.Request, path: str) -> str:
        """``path``'s URL as clients reach this server: --public-url, else the request's scheme and Host."""
        base = self.doors.settings.public_url
        if base:
            return base.rstrip("/") + path
        return str(request.url.with_path(path, encoded=True).with_query(None))  # ``path`` is quoted already

    async def download_file(self, request: web.Request, call: Call) -> web.StreamResponse:
        key = self.keys.caller_key(request, dict(request.query))
        keys_on = self.doors.auth.keys_on
        found = await self.downloads.fetch(request.match_info["name"], key, keys_on)
        return file_response(found.path, found.media_type, found.filename)


def add_routes(table: RouteTable) -> None:
    routes = FileRoutes(table)
    route = functools.partial(table.route, open=True, cors=True, slowdown=slowdown)
    route(
        "POST",
        "/translate_file",
        routes.translate_file,
        label=LABEL,
        inference=True,
        body_limit=2 * table.doors.settings.max_file_bytes + FORM_SLACK,
        body_setting="2 x --max-file-bytes + 256 KiB",
        authenticate=routes.authenticate,
        token=routes.keys.token(form_fields),
    )
    download = routes.download_file
    route("GET", "/download_file/{name}", download, label="libretranslate.download_file", token=routes.keys.token())
