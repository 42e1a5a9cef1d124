"""attnserve's own API for stored glossaries (``service/stored_glossaries.py``), the HTTP twin of
gRPC's ``CreateGlossary`` / ``ListGlossaries`` / ``GetGlossary`` / ``DeleteGlossary``:

- ``POST /glossaries``: ``{"name", "source", "target", "entries"}`` (entries: an object, term ->
  target term, ``""`` keeps the term) -> 201 and the glossary;
- ``GET /glossaries``: ``{"glossaries": [...]}``, the caller's, oldest first, without entries;
- ``GET /glossaries/{id}``: the glossary with its entries; ``DELETE /glossaries/{id}``: 204.

A glossary is ``{"id", "name", "source", "target", "entry_count", "created"}`` (``created``:
seconds since the epoch). The bearer token (``Authorization: Bearer``) names whose glossaries
they are; another token's are 404. Errors are the server's ``{"error": ...}``.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ...service.vocabulary import Glossary
from ...shared.calls import Call
from ...shared.errors import InvalidRequest
from .messages import json_object, json_response, read_body
from .table import RouteTable

LABEL = "glossaries"


def glossary_json(glossary: Glossary, entries: bool = False) -> dict[str, Any]:
    reply: dict[str, Any] = {
        "id": glossary.id,
        "name": glossary.name,
        "source": glossary.source,
        "target": glossary.target,
        "entry_count": glossary.entry_count,
        "created": glossary.created,
    }
    if entries:
        reply["entries"] = dict(glossary.entries)
    return reply


class GlossaryRoutes:
    def __init__(self, table: RouteTable) -> None:
        self.glossaries, self.settings = table.doors.glossaries, table.doors.settings

    async def create(self, request: web.Request, call: Call) -> web.Response:
        body = await read_body(request, self.settings.max_message_bytes)
        doc = json_object(body, "Invalid JSON", 'send {"name", "source", "target", "entries": {term: target}}')
        for name in ("name", "source", "target"):
            if not isinstance(doc.get(name), str):
                raise InvalidRequest(f"{name}: expected a string, got {type(doc.get(name)).__name__}")
        entries = doc.get("entries")
        if not isinstance(entries, dict) or not all(isinstance(v, str) for v in entries.values()):
            raise InvalidRequest('entries: expected an object of term -> target term strings ("" keeps the term)')
        glossary = await self.glossaries.create(
            call.key, doc["name"], doc["source"], doc["target"], list(entries.items())
        )
        return json_response(glossary_json(glossary, entries=True), status=201, ensure_ascii=False)

    async def list(self, request: web.Request, call: Call) -> web.Response:
        found = await self.glossaries.list(call.key)
        return json_response({"glossaries": [glossary_json(g) for g in found]}, ensure_ascii=False)

    async def get(self, request: web.Request, call: Call) -> web.Response:
        found = await self.glossaries.get(call.key, request.match_info["id"], entries=True)
        return json_response(glossary_json(found, entries=True), ensure_ascii=False)

    async def delete(self, request: web.Request, call: Call) -> web.Response:
        await self.glossaries.delete(call.key, request.match_info["id"])
        return web.Response(status=204)


def add_routes(table: RouteTable) -> None:
    routes = GlossaryRoutes(table)
    for method, path, handler, name in (
        ("POST", "/glossaries", routes.create, "create"),
        ("GET", "/glossaries", routes.list, "list"),
        ("GET", "/glossaries/{id}", routes.get, "get"),
        ("DELETE", "/glossaries/{id}", routes.delete, "delete"),
    ):
        table.route(method, path, handler, label=f"{LABEL}.{name}")
