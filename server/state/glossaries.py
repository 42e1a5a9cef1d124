"""Stored glossaries' records: per key (the sha256 of the api key that created it, "" on a
server without keys), only ever found with it. A glossary holds one dictionary per language
pair (DeepL's v3, "multilingual"), or is made for one pair (DeepL's v2, attnserve's own API).

Two tables: ``glossaries``, one row a glossary, whose ``source``, ``target`` and ``entries``
hold the dictionary of a glossary made for one pair; and ``glossary_dictionaries``, the
dictionaries of a glossary whose ``multilingual`` is 1 (its own ``source`` and ``target`` then
""). A v2 glossary stays one row, so a state store of a server without multilingual glossaries
(no ``multilingual`` column, no dictionaries table) opens as it is and gains them at start, and
a server without them sharing the store still reads the glossaries it made; editing a glossary
(:meth:`GlossaryStore.edit`) moves its dictionary into the dictionaries table."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass

from .database import Database

SCHEMA = """
CREATE TABLE IF NOT EXISTS glossaries (
    id TEXT PRIMARY KEY, key TEXT NOT NULL, name TEXT NOT NULL, source TEXT NOT NULL, target TEXT NOT NULL,
    entry_count BIGINT NOT NULL, entries TEXT NOT NULL, created DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS glossaries_by_key ON glossaries (key, created);
CREATE TABLE IF NOT EXISTS glossary_dictionaries (
    glossary_id TEXT NOT NULL, source TEXT NOT NULL, target TEXT NOT NULL, entry_count BIGINT NOT NULL,
    entries TEXT NOT NULL, created DOUBLE PRECISION NOT NULL, PRIMARY KEY (glossary_id, source, target)
)
"""
_ADDED = {"multilingual": "BIGINT NOT NULL DEFAULT 0"}

Entries = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Dictionary:
    """A glossary's entries for one language pair."""

    source: str  # ISO 639-1 language codes, lower case
    target: str
    entry_count: int
    created: float  # seconds since the epoch
    entries: Entries = ()  # loaded only when asked for


@dataclass(frozen=True)
class Glossary:
    id: str
    key: str  # sha256 of the api key that created it ("" without keys)
    name: str
    source: str  # ISO 639-1 language codes, lower case: its one dictionary's ("" for several or none)
    target: str
    entry_count: int  # of all its dictionaries
    created: float  # seconds since the epoch
    entries: Entries = ()  # its one dictionary's, loaded only when asked for
    multilingual: bool = False  # made (or edited) as DeepL's v3 glossaries are: its dictionaries below
    dictionaries: tuple[Dictionary, ...] = ()

    @property
    def parts(self) -> tuple[Dictionary, ...]:
        """Its dictionaries: a glossary made for one pair is one."""
        if self.multilingual:
            return self.dictionaries
        return (Dictionary(self.source, self.target, self.entry_count, self.created, self.entries),)


def with_dictionaries(glossary: Glossary, dictionaries: tuple[Dictionary, ...]) -> Glossary:
    """``glossary`` holding ``dictionaries``; where it has one, that one's pair and entries are its own
    (what the v2 reads show)."""
    one = dictionaries[0] if len(dictionaries) == 1 else None
    return dataclasses.replace(
        glossary,
        source=one.source if one else "",
        target=one.target if one else "",
        entry_count=sum(d.entry_count for d in dictionaries),
        entries=one.entries if one else (),
        multilingual=True,
        dictionaries=dictionaries,
    )


_HEAD = "id, key, name, source, target, entry_count, created, multilingual"
_DICTIONARY = "source, target, entry_count, created"


def _entries(text: str) -> Entries:
    return tuple((s, t) for s, t in json.loads(text))


class GlossaryStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        db.create(SCHEMA)
        db.add_columns("glossaries", _ADDED)

    def add(self, glossary: Glossary, max_per_key: int) -> bool:
        """Stores ``glossary``; False when its key already has ``max_per_key`` (nothing stored)."""
        with self.db.transaction(lock="glossaries"):  # the count and the insert as one: workers add at once
            ((count,),) = self.db.rows("SELECT count(*) FROM glossaries WHERE key = ?", (glossary.key,))
            if count >= max_per_key:
                return False
            self._write(glossary, new=True)
        return True

    def _write(self, glossary: Glossary, new: bool) -> None:
        one = not glossary.multilingual
        values = (
            glossary.name, glossary.source if one else "", glossary.target if one else "", glossary.entry_count,
            json.dumps(glossary.entries if one else (), ensure_ascii=False), int(glossary.multilingual),
        )  # fmt: skip
        if new:
            self.db.run(
                f"INSERT INTO glossaries ({_HEAD}, entries) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (glossary.id, glossary.key, *values[:4], glossary.created, values[5], values[4]),
            )
        else:
            self.db.run(
                "UPDATE glossaries SET name = ?, source = ?, target = ?, entry_count = ?, entries = ?, "
                "multilingual = ? WHERE id = ? AND key = ?",
                (*values, glossary.id, glossary.key),
            )
            self.db.run("DELETE FROM glossary_dictionaries WHERE glossary_id = ?", (glossary.id,))
        self.db.run_many(
            f"INSERT INTO glossary_dictionaries (glossary_id, {_DICTIONARY}, entries) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (glossary.id, d.source, d.target, d.entry_count, d.created, json.dumps(d.entries, ensure_ascii=False))
                for d in glossary.dictionaries
            ],
        )

    def list(self, key: str) -> list[Glossary]:
        """The key's glossaries, oldest first, their dictionaries without entries."""
        rows = self.db.rows(f"SELECT {_HEAD} FROM glossaries WHERE key = ? ORDER BY created, id", (key,))
        found: dict[str, list[Dictionary]] = {}
        if any(row[-1] for row in rows):
            for glossary_id, *row in self.db.rows(
                "SELECT d.glossary_id, d.source, d.target, d.entry_count, d.created FROM glossary_dictionaries d "
                "JOIN glossaries g ON g.id = d.glossary_id WHERE g.key = ? ORDER BY d.created, d.source, d.target",
                (key,),
            ):
                found.setdefault(glossary_id, []).append(Dictionary(*row))
        return [self._glossary(row, (), found.get(row[0], [])) for row in rows]

    def get(self, key: str, glossary_id: str, entries: bool = False) -> Glossary | None:
        columns = f"{_HEAD}, entries" if entries else _HEAD
        rows = self.db.rows(f"SELECT {columns} FROM glossaries WHERE id = ? AND key = ?", (glossary_id, key))
        if not rows:
            return None
        row = rows[0][: len(_HEAD.split(", "))]
        dictionaries = []
        if row[-1]:
            columns = f"{_DICTIONARY}, entries" if entries else _DICTIONARY
            for found in self.db.rows(
                f"SELECT {columns} FROM glossary_dictionaries WHERE glossary_id = ? ORDER BY created, source, target",
                (glossary_id,),
            ):
                dictionaries.append(Dictionary(*found[:4], entries=_entries(found[4]) if entries else ()))
        return self._glossary(row, _entries(rows[0][-1]) if entries else (), dictionaries)

    @staticmethod
    def _glossary(row: tuple, entries: Entries, dictionaries: list[Dictionary]) -> Glossary:
        glossary = Glossary(*row[:7], entries=entries)
        return with_dictionaries(glossary, tuple(dictionaries)) if row[7] else glossary

    def edit(self, key: str, glossary_id: str, change: Callable[[Glossary], Glossary]) -> Glossary | None:
        """The key's glossary (entries and all) replaced by ``change(glossary)``, a multilingual one,
        in one transaction (an error ``change`` raises leaves it as it was); None when there is none."""
        with self.db.transaction(lock="glossaries"):  # one edit at a time: a merge reads what the last one wrote
            found = self.get(key, glossary_id, entries=True)
            if found is None:
                return None
            changed = change(found)
            self._write(changed, new=False)
        return changed

    def delete(self, key: str, glossary_id: str) -> bool:
        with self.db.transaction():
            if not self.db.run("DELETE FROM glossaries WHERE id = ? AND key = ?", (glossary_id, key)):
                return False
            self.db.run("DELETE FROM glossary_dictionaries WHERE glossary_id = ?", (glossary_id,))
        return True
