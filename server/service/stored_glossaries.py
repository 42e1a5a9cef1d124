"""Stored glossaries for every door: created once (DeepL's ``/v2/glossaries``, attnserve's
``/glossaries`` and gRPC ``CreateGlossary``), immutable, per api key, and named by id in any
translation request (``glossary_id``), where the service turns one into the terms it already
enforces per request (``glossary.py``).

A glossary has a name, a source and a target language (ISO 639-1, a pair the server serves,
directly or through the pivot language) and entries ``source term -> target term`` (a target
equal to the source, or ``""`` where the API allows it, keeps the term). Each key keeps at most
``--max-glossaries-per-key``, each with at most ``--max-stored-glossary-entries`` entries of at
most ``--max-glossary-term-chars`` characters a side. A request naming one must name its
languages: a glossary made for ``en -> de`` used for ``en -> fr`` is refused. The records are
the state store's (``state/``): SQLite in ``--state-dir``, shared by ``--workers``, or
PostgreSQL at ``--state-url``, shared by replicas.
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
from ..state import Glossary, GlossaryStore
from . import limits
from .requests import AUTO, TranslationRequest
from .routing import Route

MAX_NAME_CHARS = 1024
MAX_ID_CHARS = 64  # ids are UUIDs (36); a longer one is no glossary, and is not looked up
MAX_CODE_CHARS = 64  # language codes are parsed (langcodes): one of megabytes is refused first
FORMATS = ("tsv", "csv")


class GlossaryNotFound(ModelNotFound):
    """An id no glossary of the caller's key has: NOT_FOUND (404)."""


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

    def check(self, name: str, source: str, target: str, entries: Sequence[tuple[str, str]]) -> Glossary:
        """A new glossary's fields checked (its key and id filled in by :meth:`create`)."""
        s = self.settings
        if not name.strip() or len(name) > MAX_NAME_CHARS:
            raise InvalidRequest(f"a glossary needs a name of 1 to {MAX_NAME_CHARS} characters")
        source, target = language(source, "source"), language(target, "target")
        if (source, target) not in self.served():
            pairs = ", ".join(f"{a}->{b}" for a, b in sorted(self.served())) or "none"
            raise InvalidRequest(f"no model serves {source} -> {target}, so no glossary for it; served: {pairs}")
        if not entries:
            raise InvalidRequest("a glossary needs at least one entry")
        if len(entries) > s.max_stored_glossary_entries:
            raise LimitExceeded(
                f"the glossary has {len(entries):,} entries; this server stores at most "
                f"{s.max_stored_glossary_entries:,} per glossary (--max-stored-glossary-entries)",
                "max_stored_glossary_entries", len(entries), s.max_stored_glossary_entries,
            )  # fmt: skip
        limits.check_terms(entries, s.max_glossary_term_chars)
        if repeated := next((t for t, n in collections.Counter(t for t, _ in entries).items() if n > 1), None):
            raise InvalidRequest(f"the glossary has the source term {echo(repeated)} twice")
        return Glossary("", "", name, source, target, len(entries), time.time(), tuple(entries))

    async def create(self, key: str, name: str, source: str, target: str, entries: Sequence[tuple[str, str]]):
        glossary = dataclasses.replace(self.check(name, source, target, entries), id=str(uuid.uuid4()), key=key)
        limit = self.settings.max_glossaries_per_key
        if not await self._off(self.store.add, glossary, limit):
            raise GlossaryQuotaExceeded(
                f"this server keeps at most {limit} glossaries per api key (--max-glossaries-per-key); delete one first"
            )
        return glossary

    async def list(self, key: str) -> list[Glossary]:
        return await self._off(self.store.list, key)

    async def get(self, key: str, glossary_id: str, entries: bool = False) -> Glossary:
        known = 0 < len(glossary_id) <= MAX_ID_CHARS
        found = await self._off(self.store.get, key, glossary_id, entries) if known else None
        if found is None:
            raise GlossaryNotFound(f"no glossary {echo(glossary_id)}: it was deleted, or never made with this api key")
        return found

    async def delete(self, key: str, glossary_id: str) -> None:
        if not await self._off(self.store.delete, key, glossary_id):
            raise GlossaryNotFound(f"no glossary {echo(glossary_id)}: it was deleted, or never made with this api key")

    async def resolve(self, request: TranslationRequest) -> TranslationRequest:
        """``request`` with its ``glossary_id``'s entries as ``stored_glossary`` (its own terms
        still override them); InvalidRequest when its languages are not the glossary's."""
        glossary = await self.get(request.caller.key, request.glossary_id, entries=True)
        wanted = f"{glossary.source} -> {glossary.target}"
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
        if (glossary.source, glossary.target) not in pairs:
            asked = ", ".join(f"{a} -> {b}" for a, b in sorted(pairs)) or "no language pair"
            raise InvalidRequest(f"glossary {glossary.id} is for {wanted}; the request names {asked}")
        return dataclasses.replace(request, glossary_id="", stored_glossary=glossary.entries)

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
