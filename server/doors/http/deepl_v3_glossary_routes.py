"""DeepL's v3 ("multilingual") glossaries on the stored glossaries (``service/stored_glossaries.py``),
beside the v2 ones (``deepl_glossary_routes``), as DeepL's current clients (``deepl.DeepLClient``)
call them. A glossary holds a dictionary per language pair; every glossary of the key is seen here,
a v2 one as a glossary of one dictionary.

- ``POST /v3/glossaries``: ``name``, ``dictionaries`` (``[{"source_lang", "target_lang",
  "entries", "entries_format": "tsv" | "csv"}]``) -> 201 and the glossary;
- ``GET /v3/glossaries`` -> ``{"glossaries": [...]}``; ``GET /v3/glossaries/{id}``;
- ``PATCH /v3/glossaries/{id}``: ``name`` and / or ``dictionaries``, whose entries are merged into
  the glossary's dictionary of their pair (or added as one) -> the glossary;
- ``PUT /v3/glossaries/{id}/dictionaries``: one dictionary's fields, which replace the glossary's
  dictionary of that pair (or are added) -> ``{"source_lang", "target_lang", "entry_count"}``;
- ``GET /v3/glossaries/{id}/entries?source_lang=EN&target_lang=DE`` -> ``{"dictionaries":
  [{"source_lang", "target_lang", "entries" (TSV), "entries_format": "tsv"}]}``;
- ``DELETE /v3/glossaries/{id}`` and ``DELETE /v3/glossaries/{id}/dictionaries?source_lang&target_lang``
  -> 204.

A glossary is ``{"glossary_id", "name", "dictionaries": [{"source_lang", "target_lang",
"entry_count"}], "creation_time"}``, languages in lower case as DeepL writes them. Errors are the
DeepL door's (``deepl_routes``): 400, 403, 404 (an id the key has not, a pair without a
dictionary), 456 (``--max-glossaries-per-key``)."""

from __future__ import annotations

import functools
from typing import Any

from aiohttp import web
from multidict import MultiDict

from ...service.stored_glossaries import GlossaryQuotaExceeded, Sent, parse_entries
from ...service.vocabulary import Dictionary, Glossary
from ...shared.calls import Call
from ...shared.errors import InvalidRequest, echo
from .deepl_glossary_routes import creation_time
from .deepl_options import text_field
from .deepl_routes import LABEL, DeepLRoutes, QuotaExceeded, keyed_route, read_fields
from .table import RouteTable

DICTIONARY_FIELDS = ("source_lang", "target_lang", "entries")


def dictionary_json(dictionary: Dictionary) -> dict[str, Any]:
    return {"source_lang": dictionary.source, "target_lang": dictionary.target, "entry_count": dictionary.entry_count}


def glossary_json(glossary: Glossary) -> dict[str, Any]:
    return {
        "glossary_id": glossary.id,
        "name": glossary.name,
        "dictionaries": [dictionary_json(d) for d in glossary.parts],
        "creation_time": creation_time(glossary.created),
    }


def read_dictionary(fields: MultiDict | dict, where: str = "") -> Sent:
    """One dictionary's ``source_lang``, ``target_lang``, ``entries`` and ``entries_format``."""
    values = {name: text_field(fields, name) for name in DICTIONARY_FIELDS}
    for name, value in values.items():
        if not value:
            raise InvalidRequest(f"Parameter '{where}{name}' not specified.")
    fmt = text_field(fields, "entries_format") or "tsv"
    entries = parse_entries(values["entries"] or "", fmt)
    return values["source_lang"] or "", values["target_lang"] or "", entries


def read_dictionaries(fields: MultiDict) -> list[Sent]:
    """The ``dictionaries`` of a JSON body: a list of objects (one object is read as a list of it)."""
    sent = []
    for number, item in enumerate(fields.getall("dictionaries", [])):
        if not isinstance(item, dict):
            raise InvalidRequest(
                f"Value for 'dictionaries' not supported: {echo(item)}; expected a JSON list of objects with "
                "source_lang, target_lang, entries and entries_format"
            )
        sent.append(read_dictionary(item, f"dictionaries[{number}]."))
    return sent


def pair(request: web.Request) -> tuple[str, str]:
    """The query's ``source_lang`` and ``target_lang``, which name one dictionary."""
    values = [request.query.get(name, "").strip() for name in ("source_lang", "target_lang")]
    for name, value in zip(("source_lang", "target_lang"), values, strict=True):
        if not value:
            raise InvalidRequest(f"Parameter '{name}' not specified.")
    return values[0], values[1]


class DeepLV3GlossaryRoutes:
    def __init__(self, table: RouteTable, deepl: DeepLRoutes) -> None:
        self.deepl, self.glossaries = deepl, table.doors.glossaries
        self.settings = table.doors.settings

    def _key(self, request: web.Request, call: Call) -> str:
        self.deepl.caller(request, call)
        return call.key

    async def _fields(self, request: web.Request) -> MultiDict:
        return await read_fields(request, self.settings.max_message_bytes)

    async def create(self, request: web.Request, call: Call) -> web.Response:
        key = self._key(request, call)
        fields = await self._fields(request)
        name = text_field(fields, "name")
        if not name:
            raise InvalidRequest("Parameter 'name' not specified.")
        sent = read_dictionaries(fields)
        if not sent:
            raise InvalidRequest("Parameter 'dictionaries' not specified.")
        try:
            glossary = await self.glossaries.create_multilingual(key, name, sent)
        except GlossaryQuotaExceeded as exc:
            raise QuotaExceeded(str(exc)) from None
        return web.json_response(glossary_json(glossary), status=201)

    async def list(self, request: web.Request, call: Call) -> web.Response:
        found = await self.glossaries.list_all(self._key(request, call))
        return web.json_response({"glossaries": [glossary_json(g) for g in found]})

    async def get(self, request: web.Request, call: Call) -> web.Response:
        found = await self.glossaries.glossary(self._key(request, call), request.match_info["id"])
        return web.json_response(glossary_json(found))

    async def edit(self, request: web.Request, call: Call) -> web.Response:
        key = self._key(request, call)
        fields = await self._fields(request)
        name = text_field(fields, "name") if "name" in fields else None
        changed = await self.glossaries.edit(key, request.match_info["id"], name, read_dictionaries(fields))
        return web.json_response(glossary_json(changed))

    async def replace(self, request: web.Request, call: Call) -> web.Response:
        key = self._key(request, call)
        sent = read_dictionary(await self._fields(request))
        done = await self.glossaries.replace_dictionary(key, request.match_info["id"], sent)
        return web.json_response(dictionary_json(done))

    async def entries(self, request: web.Request, call: Call) -> web.Response:
        key = self._key(request, call)
        found = await self.glossaries.dictionary_entries(key, request.match_info["id"], *pair(request))
        tsv = "".join(f"{source}\t{target or source}\n" for source, target in found.entries)
        one = {"source_lang": found.source, "target_lang": found.target, "entries": tsv, "entries_format": "tsv"}
        return web.json_response({"dictionaries": [one]})

    async def delete(self, request: web.Request, call: Call) -> web.Response:
        await self.glossaries.delete(self._key(request, call), request.match_info["id"])
        return web.Response(status=204)

    async def delete_dictionary(self, request: web.Request, call: Call) -> web.Response:
        key = self._key(request, call)
        await self.glossaries.delete_dictionary(key, request.match_info["id"], *pair(request))
        return web.Response(status=204)


def add_routes(table: RouteTable) -> None:
    routes = DeepLV3GlossaryRoutes(table, DeepLRoutes(table))
    route = functools.partial(table.route, **keyed_route(routes.deepl))
    for method, path, handler, name in (
        ("POST", "/v3/glossaries", routes.create, "create_glossary"),
        ("GET", "/v3/glossaries", routes.list, "list_glossaries"),
        ("GET", "/v3/glossaries/{id}", routes.get, "get_glossary"),
        ("PATCH", "/v3/glossaries/{id}", routes.edit, "edit_glossary"),
        ("DELETE", "/v3/glossaries/{id}", routes.delete, "delete_glossary"),
        ("PUT", "/v3/glossaries/{id}/dictionaries", routes.replace, "replace_dictionary"),
        ("DELETE", "/v3/glossaries/{id}/dictionaries", routes.delete_dictionary, "delete_dictionary"),
        ("GET", "/v3/glossaries/{id}/entries", routes.entries, "glossary_entries"),
    ):
        route(method, path, handler, label=f"{LABEL}.v3.{name}")
