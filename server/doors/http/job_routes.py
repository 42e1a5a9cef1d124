"""File jobs on the HTTP server (``service.file_jobs``), beside LibreTranslate's file routes.

LibreTranslate has no job API, so these routes take its ``/translate_file`` form and keys:

- ``POST /jobs``: the multipart form of ``/translate_file`` (``file``, ``source``, ``target``,
  ``api_key``, ``glossary_id``) -> 202 ``{"id": ..., "status": "queued", ...}`` at once;
- ``GET /jobs/{id}``: the job (``status`` queued / running / done / failed / cancelled,
  ``done`` / ``total`` sentences, ``remaining_s``, ``error``, ``reused``, ``decoded``);
- ``GET /jobs/{id}/events``: ``text/event-stream``, an event ``progress`` with the job's JSON
  each time it changes, the last one ``done``, ``failed`` or ``cancelled``;
- ``DELETE /jobs/{id}``: cancels it (the job as it then is);
- ``GET /jobs/{id}/result``: the translated file, as ``/download_file`` sends it; 409 until done.

With api keys on, each route takes the key as ``/translate_file`` does (the ``Authorization``
header, or ``api_key`` in the form or the query), and a job is only ever found with the key
that submitted it: any other gets 404.
"""

from __future__ import annotations

import functools
import json

from aiohttp import web

from ...service.downloads import translated_filename
from ...service.file_jobs import JobRequest
from ...service.job_records import view
from ...shared.calls import Call
from ...shared.errors import InvalidRequest
from .. import params
from .file_routes import LABEL as FILE_LABEL
from .forms import FORM_SLACK, file_response, form_fields, read_form
from .table import RouteTable
from .upstream import ApiKeys

LABEL = "jobs"
WATCH_S = 0.25  # between two looks at a watched job's record


class JobRoutes:
    def __init__(self, table: RouteTable) -> None:
        self.doors, self.keys = table.doors, ApiKeys(table.doors.auth)

    def _key(self, request: web.Request) -> str | None:
        """The caller's key, checked: none with keys on is 400, a wrong one 403, as upstream answers."""
        self.keys.on_head(request, FILE_LABEL)
        self.keys.check_key(request, dict(request.query), LABEL)
        return self.keys.caller_key(request, dict(request.query))

    async def submit(self, request: web.Request, call: Call) -> web.Response:
        fields, filename, content = await read_form(request)
        if "api_key" in request.query:
            fields["api_key"] = request.query["api_key"]
        self.keys.check_key(request, fields, call.method)
        if not filename and not content:
            raise InvalidRequest("Invalid request: missing file parameter")
        for name in ("source", "target"):
            if not fields.get(name):
                raise InvalidRequest(f"Invalid request: missing {name} parameter")
        key = self.keys.caller_key(request, fields)
        languages = (fields["source"], fields["target"], fields.get("model", ""))
        wanted = JobRequest(key, filename, content, *languages, params.glossary_id(fields), client=call.client)
        job = await self.doors.jobs.submit(wanted)
        return web.json_response(view(job), status=202)

    async def get(self, request: web.Request, call: Call) -> web.Response:
        job = await self.doors.jobs.get(self._key(request), request.match_info["id"])
        return web.json_response(view(job))

    async def cancel(self, request: web.Request, call: Call) -> web.Response:
        job = await self.doors.jobs.cancel(self._key(request), request.match_info["id"])
        return web.json_response(view(job))

    async def events(self, request: web.Request, call: Call) -> web.StreamResponse:
        """Ends with the job, or when the server stops (the client re-attaches to the next one)."""
        key, job_id = self._key(request), request.match_info["id"]
        await self.doors.jobs.get(key, job_id)  # an unknown id is a 404, not an empty stream
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        async for job in self.doors.jobs.watch(key, job_id, WATCH_S):
            name = job.status if job.finished else "progress"
            await response.write(f"event: {name}\ndata: {json.dumps(view(job))}\n\n".encode())
        await response.write_eof()
        return response

    async def result(self, request: web.Request, call: Call) -> web.StreamResponse:
        job, path = await self.doors.jobs.result(self._key(request), request.match_info["id"])
        # named as /download_file names it (report.de.docx): not the sent file's own name
        name = translated_filename(job.filename, job.target)
        return file_response(path, job.media_type, name)


def add_routes(table: RouteTable) -> None:
    routes = JobRoutes(table)
    route = functools.partial(table.route, open=True, cors=True)
    route(
        "POST",
        "/jobs",
        routes.submit,
        label=f"{LABEL}.submit",
        body_limit=2 * table.doors.settings.max_file_bytes + FORM_SLACK,
        body_setting="2 x --max-file-bytes + 256 KiB",
        authenticate=functools.partial(routes.keys.on_head, label=FILE_LABEL),
        token=routes.keys.token(form_fields),
    )
    for method, path, handler, name in (
        ("GET", "/jobs/{id}", routes.get, "get"),
        ("DELETE", "/jobs/{id}", routes.cancel, "cancel"),
        ("GET", "/jobs/{id}/events", routes.events, "events"),
        ("GET", "/jobs/{id}/result", routes.result, "result"),
    ):
        route(method, path, handler, label=f"{LABEL}.{name}", token=routes.keys.token())
