"""Stored glossaries' records on both backends (SQLite, PostgreSQL): per key, bounded per key,
safe when several processes create glossaries at once (``--workers``, replicas); a glossary of a
dictionary per language pair (DeepL's v3) kept, edited whole or not at all, and deleted with its
dictionaries; a store made before glossaries held dictionaries opens with its glossaries."""

from __future__ import annotations

import multiprocessing
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from attnserve.server.state import (
    Dictionary,
    Glossary,
    GlossaryStore,
    StateStoreError,
    StoreUnavailable,
    open_database,
    with_dictionaries,
)
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


GERMAN = Dictionary("en", "de", 2, 1.0, (("Monday", "Montag"), ("März", "MÄRZ")))
FRENCH = Dictionary("en", "fr", 1, 2.0, (("Monday", "Lundi"),))


def test_a_glossary_of_dictionaries_is_kept_edited_whole_and_deleted_with_them(database):
    store = GlossaryStore(database)
    made = with_dictionaries(Glossary("m", "a", "days", "", "", 0, 1.0), (GERMAN, FRENCH))
    assert store.add(made, max_per_key=10)
    assert store.get("a", "m", entries=True) == made and made.entry_count == 3 and made.source == ""
    listed = store.list("a")[0]
    assert [(d.target, d.entry_count, d.entries) for d in listed.parts] == [("de", 2, ()), ("fr", 1, ())]
    assert store.get("b", "m") is None and store.edit("b", "m", lambda g: g) is None

    def fails(found: Glossary) -> Glossary:
        raise ValueError("the service refused the change")

    with pytest.raises(ValueError):
        store.edit("a", "m", fails)
    assert store.get("a", "m", entries=True) == made  # a refused edit leaves it as it was
    edited = store.edit("a", "m", lambda g: with_dictionaries(replace(g, name="week"), (FRENCH,)))
    assert store.get("a", "m", entries=True) == edited
    assert (edited.name, edited.source, edited.target, edited.entries) == ("week", "en", "fr", FRENCH.entries)
    assert store.delete("a", "m") and store.get("a", "m") is None
    assert database.rows("SELECT count(*) FROM glossary_dictionaries") == [(0,)]


OLD_SCHEMA = """
CREATE TABLE IF NOT EXISTS glossaries (
    id TEXT PRIMARY KEY, key TEXT NOT NULL, name TEXT NOT NULL, source TEXT NOT NULL, target TEXT NOT NULL,
    entry_count BIGINT NOT NULL, entries TEXT NOT NULL, created DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS glossaries_by_key ON glossaries (key, created)
"""  # the glossaries table of a server before glossaries held a dictionary per language pair


def test_a_store_made_before_dictionaries_opens_with_its_glossaries_which_can_be_edited(state_url, tmp_path):
    old = open_database(state_url, tmp_path)
    old.create(OLD_SCHEMA)
    old.run(
        "INSERT INTO glossaries VALUES ('before', 'a', 'days', 'en', 'de', 2, ?, 1.0)",
        ('[["Monday", "Montag"], ["März", "MÄRZ"]]',),
    )
    old.close()
    stores = [GlossaryStore(open_database(state_url, tmp_path)) for _ in range(2)]  # the second finds it done
    before = stores[1].get("a", "before", entries=True)
    assert before == Glossary("before", "a", "days", "en", "de", 2, 1.0, GERMAN.entries)
    assert before.parts == (GERMAN,) and stores[1].list("a") == [replace(before, entries=())]
    edited = stores[1].edit("a", "before", lambda g: with_dictionaries(g, (*g.parts, FRENCH)))
    assert stores[0].get("a", "before", entries=True) == edited and edited.parts == (GERMAN, FRENCH)
    assert [d.target for d in stores[0].list("a")[0].parts] == ["de", "fr"]
    assert stores[0].add(glossary("a"), max_per_key=2) and not stores[0].add(glossary("a"), max_per_key=2)


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
