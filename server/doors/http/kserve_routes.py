"""KServe v2 REST routes (and Triton's statistics and repository routes) on the HTTP server.

Codecs: read the body -> ``kserve.rest`` / ``kserve.describe`` -> ``KServeInference`` (the
services) -> the reply. Metrics method labels are ``kserve.http.<operation>`` (gRPC's are
``kserve.<RPC>``); health routes are open and untracked, like gRPC's health service.

| route | what |
|---|---|
| GET /v2 | server metadata (name, version, extensions) |
| GET /v2/health/live, /v2/health/ready | 200 when live / ready, else 400 (Triton's answer) |
| GET /v2/models/{model}[/versions/{version}] | model metadata |
| GET /v2/models/{model}[/versions/{version}]/ready | 200 / 400 with {"error": why not} |
| GET /v2/models/{model}[/versions/{version}]/config | model config (Triton's JSON) |
| POST /v2/models/{model}[/versions/{version}]/infer | inference, JSON and binary data |
| GET /v2/models[/{model}[/versions/{version}]]/stats | statistics |
| POST /v2/repository/index, /v2/repository/models/{model}/load, /unload | repository (load/unload: --enable-admin) |
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ...shared.calls import Call
from ...shared.errors import InvalidRequest, NotEnabled, ServingError, echo
from ..kserve import describe, rest
from ..kserve.describe import check_repository_parameters
from ..kserve.infer import KServeInference
from .messages import error_response, json_object, json_response, read_body
from .table import RouteTable

VERSIONED = ("/v2/models/{model}", "/v2/models/{model}/versions/{version}")
# KServe's and Triton's paths under /v2 (Triton's shared memory, trace and logging extensions
# included, which this door does not serve over HTTP): what Triton's clients may ask for
TRITON_PREFIXES = (
    "/v2/health",
    "/v2/models",
    "/v2/repository",
    "/v2/systemsharedmemory",
    "/v2/cudasharedmemory",
    "/v2/trace",
    "/v2/logging",
)


class KServeRoutes:
    """The routes' handlers: codecs of the application's KServe inference and descriptions."""

    def __init__(self, table: RouteTable) -> None:
        self.doors = table.doors
        self.kserve = KServeInference(table.doors)
        self.parse_process = table.parse_process

    def model_of(self, request: web.Request, call: Call):
        model = self.doors.models.get(request.match_info["model"], request.match_info.get("version", ""))
        call.model = model.name
        return model

    async def server_metadata(self, request: web.Request, call: Call) -> web.Response:
        return json_response(describe.to_json(describe.server_metadata(self.doors.settings)))

    async def live(self, request: web.Request, call: Call) -> web.Response:
        return web.Response(status=200)

    async def ready(self, request: web.Request, call: Call) -> web.Response:
        return web.Response(status=200 if self.doors.models.ready else 400)

    async def model_ready(self, request: web.Request, call: Call) -> web.Response:
        name, version = request.match_info["model"], request.match_info.get("version", "")
        if self.doors.models.model_ready(name, version):
            return web.Response(status=200)
        # Not ready is 400, as Triton answers (with {"error": "Model version not ready"}); the
        # body says why: an unknown model or version (NOT_FOUND elsewhere), or a server not taking work.
        # The route is open (a probe), so a caller without a token, where tokens are on, learns
        # no other model's name and no load error (which names the repository's paths).
        if not self.doors.auth.allows(request.headers.get("Authorization")):
            return error_response("INVALID_ARGUMENT", f"model {name!r} version {version or '-'} is not ready", 400)
        try:
            self.doors.models.get(name, version)
            message = f"model {echo(name)} is not ready: the server is not taking work (starting or shutting down)"
            if self.doors.models.failing(name):
                message = f"not ready: {self.doors.models.state(name)[1]}"  # its failed load, and when it is retried
        except ServingError as exc:  # each names the model
            message = f"not ready: {exc}"
        return error_response("INVALID_ARGUMENT", message, 400)

    async def metadata(self, request: web.Request, call: Call) -> web.Response:
        return json_response(describe.to_json(describe.model_metadata(self.model_of(request, call))))

    async def config(self, request: web.Request, call: Call) -> web.Response:
        model = self.model_of(request, call)
        return json_response(describe.to_json(describe.model_config(model, self.doors.settings)))

    async def infer(self, request: web.Request, call: Call) -> web.Response:
        body = await read_body(request, self.doors.settings.max_message_bytes)
        name, version = request.match_info["model"], request.match_info.get("version", "")
        header_length = request.headers.get(rest.HEADER_LENGTH)
        json_bytes = rest.json_size(body, header_length)
        parsed = await self.parse_process.parse(rest.parse_infer, body, json_bytes, header_length, name, version)
        response = await self.kserve.infer(parsed, call)
        payload, header_length = rest.render_infer(response, parsed)
        if header_length is None:
            return web.Response(body=payload, content_type="application/json")
        return web.Response(
            body=payload,
            content_type="application/octet-stream",
            headers={rest.HEADER_LENGTH: str(header_length)},
        )

    async def statistics(self, request: web.Request, call: Call) -> web.Response:
        if "model" in request.match_info:
            models = [self.model_of(request, call)]
        else:
            models = sorted(self.doors.models.models.values(), key=lambda m: m.name)
        view, calls = self.doors.models, self.doors.calls
        stats = [
            describe.to_json(describe.model_statistics(m.name, view.executions(m.name), calls.stats.get(m.name)))
            for m in models
        ]
        return json_response({"model_stats": stats})

    async def index(self, request: web.Request, call: Call) -> web.Response:
        body = await _json_object(request, self.doors.settings.max_message_bytes)
        ready_only = body.get("ready", False) is True
        index = describe.repository_index(self.doors.models, ready_only)
        return json_response([describe.to_json(m) for m in index.models])

    async def load(self, request: web.Request, call: Call) -> web.Response:
        await self._admin(request)
        await self.doors.repository.load(request.match_info["model"])
        return web.Response(status=200)

    async def unload(self, request: web.Request, call: Call) -> web.Response:
        await self._admin(request)
        await self.doors.repository.unload(request.match_info["model"])
        return web.Response(status=200)

    async def _admin(self, request: web.Request) -> None:
        if not self.doors.settings.enable_admin:
            raise NotEnabled("model load and unload are admin operations: start the server with --enable-admin")
        parameters = (await _json_object(request, self.doors.settings.max_message_bytes)).get("parameters") or {}
        if not isinstance(parameters, dict):
            raise InvalidRequest("parameters must be a JSON object")
        check_repository_parameters(parameters)


def add_routes(table: RouteTable) -> None:
    r = KServeRoutes(table)
    table.route("GET", "/v2", r.server_metadata, label="kserve.http.ServerMetadata", metered=False)
    table.route("GET", "/v2/health/live", r.live, label="kserve.http.ServerLive", open=True, tracked=False)
    table.route("GET", "/v2/health/ready", r.ready, label="kserve.http.ServerReady", open=True, tracked=False)
    table.route(
        "GET", "/v2/models/stats", r.statistics, label="kserve.http.ModelStatistics", metered=False
    )  # before {model}
    for base in VERSIONED:
        table.route("GET", base, r.metadata, label="kserve.http.ModelMetadata", metered=False)
        table.route("GET", f"{base}/ready", r.model_ready, label="kserve.http.ModelReady", open=True, tracked=False)
        table.route("GET", f"{base}/config", r.config, label="kserve.http.ModelConfig", metered=False)
        table.route("POST", f"{base}/infer", r.infer, label="kserve.http.ModelInfer", inference=True)
        table.route("GET", f"{base}/stats", r.statistics, label="kserve.http.ModelStatistics", metered=False)
    table.route("POST", "/v2/repository/index", r.index, label="kserve.http.RepositoryIndex", metered=False)
    table.route("POST", "/v2/repository/models/{model}/load", r.load, label="kserve.http.RepositoryModelLoad")
    table.route("POST", "/v2/repository/models/{model}/unload", r.unload, label="kserve.http.RepositoryModelUnload")
    for prefix in TRITON_PREFIXES:  # unrouted, they stay KServe's {"error": ...} beside DeepL's /v2/
        table.refuse(prefix, None)


async def _json_object(request: web.Request, limit: int) -> dict[str, Any]:
    body = await read_body(request, limit)
    return json_object(body, "request body is not valid JSON", "the request body must be a JSON object", empty={})
