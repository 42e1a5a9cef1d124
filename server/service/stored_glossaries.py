"""Stored glossaries for every door, per api key, named by id in any translation request
(``glossary_id``), where the service turns one into the terms it already enforces per request
(``glossary.py``).

A glossary has a name and one dictionary per language pair (ISO 639-1, a pair the server
serves, directly or through the pivot language): entries ``source term -> target term`` (a
target equal to the source, or ``""`` where the API allows it, keeps the term). Made for one
pair (DeepL's ``/v2/glossaries``, attnserve's ``/glossaries`` and gRPC ``CreateGlossary``) it is
one dictionary and never changes; DeepL's ``/v3/glossaries`` make glossaries of several and edit
any glossary: rename it, merge entries into a dictionary, replace or delete one. The reads made
for one pair (``list``, ``get``) see the glossaries of one dictionary, as DeepL's v2 reads do.

Each key keeps at most ``--max-glossaries-per-key`` glossaries, each with at most
``--max-stored-glossary-entries`` entries in all its dictionaries, of at most
``--max-glossary-term-chars`` characters a side. A request naming one uses its dictionary for the
request's languages, which it must name: a glossary without a dictionary for ``en -> fr`` used for
``en -> fr`` is refused. The records are the state store's (``state/``): SQLite in
``--state-dir``, shared by ``--workers``, or PostgreSQL at ``--state-url``, shared by replicas.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import csv
import dataclasses
import io
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from attnserve.contract import language_tags

from ..shared.config import Settings
from ..shared.errors import InvalidRequest, LimitExceeded, ModelNotFound, Overloaded, echo
from ..state import Dictionary, Glossary, GlossaryStore, with_dictionaries
from . import limits
from .requests import AUTO, TranslationRequest
from .routing import Route

MAX_NAME_CHARS = 1024
MAX_ID_CHARS = 64  # ids are UUIDs (36); a longer one is no glossary, and is not looked up
MAX_CODE_CHARS = 64  # language codes are parsed (langcodes): one of megabytes is refused first
FORMATS = ("tsv", "csv")


class GlossaryNotFound(ModelNotFound):
    """An id no glossary of the caller's key has: NOT_FOUND (404)."""


class DictionaryNotFound(GlossaryNotFound):
    """A language pair the caller's glossary has no dictionary for: NOT_FOUND (404)."""


class GlossaryQuotaExceeded(Overloaded):
    """A key with ``--max-glossaries-per-key`` glossaries: RESOURCE_EXHAUSTED (DeepL's door: 456)."""


def language(code: str, side: str) -> str:
    """``code`` (``EN``, ``pt-BR``, ``pb``, ``deu_Latn``) -> its ISO 639-1 language (``en``, ``pt``, ``pt``, ``de``)."""
    if len(code) > MAX_CODE_CHARS:
        raise InvalidRequest(
            f"glossary {side} language is {len(code):,} characters; a code has at most {MAX_CODE_CHARS}"
        )
    base = language_tags.language(code) if code.strip() else None  # Argos' pb: pt
    if not base:
        raise InvalidRequest(f"glossary {side} language {echo(code)} is not a language code")
    return base


def pairs_named(dictionaries: Sequence[Dictionary]) -> str:
    return ", ".join(f"{d.source} -> {d.target}" for d in dictionaries) or "no language pair (it has no dictionary)"


def check_name(name: str) -> None:
    if not name.strip() or len(name) > MAX_NAME_CHARS:
        raise InvalidRequest(f"a glossary needs a name of 1 to {MAX_NAME_CHARS} characters")


def parse_entries(text: str, fmt: str) -> list[tuple[str, str]]:
    """DeepL's entry formats: ``tsv`` (``source<TAB>target`` lines) or ``csv`` (``source,target``
    rows, optionally ``,source_lang,target_lang``, quoted as RFC 4180). Blank lines and a leading
    byte-order mark are skipped."""
    if fmt not in FORMATS:
        raise InvalidRequest(f"entries_format {echo(fmt)} is not supported: use tsv or csv")
    rows: list[list[str]]
    text = text.removeprefix("\ufeff")  # a byte-order mark, as a spreadsheet writes a file: not the first term's
    if fmt == "tsv":
        rows = [line.split("\t") for line in text.splitlines() if line.strip()]
    else:
        try:
            rows = [row for row in csv.reader(io.StringIO(text)) if any(f.strip() for f in row)]
        except csv.Error as exc:
            raise InvalidRequest(f"glossary entries: the CSV does not parse: {exc}") from None
    entries = []
    for number, row in enumerate(rows, 1):
        if len(row) not in (2, 4) or not row[0].strip() or not row[1].strip():
            raise InvalidRequest(
                f"glossary entry {number}: expected 'source{'<TAB>' if fmt == 'tsv' else ','}target', got {echo(row)}"
            )
        entries.append((row[0].strip(), row[1].strip()))
    return entries


Sent = tuple[str, str, Sequence[tuple[str, str]]]  # a dictionary as a door reads it: source, target, entries


class StoredGlossaries:
    """The operations of every door (module docstring); the store's calls run off the event loop."""

    def __init__(self, store: GlossaryStore, settings: Settings, routes: Callable[[], list[Route]]) -> None:
        self.store, self.settings, self.routes = store, settings, routes
        self._io = ThreadPoolExecutor(2, thread_name_prefix="glossaries")

    @classmethod
    def serving(cls, translation: Any, store: GlossaryStore, settings: Settings) -> StoredGlossaries:
        """The stored glossaries of ``translation`` (a TranslationService), which reads them from here."""
        translation.stored_glossaries = glossaries = cls(store, settings, translation.routes)
        return glossaries

    def served(self) -> set[tuple[str, str]]:
        """The pairs a glossary may be made for: every route, direct or through the pivot language."""
        return {pair for route in self.routes() for pair in self._pair(route)}

    async def _off(self, fn: Callable, *args: Any, **kw: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._io, lambda: fn(*args, **kw))

    def close(self) -> None:
        self._io.shutdown(wait=True)

    def dictionary(self, source: str, target: str, entries: Sequence[tuple[str, str]], created: float) -> Dictionary:
        """One language pair's entries checked (the glossary's total is :meth:`_bounded`'s)."""
        source, target = language(source, "source"), language(target, "target")
        if (source, target) not in self.served():
            pairs = ", ".join(f"{a}->{b}" for a, b in sorted(self.served())) or "none"
            raise InvalidRequest(f"no model serves {source} -> {target}, so no glossary for it; served: {pairs}")
        if not entries:
            raise InvalidRequest("a glossary needs at least one entry")
        self._bounded(len(entries))
        limits.check_terms(entries, self.settings.max_glossary_term_chars)
        if repeated := next((t for t, n in collections.Counter(t for t, _ in entries).items() if n > 1), None):
            raise InvalidRequest(f"the glossary has the source term {echo(repeated)} twice")
        return Dictionary(source, target, len(entries), created, tuple(entries))

    def _bounded(self, count: int) -> None:
        most = self.settings.max_stored_glossary_entries
        if count > most:
            raise LimitExceeded(
                f"the glossary has {count:,} entries; this server stores at most {most:,} per glossary "
                "(--max-stored-glossary-entries)",
                "max_stored_glossary_entries", count, most,
            )  # fmt: skip

    def check(self, name: str, source: str, target: str, entries: Sequence[tuple[str, str]]) -> Glossary:
        """A new glossary's fields checked (its key and id filled in by :meth:`create`)."""
        check_name(name)
        one = self.dictionary(source, target, entries, time.time())
        return Glossary("", "", name, one.source, one.target, one.entry_count, one.created, one.entries)

    def _several(self, sent: Sequence[Sent], created: float) -> list[Dictionary]:
        dictionaries = [self.dictionary(source, target, entries, created) for source, target, entries in sent]
        if repeated := next(
            (p for p, n in collections.Counter(pairs_named([d]) for d in dictionaries).items() if n > 1), None
        ):
            raise InvalidRequest(f"the dictionaries name {repeated} twice: send one dictionary a language pair")
        return dictionaries

    async def create(self, key: str, name: str, source: str, target: str, entries: Sequence[tuple[str, str]]):
        return await self._add(dataclasses.replace(self.check(name, source, target, entries), key=key))

    async def create_multilingual(self, key: str, name: str, sent: Sequence[Sent]) -> Glossary:
        """A glossary of a dictionary per language pair (DeepL's v3)."""
        check_name(name)
        if not sent:
            raise InvalidRequest("a glossary needs at least one dictionary")
        created = time.time()
        dictionaries = tuple(self._several(sent, created))
        self._bounded(sum(d.entry_count for d in dictionaries))
        return await self._add(with_dictionaries(Glossary("", key, name, "", "", 0, created), dictionaries))

    async def _add(self, glossary: Glossary) -> Glossary:
        glossary = dataclasses.replace(glossary, id=str(uuid.uuid4()))
        limit = self.settings.max_glossaries_per_key
        if not await self._off(self.store.add, glossary, limit):
            raise GlossaryQuotaExceeded(
                f"this server keeps at most {limit} glossaries per api key (--max-glossaries-per-key); delete one first"
            )
        return glossary

    async def list(self, key: str) -> list[Glossary]:
        """The key's glossaries of one dictionary: what the reads made for one pair show."""
        return [g for g in await self.list_all(key) if len(g.parts) == 1]

    async def list_all(self, key: str) -> list[Glossary]:
        return await self._off(self.store.list, key)

    async def get(self, key: str, glossary_id: str, entries: bool = False) -> Glossary:
        """The key's glossary of one dictionary; InvalidRequest for one of several (or none)."""
        found = await self.glossary(key, glossary_id, entries)
        if len(found.parts) != 1:
            raise InvalidRequest(
                f"glossary {found.id} has {len(found.parts)} dictionaries ({pairs_named(found.parts)}), "
                "not one language pair: read it through DeepL's /v3/glossaries"
            )
        return found

    async def glossary(self, key: str, glossary_id: str, entries: bool = False) -> Glossary:
        """The key's glossary, all its dictionaries (their entries where asked for)."""
        known = 0 < len(glossary_id) <= MAX_ID_CHARS
        found = await self._off(self.store.get, key, glossary_id, entries) if known else None
        if found is None:
            raise GlossaryNotFound(f"no glossary {echo(glossary_id)}: it was deleted, or never made with this api key")
        return found

    async def delete(self, key: str, glossary_id: str) -> None:
        if not await self._off(self.store.delete, key, glossary_id):
            raise GlossaryNotFound(f"no glossary {echo(glossary_id)}: it was deleted, or never made with this api key")

    async def edit(self, key: str, glossary_id: str, name: str | None, sent: Sequence[Sent]) -> Glossary:
        """DeepL's v3 PATCH: a new ``name``, and each sent dictionary's entries merged into the
        glossary's dictionary of its pair (a sent term replacing the same source term's entry), or
        added as a new dictionary."""
        if name is None and not sent:
            raise InvalidRequest("send a new 'name' or 'dictionaries' to merge into the glossary")
        if name is not None:
            check_name(name)
        edits = self._several(sent, time.time())  # checked before the store is asked

        def change(found: Glossary) -> Glossary:
            parts = {(d.source, d.target): d for d in found.parts}
            for d in edits:
                old = parts.get((d.source, d.target))
                merged = tuple((dict(old.entries if old else ()) | dict(d.entries)).items())
                parts[d.source, d.target] = dataclasses.replace(
                    d, entry_count=len(merged), entries=merged, created=old.created if old else d.created
                )
            return self._changed(found, name, tuple(parts.values()))

        return await self._edit(key, glossary_id, change)

    async def replace_dictionary(self, key: str, glossary_id: str, sent: Sent) -> Dictionary:
        """DeepL's v3 PUT: the glossary's dictionary of the pair replaced by (or added as) ``sent``."""
        (new,) = self._several([sent], time.time())

        def change(found: Glossary) -> Glossary:
            kept = tuple(d for d in found.parts if (d.source, d.target) != (new.source, new.target))
            return self._changed(found, None, (*kept, new))

        await self._edit(key, glossary_id, change)
        return new

    async def delete_dictionary(self, key: str, glossary_id: str, source: str, target: str) -> None:
        pair = (language(source, "source"), language(target, "target"))

        def change(found: Glossary) -> Glossary:
            kept = tuple(d for d in found.parts if (d.source, d.target) != pair)
            if len(kept) == len(found.parts):
                raise self._no_dictionary(found, *pair)
            return self._changed(found, None, kept)

        await self._edit(key, glossary_id, change)

    async def dictionary_entries(self, key: str, glossary_id: str, source: str, target: str) -> Dictionary:
        """The glossary's dictionary of ``source -> target``, its entries read."""
        pair = (language(source, "source"), language(target, "target"))
        found = await self.glossary(key, glossary_id, entries=True)
        one = next((d for d in found.parts if (d.source, d.target) == pair), None)
        if one is None:
            raise self._no_dictionary(found, *pair)
        return one

    def _changed(self, found: Glossary, name: str | None, parts: tuple[Dictionary, ...]) -> Glossary:
        self._bounded(sum(d.entry_count for d in parts))
        return with_dictionaries(dataclasses.replace(found, name=found.name if name is None else name), parts)

    @staticmethod
    def _no_dictionary(found: Glossary, source: str, target: str) -> DictionaryNotFound:
        return DictionaryNotFound(
            f"glossary {found.id} has no dictionary for {source} -> {target}; it has {pairs_named(found.parts)}"
        )

    async def _edit(self, key: str, glossary_id: str, change: Callable[[Glossary], Glossary]) -> Glossary:
        known = 0 < len(glossary_id) <= MAX_ID_CHARS
        changed = await self._off(self.store.edit, key, glossary_id, change) if known else None
        if changed is None:
            raise GlossaryNotFound(f"no glossary {echo(glossary_id)}: it was deleted, or never made with this api key")
        return changed

    async def resolve(self, request: TranslationRequest) -> TranslationRequest:
        """``request`` with the entries of its ``glossary_id``'s dictionary for its languages as
        ``stored_glossary`` (its own terms still override them); InvalidRequest when the glossary
        has no dictionary for them."""
        glossary = await self.glossary(request.caller.key, request.glossary_id, entries=True)
        wanted = pairs_named(glossary.parts)
        if request.source_language == AUTO:
            raise InvalidRequest(
                f"glossary {glossary.id} is for {wanted}: name the source language (not auto, which is detected)"
            )
        if request.source_language and request.target_language:
            pairs = {(language(request.source_language, "source"), language(request.target_language, "target"))}
        elif request.model:  # a model named without languages: the pairs it serves
            pairs = {pair for route in self.routes() if route.models == (request.model,) for pair in self._pair(route)}
        else:
            pairs = set()
        chosen = next((d for d in glossary.parts if (d.source, d.target) in pairs), None)
        if chosen is None:
            asked = ", ".join(f"{a} -> {b}" for a, b in sorted(pairs)) or "no language pair"
            raise InvalidRequest(f"glossary {glossary.id} is for {wanted}; the request names {asked}")
        return dataclasses.replace(request, glossary_id="", stored_glossary=chosen.entries)

    @staticmethod
    def _pair(route: Route) -> list[tuple[str, str]]:
        with contextlib.suppress(InvalidRequest):
            return [(language(route.source, "source"), language(route.target, "target"))]
        return []


async def with_stored_glossary(stored: StoredGlossaries | None, request: TranslationRequest) -> TranslationRequest:
    """``request`` with the entries of the stored glossary it names (``glossary_id``), if any."""
    if not request.glossary_id:
        return request
    if stored is None:
        raise InvalidRequest("this server stores no glossaries: send the terms in the request's glossary")
    return await stored.resolve(request)
