"""Stored glossaries' records (DeepL's v2 semantics): created whole, read, listed and deleted,
never changed. Each belongs to one key (the sha256 of the api key that created it, "" on a
server without keys) and is only ever found with it."""

from __future__ import annotations

import json
from dataclasses import dataclass

from .database import Database

SCHEMA = """
CREATE TABLE IF NOT EXISTS glossaries (
    id TEXT PRIMARY KEY, key TEXT NOT NULL, name TEXT NOT NULL, source TEXT NOT NULL, target TEXT NOT NULL,
    entry_count BIGINT NOT NULL, entries TEXT NOT NULL, created DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS glossaries_by_key ON glossaries (key, created)
"""

Entries = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Glossary:
    id: str
    key: str  # sha256 of the api key that created it ("" without keys)
    name: str
    source: str  # ISO 639-1 language codes, lower case
    target: str
    entry_count: int
    created: float  # seconds since the epoch
    entries: Entries = ()  # loaded only when asked for


_HEAD = "id, key, name, source, target, entry_count, created"


class GlossaryStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        db.create(SCHEMA)

    def add(self, glossary: Glossary, max_per_key: int) -> bool:
        """Stores ``glossary``; False when its key already has ``max_per_key`` (nothing stored)."""
        with self.db.transaction(lock="glossaries"):  # the count and the insert as one: workers add at once
            ((count,),) = self.db.rows("SELECT count(*) FROM glossaries WHERE key = ?", (glossary.key,))
            if count >= max_per_key:
                return False
            self.db.run(
                f"INSERT INTO glossaries ({_HEAD}, entries) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    glossary.id, glossary.key, glossary.name, glossary.source, glossary.target,
                    glossary.entry_count, glossary.created, json.dumps(glossary.entries, ensure_ascii=False),
                ),
            )  # fmt: skip
        return True

    def list(self, key: str) -> list[Glossary]:
        rows = self.db.rows(f"SELECT {_HEAD} FROM glossaries WHERE key = ? ORDER BY created, id", (key,))
        return [Glossary(*row) for row in rows]

    def get(self, key: str, glossary_id: str, entries: bool = False) -> Glossary | None:
        columns = f"{_HEAD}, entries" if entries else _HEAD
        rows = self.db.rows(f"SELECT {columns} FROM glossaries WHERE id = ? AND key = ?", (glossary_id, key))
        if not rows:
            return None
        row = rows[0]
        if not entries:
            return Glossary(*row)
        return Glossary(*row[:-1], entries=tuple((s, t) for s, t in json.loads(row[-1])))

    def delete(self, key: str, glossary_id: str) -> bool:
        return self.db.run("DELETE FROM glossaries WHERE id = ? AND key = ?", (glossary_id, key)) > 0
