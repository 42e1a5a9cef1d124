"""File jobs' records: the few operations the job runner needs (:class:`JobStore`), on SQLite.

The state folder (``--state-dir``) holds ``state.sqlite3`` (records, WAL mode, so the
processes of ``--workers N`` read and write it at once) and ``jobs/``, a plain file per job's
upload (``<id>.in``) and result (``<id>.out``). A record holds its job's key as the sha256
of the api key (never the key; "" on a server without keys): every read names the key, so
one key never sees another's jobs. Each finished sentence's translation is stored as the
engine returns it (``job_sentences``), so an interrupted job resumes without decoding them
again.

A job is ``queued``, ``running`` (claimed by one server process, whose pid the record
holds), or finished: ``done``, ``failed`` or ``cancelled``. A server starting on the folder
puts back in the queue the running jobs of processes that are gone.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path

FINISHED = ("done", "failed", "cancelled")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, key TEXT NOT NULL, status TEXT NOT NULL, filename TEXT NOT NULL,
    source TEXT NOT NULL, target TEXT NOT NULL, model TEXT NOT NULL,
    done INTEGER NOT NULL DEFAULT 0, total INTEGER NOT NULL DEFAULT 0, reused INTEGER NOT NULL DEFAULT 0,
    decoded INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL, error TEXT NOT NULL DEFAULT '', media_type TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL, started REAL NOT NULL DEFAULT 0, updated REAL NOT NULL, expires REAL NOT NULL,
    owner INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status, created);
CREATE INDEX IF NOT EXISTS jobs_by_key ON jobs (key);
CREATE TABLE IF NOT EXISTS job_sentences (
    job TEXT NOT NULL, source TEXT NOT NULL, translation TEXT NOT NULL, PRIMARY KEY (job, source)
) WITHOUT ROWID;
"""


@dataclass(frozen=True)
class Job:
    id: str
    key: str  # sha256 of the api key, "" without keys
    status: str
    filename: str
    source: str
    target: str
    model: str
    done: int  # sentences translated
    total: int  # sentences in the file (0 until it is read)
    reused: int  # sentences taken from an interrupted run's record, not decoded again
    decoded: int  # sentences the engine translated in its latest run
    bytes: int  # of its files on disk: the upload, then the result too
    error: str
    media_type: str
    created: float
    started: float  # when its latest run began (0: never)
    updated: float
    expires: float
    owner: int  # pid of the server process running it

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


_COLUMNS = ", ".join(f.name for f in fields(Job))


class JobStore:
    """What file jobs need of a store; :class:`SqliteJobStore` keeps them in the state folder."""

    def add(self, job: Job, max_jobs: int, max_per_key: int, max_key_bytes: int) -> str:
        """Stores ``job``; "" when stored, else the bound it would pass (``max_jobs``, ...)."""
        raise NotImplementedError

    def get(self, key: str, job_id: str) -> Job | None:
        raise NotImplementedError

    def get_any(self, job_id: str) -> Job | None:
        """A job whatever its key (the runner's own look, never a client's)."""
        raise NotImplementedError

    def claim(self, owner: int) -> Job | None:
        """The oldest queued job, marked running by ``owner``; None when none waits."""
        raise NotImplementedError

    def update(self, job_id: str, **changes: object) -> None:
        raise NotImplementedError

    def cancel(self, key: str, job_id: str) -> Job | None:
        """Marks an unfinished job cancelled; the job as it then is, None when unknown."""
        raise NotImplementedError

    def requeue(self, gone: Callable[[int], bool]) -> int:
        """Running jobs whose owner is ``gone`` back in the queue; how many."""
        raise NotImplementedError

    def expired(self, now: float) -> list[str]:
        """Deletes the records past their expiry; their ids (their files are the caller's)."""
        raise NotImplementedError

    def add_sentences(self, job_id: str, pairs: Mapping[str, str]) -> None:
        raise NotImplementedError

    def sentences(self, job_id: str) -> dict[str, str]:
        raise NotImplementedError


class SqliteJobStore(JobStore):
    """:class:`JobStore` in ``folder/state.sqlite3``; one connection per thread."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "state.sqlite3"
        self._local = threading.local()
        with self._db() as db:
            db.executescript(_SCHEMA)

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            # busy_timeout: another worker process holding the write lock is waited for, not an error
            db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
        return db

    def _row(self, row: tuple | None) -> Job | None:
        return None if row is None else Job(*row)

    def add(self, job: Job, max_jobs: int, max_per_key: int, max_key_bytes: int) -> str:
        db = self._db()
        db.execute("BEGIN IMMEDIATE")  # the counts and the insert as one: workers add at once
        try:
            (count,) = db.execute("SELECT count(*) FROM jobs").fetchone()
            mine, size = db.execute(
                "SELECT count(*), coalesce(sum(bytes), 0) FROM jobs WHERE key = ?", (job.key,)
            ).fetchone()
            over = (
                "max_jobs" if count >= max_jobs
                else "max_jobs_per_key" if mine >= max_per_key
                else "max_job_bytes_per_key" if size + job.bytes > max_key_bytes
                else ""
            )  # fmt: skip
            if not over:
                values = tuple(getattr(job, f.name) for f in fields(Job))
                db.execute(f"INSERT INTO jobs ({_COLUMNS}) VALUES ({', '.join('?' * len(values))})", values)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return over

    def get(self, key: str, job_id: str) -> Job | None:
        row = self._db().execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = ? AND key = ?", (job_id, key)).fetchone()
        return self._row(row)

    def get_any(self, job_id: str) -> Job | None:
        return self._row(self._db().execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone())

    def claim(self, owner: int) -> Job | None:
        now = time.time()
        row = (
            self._db()
            .execute(
                f"UPDATE jobs SET status = 'running', owner = ?, started = ?, updated = ? WHERE id = "
                f"(SELECT id FROM jobs WHERE status = 'queued' ORDER BY created LIMIT 1) RETURNING {_COLUMNS}",
                (owner, now, now),
            )
            .fetchone()
        )
        return self._row(row)

    def update(self, job_id: str, **changes: object) -> None:
        changes.setdefault("updated", time.time())
        names = ", ".join(f"{name} = ?" for name in changes)
        self._db().execute(f"UPDATE jobs SET {names} WHERE id = ?", (*changes.values(), job_id))

    def cancel(self, key: str, job_id: str) -> Job | None:
        self._db().execute(
            "UPDATE jobs SET status = 'cancelled', updated = ? "
            "WHERE id = ? AND key = ? AND status IN ('queued', 'running')",
            (time.time(), job_id, key),
        )
        return self.get(key, job_id)

    def requeue(self, gone: Callable[[int], bool]) -> int:
        db = self._db()
        owners = [r[0] for r in db.execute("SELECT DISTINCT owner FROM jobs WHERE status = 'running'")]
        dead = [(o,) for o in owners if gone(o)]
        before = db.total_changes
        db.executemany("UPDATE jobs SET status = 'queued', owner = 0 WHERE status = 'running' AND owner = ?", dead)
        return db.total_changes - before

    def expired(self, now: float) -> list[str]:
        db = self._db()
        ids = [r[0] for r in db.execute("DELETE FROM jobs WHERE expires <= ? RETURNING id", (now,)).fetchall()]
        db.executemany("DELETE FROM job_sentences WHERE job = ?", [(i,) for i in ids])
        return ids

    def add_sentences(self, job_id: str, pairs: Mapping[str, str]) -> None:
        db = self._db()
        db.execute("BEGIN")
        db.executemany("INSERT OR REPLACE INTO job_sentences VALUES (?, ?, ?)", [(job_id, *p) for p in pairs.items()])
        db.execute("COMMIT")

    def sentences(self, job_id: str) -> dict[str, str]:
        rows = self._db().execute("SELECT source, translation FROM job_sentences WHERE job = ?", (job_id,))
        return dict(rows.fetchall())


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
