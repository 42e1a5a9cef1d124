"""File jobs' records: the few operations the job runner needs (:class:`JobStore`), on the
server's records store (``state.Database``: SQLite in the state folder, or PostgreSQL at
``--state-url``).

The state folder (``--state-dir``) holds ``state.sqlite3`` (records, WAL mode, so the
processes of ``--workers N`` read and write it at once) and ``jobs/``, a plain file per job's
upload (``<id>.in``) and result (``<id>.out``); replicas sharing PostgreSQL share that folder
as a volume. A record holds its job's key as the sha256
of the api key (never the key; "" on a server without keys): every read names the key, so
one key never sees another's jobs. Each finished sentence's translation is stored as the
engine returns it (``job_sentences``), so an interrupted job resumes without decoding them
again. A job submitted with a stored glossary keeps its entries in its record, so that a
resumed job uses the terms it was submitted with, whatever became of the glossary since.

A job is ``queued``, ``running`` (claimed by one server process: the record holds its host
and pid, :func:`owner_id`), or finished: ``done``, ``failed`` or ``cancelled``. A server,
as it starts and then every few seconds, puts back in the queue the running jobs of processes
of its host that are gone (a replica's, when a server starts again under its host name), and
its own that it no longer runs (their end could not be recorded).
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
import zlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from ..state.database import Database, SqliteDatabase

FINISHED = ("done", "failed", "cancelled")
Glossary = tuple[tuple[str, str], ...]  # (source term, target term) pairs
Serves = Callable[[str, str, str], bool]  # whether a server runs jobs of (source, target, model)

# Columns a jobs table made by an older server lacks, added when a store opens it: a job's stored
# glossary (its id, and its entries as JSON pairs, read by the runner only), the source language
# detected for a job sent as ``auto``, the characters of text its translation counted, the client
# whose monthly usage they count in, where its run's pace is measured from.
_ADDED = {
    "glossary_id": "TEXT NOT NULL DEFAULT ''",
    "glossary": "TEXT NOT NULL DEFAULT ''",
    "detected": "TEXT NOT NULL DEFAULT ''",
    "characters": "BIGINT NOT NULL DEFAULT 0",
    "client": "TEXT NOT NULL DEFAULT ''",
    "paced": "DOUBLE PRECISION NOT NULL DEFAULT 0",
    "paced_decoded": "BIGINT NOT NULL DEFAULT 0",
}

# One SQL for both backends (state/database.py); a state folder's older SQLite file (REAL,
# INTEGER, a WITHOUT ROWID sentence table) has the same columns (_ADDED aside) and is kept as it is.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, key TEXT NOT NULL, status TEXT NOT NULL, filename TEXT NOT NULL,
    source TEXT NOT NULL, target TEXT NOT NULL, model TEXT NOT NULL,
    done BIGINT NOT NULL DEFAULT 0, total BIGINT NOT NULL DEFAULT 0, reused BIGINT NOT NULL DEFAULT 0,
    decoded BIGINT NOT NULL DEFAULT 0,
    bytes BIGINT NOT NULL, error TEXT NOT NULL DEFAULT '', media_type TEXT NOT NULL DEFAULT '',
    created DOUBLE PRECISION NOT NULL, started DOUBLE PRECISION NOT NULL DEFAULT 0,
    updated DOUBLE PRECISION NOT NULL, expires DOUBLE PRECISION NOT NULL,
    owner BIGINT NOT NULL DEFAULT 0,
    glossary_id TEXT NOT NULL DEFAULT '', glossary TEXT NOT NULL DEFAULT '', detected TEXT NOT NULL DEFAULT '',
    characters BIGINT NOT NULL DEFAULT 0, client TEXT NOT NULL DEFAULT '',
    paced DOUBLE PRECISION NOT NULL DEFAULT 0, paced_decoded BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status, created);
CREATE INDEX IF NOT EXISTS jobs_by_key ON jobs (key);
CREATE TABLE IF NOT EXISTS job_sentences (
    job TEXT NOT NULL, source TEXT NOT NULL, translation TEXT NOT NULL, PRIMARY KEY (job, source)
)
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
    owner: int  # the server process running it (owner_id: its host and pid)
    glossary_id: str = ""  # the stored glossary it was submitted with ("": none); its entries: JobStore.glossary
    detected: str = ""  # the language detected for a source sent as "auto", once done ("": none detected)
    characters: int = 0  # of text translated, once done (TranslateFile's count: what DeepL's status bills)
    client: str = ""  # who submitted it (``Call.client``): whose monthly usage its characters count in
    # when its latest run's first decoded sentences were recorded (0: not yet), and ``decoded`` then:
    # its pace is measured from there, not from ``started`` (the file's reading and splitting, a
    # model's load, the engine's first batch are no pace of the sentences left)
    paced: float = 0.0
    paced_decoded: int = 0

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def source_language(self) -> str:
        """The language it was translated from: the one detected where its source was ``auto``."""
        return self.detected or self.source


_COLUMNS = ", ".join(f.name for f in fields(Job))


class JobStore:
    """What file jobs need of a store; :class:`SqlJobStore` keeps them in the records store."""

    def add(self, job: Job, max_jobs: int, max_per_key: int, max_key_bytes: int, glossary: Glossary = ()) -> str:
        """Stores ``job`` (and the entries of its stored glossary, as they were when it was
        submitted); "" when stored, else the bound it would pass: ``max_jobs`` (all records),
        ``max_jobs_per_key`` (the key's queued and running jobs), ``max_job_bytes_per_key`` (the
        key's files, finished jobs' included)."""
        raise NotImplementedError

    def glossary(self, job_id: str) -> Glossary:
        """The glossary entries ``add`` stored with the job (none: ``()``)."""
        raise NotImplementedError

    def get(self, key: str, job_id: str) -> Job | None:
        raise NotImplementedError

    def get_any(self, job_id: str) -> Job | None:
        """A job whatever its key (the runner's own look, never a client's)."""
        raise NotImplementedError

    def claim(self, owner: int, serves: Serves | None = None) -> Job | None:
        """The oldest queued job, marked running by ``owner``; None when none waits. ``serves``:
        only a job whose (source, target, model) it accepts (the pairs the caller's models
        translate: servers of other models may share the store)."""
        raise NotImplementedError

    def update(self, job_id: str, **changes: object) -> bool:
        """The runner's changes to a job it runs; a job no longer running (cancelled meanwhile,
        requeued, expired) is left as it is. Whether the job took them."""
        raise NotImplementedError

    def cancel(self, key: str, job_id: str) -> Job | None:
        """Marks an unfinished job cancelled; the job as it then is, None when unknown."""
        raise NotImplementedError

    def delete(self, key: str, job_id: str) -> bool:
        """Deletes a finished job's record and sentences (its files are the caller's); whether it was there."""
        raise NotImplementedError

    def requeue(self, gone: Callable[[int], bool], keep: Collection[str] = (), before: float = math.inf) -> int:
        """Running jobs whose owner is ``gone`` back in the queue, but for the ids in ``keep`` (the
        caller's own jobs still running) and those claimed at ``before`` or later (a claim whose
        job its process has yet to add to what it runs); how many."""
        raise NotImplementedError

    def expired(self, now: float, retention_s: float) -> list[str]:
        """Deletes the records past their expiry; their ids (their files are the caller's). Never a
        running job's, nor one queued again after a run that started within ``retention_s`` (an
        interrupted run, to be resumed): a job that outlives its expiry is kept until it ends, and
        then for ``retention_s`` (its end sets a new expiry)."""
        raise NotImplementedError

    def add_sentences(self, job_id: str, pairs: Mapping[str, str]) -> None:
        raise NotImplementedError

    def sentences(self, job_id: str) -> dict[str, str]:
        raise NotImplementedError


class SqlJobStore(JobStore):
    """:class:`JobStore` on the server's records store."""

    def __init__(self, db: Database) -> None:
        self.db = db
        db.create(_SCHEMA)
        db.add_columns("jobs", _ADDED)

    def _row(self, rows: list[tuple]) -> Job | None:
        return Job(*rows[0]) if rows else None

    def add(self, job: Job, max_jobs: int, max_per_key: int, max_key_bytes: int, glossary: Glossary = ()) -> str:
        with self.db.transaction(lock="jobs"):  # the counts and the insert as one: workers add at once
            ((count,),) = self.db.rows("SELECT count(*) FROM jobs")
            # a key's place in the queue is its unfinished jobs; its finished ones count in bytes
            ((mine, size),) = self.db.rows(
                "SELECT count(*) FILTER (WHERE status IN ('queued', 'running')), coalesce(sum(bytes), 0) "
                "FROM jobs WHERE key = ?",
                (job.key,),
            )
            over = (
                "max_jobs" if count >= max_jobs
                else "max_jobs_per_key" if mine >= max_per_key
                else "max_job_bytes_per_key" if size + job.bytes > max_key_bytes
                else ""
            )  # fmt: skip
            if not over:
                values = (*(getattr(job, f.name) for f in fields(Job)), json.dumps(glossary, ensure_ascii=False))
                sql = f"INSERT INTO jobs ({_COLUMNS}, glossary) VALUES ({', '.join('?' * len(values))})"
                self.db.run(sql, values)
        return over

    def glossary(self, job_id: str) -> Glossary:
        rows = self.db.rows("SELECT glossary FROM jobs WHERE id = ?", (job_id,))
        return tuple((source, target) for source, target in json.loads(rows[0][0])) if rows and rows[0][0] else ()

    def get(self, key: str, job_id: str) -> Job | None:
        return self._row(self.db.rows(f"SELECT {_COLUMNS} FROM jobs WHERE id = ? AND key = ?", (job_id, key)))

    def get_any(self, job_id: str) -> Job | None:
        return self._row(self.db.rows(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,)))

    def claim(self, owner: int, serves: Serves | None = None) -> Job | None:
        now = time.time()
        where, pairs = "", []
        if serves is not None:  # the few distinct pairs waiting, each asked once
            waiting = self.db.rows("SELECT DISTINCT source, target, model FROM jobs WHERE status = 'queued'")
            pairs = [p for p in waiting if serves(*p)]
            if not pairs:
                return None
            where = " AND (" + " OR ".join(["(source = ? AND target = ? AND model = ?)"] * len(pairs)) + ")"
        # status is checked again outside the subquery: two processes that picked the same id
        # take it once (PostgreSQL re-reads the row after the first one's update; SQLite has one writer)
        oldest = f"SELECT id FROM jobs WHERE status = 'queued'{where} ORDER BY created LIMIT 1{self.db.skip_locked}"
        rows = self.db.rows(
            # a new run: its counts of sentences reused and decoded and its pace start at 0 (done and total stay)
            f"UPDATE jobs SET status = 'running', owner = ?, started = ?, updated = ?, reused = 0, decoded = 0, "
            "paced = 0, paced_decoded = 0 "
            f"WHERE status = 'queued' AND id = ({oldest}) RETURNING {_COLUMNS}",
            (owner, now, now, *(value for pair in pairs for value in pair)),
        )
        return self._row(rows)

    def update(self, job_id: str, **changes: object) -> bool:
        changes.setdefault("updated", time.time())
        names = ", ".join(f"{name} = ?" for name in changes)
        sql = f"UPDATE jobs SET {names} WHERE id = ? AND status = 'running'"
        return self.db.run(sql, (*changes.values(), job_id)) > 0

    def cancel(self, key: str, job_id: str) -> Job | None:
        self.db.run(
            "UPDATE jobs SET status = 'cancelled', updated = ? "
            "WHERE id = ? AND key = ? AND status IN ('queued', 'running')",
            (time.time(), job_id, key),
        )
        return self.get(key, job_id)

    def delete(self, key: str, job_id: str) -> bool:
        with self.db.transaction():
            finished = ", ".join(f"'{status}'" for status in FINISHED)
            sql = f"DELETE FROM jobs WHERE id = ? AND key = ? AND status IN ({finished})"
            if not self.db.run(sql, (job_id, key)):
                return False
            self.db.run("DELETE FROM job_sentences WHERE job = ?", (job_id,))
        return True

    def requeue(self, gone: Callable[[int], bool], keep: Collection[str] = (), before: float = math.inf) -> int:
        running = self.db.rows("SELECT id, owner FROM jobs WHERE status = 'running' AND started < ?", (before,))
        owners = {owner: gone(owner) for owner in {owner for _, owner in running}}
        # the owner is checked again: a job requeued and claimed meanwhile by a live process stays its
        sql = "UPDATE jobs SET status = 'queued', owner = 0 WHERE id = ? AND status = 'running' AND owner = ?"
        return sum(self.db.run(sql, row) for row in running if owners[row[1]] and row[0] not in keep)

    def expired(self, now: float, retention_s: float) -> list[str]:
        ids = [
            r[0]
            for r in self.db.rows(
                "DELETE FROM jobs WHERE expires <= ? AND status <> 'running' "
                "AND NOT (status = 'queued' AND started > ?) RETURNING id",
                (now, now - retention_s),
            )
        ]
        self.db.run_many("DELETE FROM job_sentences WHERE job = ?", [(i,) for i in ids])
        return ids

    def add_sentences(self, job_id: str, pairs: Mapping[str, str]) -> None:
        with self.db.transaction():
            self.db.run_many(
                "INSERT INTO job_sentences (job, source, translation) VALUES (?, ?, ?) "
                "ON CONFLICT (job, source) DO UPDATE SET translation = excluded.translation",
                [(job_id, *p) for p in pairs.items()],
            )

    def sentences(self, job_id: str) -> dict[str, str]:
        return dict(self.db.rows("SELECT source, translation FROM job_sentences WHERE job = ?", (job_id,)))


def sqlite_job_store(folder: Path) -> SqlJobStore:
    """The store of a state folder's own SQLite file."""
    return SqlJobStore(SqliteDatabase(folder / "state.sqlite3"))


PID_BITS = 22  # Linux pids stay below 2**22 (pid_max's limit)


def _host() -> int:
    return zlib.crc32(socket.gethostname().encode())


def owner_id() -> int:
    """This process as a job's owner: its host (crc32 of the host name) and pid in one integer,
    so replicas on several machines sharing a PostgreSQL store never take each other's pids for
    processes of their own."""
    return (_host() << PID_BITS) | os.getpid()


def owner_gone(owner: int) -> bool:
    """Whether the process ``owner`` names has ended: known on its own host only (a record
    written before owners named their host, 0 there, counts as this host's)."""
    host, pid = owner >> PID_BITS, owner & ((1 << PID_BITS) - 1)
    return host in (0, _host()) and not pid_alive(pid)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
