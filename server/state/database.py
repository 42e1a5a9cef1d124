"""The server's records store: one small interface (:class:`Database`), two backends.

``SqliteDatabase``: a file in the state folder (``--state-dir``), WAL mode, so the processes of
``--workers N`` read and write it at once; a writer waits for another's lock (``busy_timeout``)
instead of failing. ``PostgresDatabase`` (``--state-url postgresql://...``, the ``postgres``
extra: psycopg 3): every replica behind a load balancer sees the same records.

The stores above (glossaries, file jobs) write one SQL for both: ``?`` placeholders, types
both spell (``TEXT``, ``BIGINT``, ``DOUBLE PRECISION``), ``INSERT ... ON CONFLICT``,
``UPDATE ... RETURNING``. What differs is here: connections (one per thread), placeholders,
and :meth:`Database.transaction`, whose ``lock`` makes a count-then-insert atomic across
processes (SQLite: ``BEGIN IMMEDIATE``, the database's one write lock; PostgreSQL: ``LOCK
TABLE ... IN EXCLUSIVE MODE``, which readers pass).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..shared.config import ConfigError
from ..shared.errors import ServingError

log = logging.getLogger(__name__)
Row = tuple[Any, ...]
_WAIT_S = 30.0  # how long SQLite waits for another process's lock


class StateStoreError(ConfigError):
    """The store cannot be opened (a bad ``--state-url``, a driver not installed, a server not reached)."""


class StoreUnavailable(ServingError):
    """The records store did not answer (PostgreSQL unreachable, SQLite locked past its wait):
    UNAVAILABLE (503), worth retrying; the next call reconnects."""

    status = "UNAVAILABLE"


def unavailable(url: str, exc: BaseException) -> StoreUnavailable:
    """What a caller is told (no file path, host or driver message: those are the operator's,
    logged here)."""
    log.warning("the state store %s did not answer: %s", url, str(exc).strip())
    return StoreUnavailable("the server's state store did not answer; retry later")


class Database:
    """What the stores need of a database; one per server process, shared by its threads."""

    url: str  # for logs, without a password
    skip_locked = ""  # what a SELECT adds to skip rows another transaction has locked (PostgreSQL's)

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Runs ``sql`` (``?`` placeholders); its rows (a SELECT's, or ``RETURNING``'s)."""
        raise NotImplementedError

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Runs ``sql``; how many rows it changed."""
        raise NotImplementedError

    def run_many(self, sql: str, params: Iterable[Sequence[Any]]) -> None:
        raise NotImplementedError

    def transaction(self, lock: str = "") -> contextlib.AbstractContextManager[None]:
        """The statements inside, on this thread, commit together or not at all; ``lock``: a table
        written by no other process until the end (counts, then an insert within them)."""
        raise NotImplementedError

    def create(self, schema: str) -> None:
        """``CREATE ... IF NOT EXISTS`` statements, ``;``-separated, safe when processes start at once."""
        raise NotImplementedError

    def add_columns(self, table: str, columns: Mapping[str, str]) -> None:
        """``columns`` (name -> SQL type and default) added to an older ``table`` that lacks them
        (a store's migration), safe when processes start at once."""
        raise NotImplementedError

    def close(self) -> None:
        """This thread's connection; the others close with their threads."""


class SqliteDatabase(Database):
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.url = path, f"sqlite:{path}"
        self._local = threading.local()
        try:  # a damaged file is one line at start-up, naming it, not a failure of every later call
            self._db()
        except sqlite3.OperationalError as exc:
            raise StoreUnavailable(f"the state store {self.url} did not answer: {exc}") from None
        except sqlite3.DatabaseError as exc:
            raise StateStoreError(
                f"the state store {path} is not a usable SQLite database ({exc}): move it away, and the "
                "server starts with an empty store (its file jobs and stored glossaries lost), or restore "
                "it from a backup"
            ) from None

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = self._connect()
        return db

    def _connect(self) -> sqlite3.Connection:
        # busy_timeout: another worker process holding the write lock is waited for, not an error.
        # Turning a new file to WAL is the one step SQLite fails at once, past its busy handler, when
        # processes open the store together (--workers N, two servers on one folder): waited for here.
        deadline = time.monotonic() + _WAIT_S
        while True:
            db = sqlite3.connect(self.path, timeout=_WAIT_S, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                return db
            except sqlite3.OperationalError as exc:
                db.close()
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(0.02)

    @contextlib.contextmanager
    def _answered(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as exc:  # "database is locked" past busy_timeout, a full disk, a damaged file
            if type(exc) not in (sqlite3.OperationalError, sqlite3.DatabaseError):
                raise  # a constraint or an SQL error: the caller's bug, not the store's state
            raise unavailable(self.url, exc) from None

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        with self._answered():
            return self._db().execute(sql, params).fetchall()

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        with self._answered():
            return self._db().execute(sql, params).rowcount

    def run_many(self, sql: str, params: Iterable[Sequence[Any]]) -> None:
        with self._answered():
            self._db().executemany(sql, params)

    @contextlib.contextmanager
    def transaction(self, lock: str = "") -> Iterator[None]:
        with self._answered():
            db = self._db()
            db.execute("BEGIN IMMEDIATE" if lock else "BEGIN")  # IMMEDIATE: the write lock now, not at the insert
        try:
            yield
            with self._answered():  # COMMIT is where a full disk shows in WAL mode
                db.execute("COMMIT")
        except BaseException:
            # SQLite may have rolled back already (a full disk): the error that stopped it is the one to tell
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            raise

    def create(self, schema: str) -> None:
        with self._answered():
            self._db().executescript(schema)

    def add_columns(self, table: str, columns: Mapping[str, str]) -> None:
        with self.transaction(lock=table):  # the write lock: a second process sees the first's columns
            have = {row[1] for row in self.rows(f"PRAGMA table_info({table})")}
            for name, kind in columns.items():
                if name not in have:
                    self.run(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None


class PostgresDatabase(Database):
    """PostgreSQL through psycopg 3, one autocommit connection per thread."""

    skip_locked = " FOR UPDATE SKIP LOCKED"
    SCHEMA_LOCK = 0x617474_6E7365  # pg_advisory_lock key: one process creates the tables at a time

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError:
            raise StateStoreError(
                "--state-url postgresql://... needs the PostgreSQL driver: pip install 'attnserve[postgres]'"
            ) from None
        self._psycopg, self.dsn = psycopg, url
        self.url = _without_password(url)
        self._local = threading.local()
        try:
            self._db()
        except psycopg.Error as exc:
            raise StateStoreError(f"--state-url {self.url}: cannot connect: {str(exc).strip()}") from None

    def _db(self):
        db = getattr(self._local, "db", None)
        if db is None or db.closed:
            db = self._psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)
            self._local.db = db
        return db

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("%", "%%").replace("?", "%s")

    @contextlib.contextmanager
    def _answered(self) -> Iterator[None]:
        try:
            yield
        except self._psycopg.OperationalError as exc:  # the server went away or refused: reconnect next time
            self.close()
            raise unavailable(self.url, exc) from None

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        with self._answered(), self._db().cursor() as cursor:
            cursor.execute(self._sql(sql), params)
            return cursor.fetchall() if cursor.description else []

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        with self._answered(), self._db().cursor() as cursor:
            cursor.execute(self._sql(sql), params)
            return cursor.rowcount

    def run_many(self, sql: str, params: Iterable[Sequence[Any]]) -> None:
        with self._answered(), self._db().cursor() as cursor:
            cursor.executemany(self._sql(sql), list(params))

    @contextlib.contextmanager
    def transaction(self, lock: str = "") -> Iterator[None]:
        with self._answered():
            db = self._db()
            with db.transaction():
                if lock:
                    db.execute(f"LOCK TABLE {lock} IN EXCLUSIVE MODE")
                yield

    def create(self, schema: str) -> None:
        db = self._db()
        with db.transaction():  # concurrent CREATE ... IF NOT EXISTS can collide in the catalogue
            db.execute("SELECT pg_advisory_xact_lock(%s)", (self.SCHEMA_LOCK,))
            for statement in filter(str.strip, schema.split(";")):
                db.execute(statement)

    def add_columns(self, table: str, columns: Mapping[str, str]) -> None:
        db = self._db()
        with db.transaction():  # ALTER TABLE locks the table whole: only where a column is missing
            db.execute("SELECT pg_advisory_xact_lock(%s)", (self.SCHEMA_LOCK,))
            have = {
                row[0]
                for row in db.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND table_name = %s",
                    (table,),
                )
            }
            for name, kind in columns.items():
                if name not in have:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            with contextlib.suppress(self._psycopg.Error):
                db.close()
            self._local.db = None


def _without_password(url: str) -> str:
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def open_database(state_url: str, state_dir: Path) -> Database:
    """``--state-url`` (``postgresql://...``), else SQLite in ``state_dir``."""
    if not state_url:
        return SqliteDatabase(state_dir / "state.sqlite3")
    if state_url.startswith(("postgresql://", "postgres://")):
        return PostgresDatabase(state_url)
    raise StateStoreError(f"--state-url {_without_password(state_url)!r}: expected postgresql://USER@HOST/DB")
