"""The OpenAPI document (GET /openapi.json) against the routes the HTTP door serves."""

from __future__ import annotations

import json
import urllib.request
from unittest.mock import MagicMock

import pytest
from openapi_spec_validator import validate

from attnserve.server.doors.http import openapi
from attnserve.server.doors.http.server import HttpServer
from attnserve.server.shared.config import Settings


def served_operations() -> set[tuple[str, str]]:
    """(method, path) of every route an HTTP door registers, but CORS preflights."""
    app = MagicMock()  # the routes are registered at construction; their handlers are not called here
    app.settings = Settings()
    http = HttpServer(app)
    return {(r.method, r.resource.canonical) for r in http.web.router.routes() if r.method not in ("OPTIONS", "HEAD")}


def test_every_served_route_is_described_and_every_described_one_is_served():
    document = openapi.document()
    described = {(method.upper(), path) for path, item in document["paths"].items() for method in item}
    served = served_operations()
    assert served - described == set(), "served but missing from server/doors/http/openapi.py"
    assert described - served == set(), "described but not served"
    assert ("POST", "/translate") in served and ("GET", "/jobs/{id}/events") in served


def test_the_document_is_valid_openapi_3_1():
    document = openapi.document()
    validate(document)  # raises on an invalid document
    ids = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))


def test_a_broken_document_is_caught():
    document = openapi.document()
    document["paths"]["/translate"]["post"]["responses"] = "nothing"
    with pytest.raises(Exception, match="responses|not of type|is not valid"):
        validate(document)


def test_the_server_serves_the_document_without_a_token(serve, kserve_repo):
    with serve(kserve_repo, http_port=0, auth_tokens="sekrit") as server:
        with urllib.request.urlopen(f"http://{server.http_address}/openapi.json", timeout=30) as reply:
            assert reply.headers["Content-Type"].startswith("application/json")
            assert json.loads(reply.read()) == json.loads(json.dumps(openapi.document()))
