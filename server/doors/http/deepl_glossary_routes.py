"""DeepL's v2 glossaries on the stored glossaries (``service/stored_glossaries.py``), beside
``deepl_routes``: ``POST /v2/glossaries`` (``name``, ``source_lang``, ``target_lang``,
``entries``, ``entries_format`` tsv or csv; JSON or a form) -> 201 and the glossary;
``GET /v2/glossaries`` -> ``{"glossaries": [...]}``; ``GET /v2/glossaries/{id}``;
``GET /v2/glossaries/{id}/entries`` -> ``text/tab-separated-values``; ``DELETE
/v2/glossaries/{id}`` -> 204; ``GET /v2/glossary-language-pairs`` -> the served pairs. A
glossary is ``{"glossary_id", "name", "ready", "source_lang", "target_lang", "creation_time",
"entry_count"}``, languages in lower case as DeepL writes them. These routes see the key's
glossaries of one dictionary; a v3 glossary of several (``deepl_v3_glossary_routes``) is listed
and read only there (a 400 here), and deleted by either."""

from __future__ import annotations

import datetime
import functools
from typing import Any

from aiohttp import web

from ...service.stored_glossaries import GlossaryQuotaExceeded, parse_entries
from ...service.vocabulary import Glossary
from ...shared.calls import Call
from ...shared.errors import InvalidRequest
from .deepl_options import text_field
from .deepl_routes import LABEL, DeepLRoutes, QuotaExceeded, keyed_route, read_fields
from .table import RouteTable


def creation_time(created: float) -> str:
    """DeepL's timestamps: ISO 8601 in UTC, milliseconds, ``Z``."""
    when = datetime.datetime.fromtimestamp(created, datetime.timezone.utc)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def glossary_json(glossary: Glossary) -> dict[str, Any]:
    return {
        "glossary_id": glossary.id,
        "name": glossary.name,
        "ready": True,
        "source_lang": glossary.source,
        "target_lang": glossary.target,
        "creation_time": creation_time(glossary.created),
        "entry_count": glossary.entry_count,
    }


class DeepLGlossaryRoutes:
    def __init__(self, table: RouteTable, deepl: DeepLRoutes) -> None:
        self.deepl, self.glossaries = deepl, table.doors.glossaries
        self.settings = table.doors.settings

    def _key(self, request: web.Request, call: Call) -> str:
        self.deepl.caller(request, call)
        return call.key

    async def create(self, request: web.Request, call: Call) -> web.Response:
        key = self._key(request, call)
        fields = await read_fields(request, self.settings.max_message_bytes)
        values = {n: text_field(fields, n) for n in ("name", "source_lang", "target_lang", "entries")}
        for name, value in values.items():
            if not value:
                raise InvalidRequest(f"Parameter '{name}' not specified.")
        fmt = fields.get("entries_format") or "tsv"
        entries = parse_entries(values["entries"], fmt if isinstance(fmt, str) else "")
        try:
            glossary = await self.glossaries.create(
                key, values["name"], values["source_lang"], values["target_lang"], entries
            )
        except GlossaryQuotaExceeded as exc:
            raise QuotaExceeded(str(exc)) from None
        return web.json_response(glossary_json(glossary), status=201)

    async def list(self, request: web.Request, call: Call) -> web.Response:
        found = await self.glossaries.list(self._key(request, call))
        return web.json_response({"glossaries": [glossary_json(g) for g in found]})

    async def get(self, request: web.Request, call: Call) -> web.Response:
        found = await self.glossaries.get(self._key(request, call), request.match_info["id"])
        return web.json_response(glossary_json(found))

    async def entries(self, request: web.Request, call: Call) -> web.Response:
        found = await self.glossaries.get(self._key(request, call), request.match_info["id"], entries=True)
        tsv = "".join(f"{source}\t{target or source}\n" for source, target in found.entries)
        return web.Response(text=tsv, content_type="text/tab-separated-values", charset="utf-8")

    async def delete(self, request: web.Request, call: Call) -> web.Response:
        await self.glossaries.delete(self._key(request, call), request.match_info["id"])
        return web.Response(status=204)

    async def pairs(self, request: web.Request, call: Call) -> web.Response:
        pairs = sorted(self.glossaries.served())
        return web.json_response({"supported_languages": [{"source_lang": s, "target_lang": t} for s, t in pairs]})


def add_routes(table: RouteTable) -> None:
    deepl = DeepLRoutes(table)
    routes = DeepLGlossaryRoutes(table, deepl)
    route = functools.partial(table.route, **keyed_route(deepl))
    for method, path, handler, name in (
        ("POST", "/v2/glossaries", routes.create, "create_glossary"),
        ("GET", "/v2/glossaries", routes.list, "list_glossaries"),
        ("GET", "/v2/glossaries/{id}", routes.get, "get_glossary"),
        ("DELETE", "/v2/glossaries/{id}", routes.delete, "delete_glossary"),
        ("GET", "/v2/glossaries/{id}/entries", routes.entries, "glossary_entries"),
    ):
        route(method, path, handler, label=f"{LABEL}.{name}")
    route("GET", "/v2/glossary-language-pairs", routes.pairs, label=f"{LABEL}.glossary_language_pairs", metered=False)
