"""Stored glossaries' records on both backends (SQLite, PostgreSQL): per key, bounded per key,
and safe when several processes create glossaries at once (``--workers``, replicas)."""

from __future__ import annotations

import multiprocessing
import time
import uuid
from pathlib import Path

import pytest

from attnserve.server.state import Glossary, GlossaryStore, StateStoreError, StoreUnavailable, open_database
from tests.support import postgres


def glossary(key: str, name: str = "terms", entries=(("Monday", "Montag"),)) -> Glossary:
    return Glossary(uuid.uuid4().hex, key, name, "en", "de", len(entries), time.time(), tuple(entries))


def test_a_glossary_is_found_only_with_its_key_and_whole(database):
    store = GlossaryStore(database)
    mine = glossary("a", entries=(("Monday", "Montag"), ("New York", "New York"), ("März", "MÄRZ")))
    assert store.add(mine, max_per_key=10)
    got = store.get("a", mine.id, entries=True)
    assert got == mine
    assert store.get("a", mine.id).entries == ()  # listing and head reads leave the entries out
    assert store.get("b", mine.id) is None
    assert [g.id for g in store.list("a")] == [mine.id] and store.list("b") == []
    assert not store.delete("b", mine.id)
    assert store.delete("a", mine.id)
    assert store.get("a", mine.id) is None and not store.delete("a", mine.id)


def test_each_key_keeps_at_most_its_bound(database):
    store = GlossaryStore(database)
    assert all(store.add(glossary("a", f"g{i}"), max_per_key=2) for i in range(2))
    assert not store.add(glossary("a", "third"), max_per_key=2)
    assert store.add(glossary("b"), max_per_key=2)  # another key has its own count
    assert [g.name for g in store.list("a")] == ["g0", "g1"]


def _create(state_url: str, folder: str, worker: int, count: int, bound: int, results) -> None:
    db = open_database(state_url, Path(folder))
    store = GlossaryStore(db)
    added = sum(store.add(glossary("k", f"w{worker}-{i}"), max_per_key=bound) for i in range(count))
    results.put(added)
    db.close()


@pytest.mark.parametrize("bound", [1000, 50])
def test_four_processes_creating_glossaries_at_once_lose_none_and_pass_no_bound(state_url, tmp_path, bound):
    GlossaryStore(open_database(state_url, tmp_path))  # the schema, as the server makes it at start
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    workers = [
        context.Process(target=_create, args=(state_url, str(tmp_path), w, 25, bound, results)) for w in range(4)
    ]
    for p in workers:
        p.start()
    added = sum(results.get(timeout=60) for _ in workers)
    for p in workers:
        p.join(30)
        assert p.exitcode == 0
    stored = GlossaryStore(open_database(state_url, tmp_path)).list("k")
    assert added == len(stored) == min(100, bound)
    assert len({g.id for g in stored}) == len(stored)


def test_a_state_url_that_is_not_postgresql_is_refused_naming_it(tmp_path):
    with pytest.raises(StateStoreError, match="expected postgresql://"):
        open_database("mysql://u:secret@h/db", tmp_path)


def test_an_unreachable_postgresql_is_refused_without_its_password(tmp_path):
    pytest.importorskip("psycopg")
    with pytest.raises(StateStoreError, match=r"cannot connect") as refused:
        open_database("postgresql://u:secret@127.0.0.1:1/db?connect_timeout=2", tmp_path)
    assert "secret" not in str(refused.value)


def test_a_postgresql_that_goes_away_is_unavailable_not_a_crash(tmp_path):
    why = postgres.missing()
    if why:
        pytest.skip(why)
    with postgres.postgres_server() as url:
        store = GlossaryStore(open_database(url, tmp_path))
        assert store.add(glossary("k"), max_per_key=5)
    with pytest.raises(StoreUnavailable, match="did not answer") as gone:  # the server stopped
        store.list("k")
    assert gone.value.status == "UNAVAILABLE"


def test_an_sqlite_file_damaged_under_a_running_server_is_unavailable_not_a_crash(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    db = open_database("", tmp_path)
    store = GlossaryStore(db)
    assert store.add(glossary("k"), max_per_key=5)
    db.run("PRAGMA wal_checkpoint(TRUNCATE)")  # every page in the file itself, none left in the WAL
    (tmp_path / "state.sqlite3").write_bytes(b"overwritten by something else\n" * 200)
    with ThreadPoolExecutor(1) as other:  # a thread of the server that opens its connection now
        with pytest.raises(StoreUnavailable, match="did not answer") as gone:
            other.submit(store.list, "k").result()
    assert gone.value.status == "UNAVAILABLE"
