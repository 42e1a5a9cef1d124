"""The HTTP API as an OpenAPI 3.1 document, served at ``GET /openapi.json``.

Every operation the HTTP door serves is one row of :data:`OPERATIONS` (method, path, tag,
summary, request body, responses); ``tests/server/http/test_openapi.py`` fails when a route is
served without a row or a row names a route that is not served, and validates the document
against the OpenAPI 3.1 schema. Request bodies are described as far as a client needs them to
call the route; the doors' codecs remain what decides (docs/protocols.md has every field).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from ...shared.calls import Call
from . import deepl_openapi
from .table import RouteTable

VERSION = "0.1.0"
ERROR = {"$ref": "#/components/schemas/Error"}
TEXTS = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}

SCHEMAS: dict[str, Any] = {
    "Error": {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]},
    "LibreTranslateRequest": {
        "type": "object",
        "required": ["q", "target"],
        "properties": {
            "q": TEXTS,
            "source": {"type": "string", "description": "a language code, or auto (detected per text)"},
            "target": {"type": "string"},
            "format": {"type": "string", "enum": ["text", "html", "markdown"]},
            "alternatives": {"type": "integer", "minimum": 0},
            "api_key": {"type": "string"},
            "alignments": {"type": "boolean", "description": "attnserve: word alignments per sentence"},
            "attention": {"type": "boolean", "description": "attnserve: the attention map (with alignments)"},
            "quality": {"type": "boolean", "description": "attnserve: a 0-1 quality score per text"},
        },
    },
    "LibreTranslateReply": {
        "type": "object",
        "properties": {
            "translatedText": TEXTS,
            "detectedLanguage": {},
            "alternatives": {"type": "array"},
            "pivot": {"type": "string"},
            "alignments": {"type": "array"},
            "quality": {"oneOf": [{"type": "number"}, {"type": "array", "items": {"type": "number"}}]},
            "lowQuality": {"oneOf": [{"type": "boolean"}, {"type": "array", "items": {"type": "boolean"}}]},
        },
    },
    "DetectRequest": {
        "type": "object",
        "required": ["q"],
        "properties": {"q": {"type": "string"}, "api_key": {"type": "string"}},
    },
    "Detection": {
        "type": "object",
        "properties": {"language": {"type": "string"}, "confidence": {"type": "number", "minimum": 0, "maximum": 100}},
    },
    "FileForm": {
        "type": "object",
        "required": ["file", "target"],
        "properties": {
            "file": {"type": "string", "format": "binary"},
            "source": {"type": "string"},
            "target": {"type": "string"},
            "api_key": {"type": "string"},
            "glossary_id": {"type": "string", "description": "a stored glossary of the key (needs source)"},
        },
    },
    "Job": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "status": {"type": "string", "enum": ["queued", "running", "done", "failed", "cancelled"]},
            "done": {"type": "integer"},
            "total": {"type": "integer"},
            "remaining_s": {"type": ["number", "null"]},
            "error": {"type": ["string", "null"]},
            "glossary_id": {"type": "string"},
        },
    },
    "InferRequest": {
        "type": "object",
        "required": ["inputs"],
        "properties": {
            "id": {"type": "string"},
            "parameters": {"type": "object"},
            "inputs": {"type": "array", "items": {"$ref": "#/components/schemas/Tensor"}},
            "outputs": {"type": "array", "items": {"type": "object"}},
        },
    },
    "Tensor": {
        "type": "object",
        "required": ["name", "datatype", "shape"],
        "properties": {
            "name": {"type": "string"},
            "datatype": {"type": "string"},
            "shape": {"type": "array", "items": {"type": "integer"}},
            "data": {"type": "array"},
            "parameters": {"type": "object"},
        },
    },
    "InferReply": {
        "type": "object",
        "properties": {
            "model_name": {"type": "string"},
            "model_version": {"type": "string"},
            "outputs": {"type": "array", "items": {"$ref": "#/components/schemas/Tensor"}},
        },
    },
    "GenerateRequest": {
        "type": "object",
        "required": ["text_input"],
        "properties": {"text_input": {"type": "string"}, "parameters": {"type": "object"}},
    },
    "GenerateReply": {
        "type": "object",
        "properties": {"model_name": {"type": "string"}, "text_output": {"type": "string"}},
    },
    "Object": {"type": "object"},
    **deepl_openapi.SCHEMAS,
}


def _json(name: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}


def _form_or_json(name: str) -> dict[str, Any]:
    schema = {"$ref": f"#/components/schemas/{name}"}
    return {
        "application/json": {"schema": schema},
        "application/x-www-form-urlencoded": {"schema": schema},
        "multipart/form-data": {"schema": schema},
    }


SSE = {"text/event-stream": {"schema": {"type": "string"}}}
BINARY = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
HTML = {"text/html": {"schema": {"type": "string"}}}

# (method, path, tag, summary, request body content or None, 2xx status, 2xx content or None)
Operation = tuple[str, str, str, str, "dict[str, Any] | None", int, "dict[str, Any] | None"]
_MODEL = "/v2/models/{model}"
_VERSION = "/v2/models/{model}/versions/{version}"
OPERATIONS: list[Operation] = [
    ("GET", "/v2", "kserve", "server metadata (name, version, extensions)", None, 200, _json("Object")),
    ("GET", "/v2/health/live", "kserve", "the server process is up", None, 200, None),
    ("GET", "/v2/health/ready", "kserve", "the server serves its models", None, 200, None),
    ("GET", "/v2/models/stats", "kserve", "every model's statistics (Triton's extension)", None, 200, _json("Object")),
    *[
        op
        for base in (_MODEL, _VERSION)
        for op in (
            ("GET", base, "kserve", "a model's metadata: inputs and outputs", None, 200, _json("Object")),
            ("GET", f"{base}/ready", "kserve", "a model is ready", None, 200, None),
            (
                "GET",
                f"{base}/config",
                "kserve",
                "a model's configuration (Triton's extension)",
                None,
                200,
                _json("Object"),
            ),
            (
                "POST",
                f"{base}/infer",
                "kserve",
                "inference: TEXT -> TRANSLATION, IMAGE or PIXELS -> PROBABILITIES",
                _json("InferRequest"),
                200,
                _json("InferReply"),
            ),  # fmt: skip
            ("GET", f"{base}/stats", "kserve", "a model's statistics (Triton's extension)", None, 200, _json("Object")),
            (
                "POST",
                f"{base}/generate",
                "generate",
                "one translation (Triton's generate extension)",
                _json("GenerateRequest"),
                200,
                _json("GenerateReply"),
            ),  # fmt: skip
            (
                "POST",
                f"{base}/generate_stream",
                "generate",
                "a translation as server-sent events of text deltas",
                _json("GenerateRequest"),
                200,
                SSE,
            ),  # fmt: skip
        )
    ],
    ("POST", "/v2/repository/index", "kserve", "the model repository's index", _json("Object"), 200, _json("Object")),
    ("POST", "/v2/repository/models/{model}/load", "kserve", "load or reload a model", _json("Object"), 200, None),
    ("POST", "/v2/repository/models/{model}/unload", "kserve", "unload a model", _json("Object"), 200, None),
    (
        "POST",
        "/translate",
        "libretranslate",
        "translate texts (LibreTranslate's API)",
        _form_or_json("LibreTranslateRequest"),
        200,
        _json("LibreTranslateReply"),
    ),  # fmt: skip
    (
        "POST",
        "/detect",
        "libretranslate",
        "a text's language among the served ones, best first",
        _form_or_json("DetectRequest"),
        200,
        {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/Detection"}}}},
    ),  # fmt: skip
    (
        "GET",
        "/languages",
        "libretranslate",
        "the served languages and their targets",
        None,
        200,
        {"application/json": {"schema": {"type": "array", "items": {"type": "object"}}}},
    ),  # fmt: skip
    ("GET", "/frontend/settings", "libretranslate", "LibreTranslate's front-end settings", None, 200, _json("Object")),
    ("GET", "/health", "libretranslate", "health check (503: starting, draining)", None, 200, _json("Object")),
    ("POST", "/suggest", "libretranslate", "suggestions: disabled here", None, 403, _json("Object")),
    (
        "POST",
        "/translate_file",
        "files",
        "translate a file; answers the URL of the translated file",
        {"multipart/form-data": {"schema": {"$ref": "#/components/schemas/FileForm"}}},
        200,
        _json("Object"),
    ),  # fmt: skip
    ("GET", "/download_file/{name}", "files", "a translated file", None, 200, BINARY),
    (
        "POST",
        "/jobs",
        "files",
        "submit a file as a job: answers at once with its id",
        {"multipart/form-data": {"schema": {"$ref": "#/components/schemas/FileForm"}}},
        202,
        _json("Job"),
    ),  # fmt: skip
    ("GET", "/jobs/{id}", "files", "a job's status and progress", None, 200, _json("Job")),
    ("DELETE", "/jobs/{id}", "files", "cancel a job", None, 200, _json("Job")),
    ("GET", "/jobs/{id}/events", "files", "a job's progress as server-sent events", None, 200, SSE),
    ("GET", "/jobs/{id}/result", "files", "a finished job's file", None, 200, BINARY),
    ("GET", "/", "web", "the web page", None, 200, HTML),
    ("GET", "/openapi.json", "web", "this document", None, 200, _json("Object")),
    *[
        ("GET", f"/static/{name}", "web", "the web page's assets", None, 200, None)
        for name in ("index.html", "app.js", "style.css", "favicon.svg")
    ],
    *deepl_openapi.OPERATIONS,
]


def _parameters(path: str) -> list[dict[str, Any]]:
    names = [part[1:-1] for part in path.split("/") if part.startswith("{") and part.endswith("}")]
    return [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}} for n in names]


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of :data:`OPERATIONS`."""
    paths: dict[str, dict[str, Any]] = {}
    for method, path, tag, summary, body, status, content in OPERATIONS:
        operation: dict[str, Any] = {"tags": [tag], "summary": summary, "operationId": f"{method.lower()} {path}"}
        if _parameters(path):
            operation["parameters"] = _parameters(path)
        if body is not None:
            operation["requestBody"] = {"required": True, "content": body}
        ok: dict[str, Any] = {"description": "success"}
        if content is not None:
            ok["content"] = content
        operation["responses"] = {
            str(status): ok,
            "default": {"description": "an error, with the reason", "content": {"application/json": {"schema": ERROR}}},
        }
        paths.setdefault(path, {})[method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "attnserve HTTP API",
            "version": VERSION,
            "description": (
                "KServe v2 REST, Triton's generate, LibreTranslate's API, DeepL's v2 API, files and jobs, the web page."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def add_routes(table: RouteTable) -> None:
    body = json.dumps(document(), indent=1).encode()

    async def serve(request: web.Request, call: Call) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    table.route("GET", "/openapi.json", serve, label="web.openapi", open=True, tracked=False)
