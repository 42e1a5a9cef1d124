"""Characters translated per client and calendar month, on the server's records store: one row
per (client, month), which every process of ``--workers N`` (and every replica on a shared
PostgreSQL) adds its own counts to, so the row is the client's month whoever served it. The
service keeps the counts in memory and writes what it added in batches (``service/usage.py``);
nothing here runs per request."""

from __future__ import annotations

from collections.abc import Mapping

from .database import Database

SCHEMA = """
CREATE TABLE IF NOT EXISTS character_usage (
    client TEXT NOT NULL, month TEXT NOT NULL, characters BIGINT NOT NULL, updated DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (client, month)
);
CREATE INDEX IF NOT EXISTS character_usage_by_month ON character_usage (month, updated)
"""


class UsageStore:
    """The ``character_usage`` table; ``month`` is ``YYYY-MM`` (UTC), so months order as text."""

    def __init__(self, db: Database) -> None:
        self.db = db
        db.create(SCHEMA)

    def add(self, added: Mapping[tuple[str, str], int], now: float) -> None:
        """Adds each (client, month)'s characters to its row, in one transaction, marked written at
        ``now`` (seconds since the epoch) for :meth:`changed`."""
        with self.db.transaction():
            self.db.run_many(
                "INSERT INTO character_usage (client, month, characters, updated) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (client, month) DO UPDATE SET "
                "characters = character_usage.characters + excluded.characters, updated = excluded.updated",
                [(client, month, characters, now) for (client, month), characters in added.items()],
            )

    def changed(self, month: str, since: float) -> dict[str, int]:
        """The clients' counts of ``month`` written at ``since`` (seconds since the epoch) or later."""
        sql = "SELECT client, characters FROM character_usage WHERE month = ? AND updated >= ?"
        return dict(self.db.rows(sql, (month, since)))

    def forget(self, before: str) -> int:
        """Deletes the rows of the months before ``before``; how many."""
        return self.db.run("DELETE FROM character_usage WHERE month < ?", (before,))
