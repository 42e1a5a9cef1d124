"""The file jobs' records (``files.job_store``) on both backends of the state store (SQLite,
PostgreSQL), as two server processes share them: a job is claimed by one of them only, bounds
hold per key and in all, keys never see each other's jobs, the jobs of a dead process go back
to the queue (only its own host knows it is dead), and expired jobs go with their sentences."""

from __future__ import annotations

import dataclasses
import os
import threading
from pathlib import Path

from attnserve.server.files import job_store
from attnserve.server.files.job_store import Job, SqlJobStore
from attnserve.server.state import open_database


def job(job_id: str, key: str = "", size: int = 10, created: float = 1.0, expires: float = 100.0) -> Job:
    return Job(job_id, key, "queued", "a.docx", "en", "de", "", 0, 0, 0, 0, size, "", "", created, 0.0, created,
               expires, 0)  # fmt: skip


def test_bounds_per_key_and_in_all_and_keys_apart(database):
    store = SqlJobStore(database)
    assert store.add(job("a1", "alice"), max_jobs=3, max_per_key=2, max_key_bytes=25) == ""
    assert store.add(job("a2", "alice"), 3, 2, 25) == ""
    assert store.add(job("a3", "alice"), 3, 2, 25) == "max_jobs_per_key"
    assert store.add(job("b1", "bob", size=30), 3, 2, 25) == "max_job_bytes_per_key"
    assert store.add(job("b1", "bob"), 3, 2, 25) == ""
    assert store.add(job("c1", "carol"), 3, 2, 25) == "max_jobs"
    assert store.get("alice", "a1") is not None and store.get("bob", "a1") is None
    assert store.cancel("bob", "a1") is None and store.get("alice", "a1").status == "queued"
    # a finished job leaves its key's place in the queue, not its bytes nor its place in all
    assert store.cancel("alice", "a1").status == "cancelled"
    assert store.add(job("a3", "alice", size=5), 4, 2, 25) == ""
    assert store.add(job("a4", "alice", size=1), 5, 3, 25) == "max_job_bytes_per_key"
    assert store.add(job("c1", "carol"), 4, 2, 25) == "max_jobs"


def test_two_processes_never_claim_the_same_job(state_url, tmp_path):
    stores = [SqlJobStore(open_database(state_url, tmp_path)) for _ in range(2)]  # two processes' stores
    for i in range(40):
        stores[0].add(job(f"j{i:02}", created=float(i)), 100, 100, 1 << 20)
    claimed: list[list[str]] = [[], []]

    def claim(n: int) -> None:
        while (got := stores[n].claim(owner=n + 1)) is not None:
            claimed[n].append(got.id)

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed[0] + claimed[1]) == [f"j{i:02}" for i in range(40)]
    assert not set(claimed[0]) & set(claimed[1])


def test_a_dead_owners_jobs_are_queued_again_with_their_sentences(state_url, tmp_path):
    store = SqlJobStore(open_database(state_url, tmp_path))
    store.add(job("x"), 10, 10, 1000)
    store.add(job("y", created=2.0), 10, 10, 1000)
    assert store.claim(owner=111).id == "x" and store.claim(owner=222).id == "y"
    store.add_sentences("x", {"Hello.": "Hallo."})
    assert store.requeue(lambda pid: pid == 111) == 1
    assert store.get("", "x").status == "queued" and store.get("", "y").status == "running"
    assert SqlJobStore(open_database(state_url, tmp_path)).sentences("x") == {"Hello.": "Hallo."}  # another's read


def test_a_requeue_leaves_the_jobs_their_owner_still_runs(database):
    store = SqlJobStore(database)
    for name in ("kept", "lost"):
        store.add(job(name), 10, 10, 1000)
        assert store.claim(owner=7).id == name
    assert store.requeue(lambda owner: owner == 7, keep={"kept"}) == 1
    assert store.get("", "kept").status == "running" and store.get("", "lost").status == "queued"
    # a job claimed this moment, by a server that has yet to add it to what it runs, stays its
    assert store.claim(owner=7).id == "lost"
    assert store.requeue(lambda owner: owner == 7, {"kept"}, before=store.get("", "lost").started) == 0
    assert store.get("", "lost").status == "running"


def test_a_server_claims_only_the_jobs_of_the_pairs_it_serves(database):
    store = SqlJobStore(database)
    store.add(dataclasses.replace(job("fr"), source="fr", target="en"), 10, 10, 1000)
    store.add(job("de", created=2.0), 10, 10, 1000)
    store.add(dataclasses.replace(job("named", created=3.0), model="digits-mt"), 10, 10, 1000)

    def english_to_german(source: str, target: str, model: str) -> bool:
        return (source, target, model) == ("en", "de", "")

    assert store.claim(owner=1, serves=english_to_german).id == "de"  # the older French job is left
    assert store.claim(owner=1, serves=english_to_german) is None
    assert store.get("", "fr").status == "queued" and store.get("", "named").status == "queued"
    assert store.claim(owner=2).id == "fr"  # for a server that serves them all


def test_a_job_cancelled_while_it_runs_stays_cancelled_whatever_its_runner_writes(database):
    store = SqlJobStore(database)
    store.add(job("run"), 10, 10, 1000)
    assert store.claim(owner=1).id == "run"
    assert store.update("run", done=3, total=9)
    assert store.cancel("", "run").status == "cancelled"
    # the runner's last words, racing the cancel: a failure, or the finished file
    assert not store.update("run", status="failed", error="internal error: CancelledError")
    assert not store.update("run", status="done", done=9, total=9)
    after = store.get("", "run")
    assert (after.status, after.done, after.error) == ("cancelled", 3, "")


def test_expired_jobs_go_with_their_sentences(database):
    store = SqlJobStore(database)
    store.add(job("old", expires=5.0), 10, 10, 1000)
    store.add(job("new", expires=50.0), 10, 10, 1000)
    store.add_sentences("old", {"a": "b"})
    assert store.expired(now=10.0, retention_s=1.0) == ["old"]
    assert store.get("", "old") is None and store.sentences("old") == {}
    assert store.get("", "new").status == "queued"


def test_a_running_job_and_one_queued_again_to_resume_are_not_expired_under_their_run(database):
    store = SqlJobStore(database)
    for job_id in ("running", "resuming", "abandoned", "waiting"):
        store.add(job(job_id, expires=5.0), 10, 10, 1000)
    for _ in range(3):
        store.claim(owner=1)  # running, resuming, abandoned, oldest first; waiting stays queued
    store.update("resuming", status="queued", owner=0, started=95.0)  # interrupted: queued to resume
    store.update("abandoned", status="queued", owner=0, started=20.0)  # interrupted long ago
    assert sorted(store.expired(now=100.0, retention_s=50.0)) == ["abandoned", "waiting"]
    assert {store.get("", j).status for j in ("running", "resuming")} == {"running", "queued"}


def test_a_finished_job_of_its_key_is_deleted_with_its_sentences_and_a_running_one_is_not(database):
    store = SqlJobStore(database)
    store.add(job("mine", key="k"), 10, 10, 1000)
    assert store.claim(owner=1).id == "mine"
    store.add_sentences("mine", {"a": "b"})
    assert not store.delete("k", "mine")  # running: its runner still writes to it
    assert store.update("mine", status="done", done=1, total=1)
    assert not store.delete("other key", "mine") and store.get("k", "mine").status == "done"
    assert store.delete("k", "mine")
    assert store.get("k", "mine") is None and store.sentences("mine") == {}
    assert not store.delete("k", "mine")


def test_an_owner_is_gone_only_when_its_own_host_says_so():
    me = job_store.owner_id()
    assert me & ((1 << job_store.PID_BITS) - 1) == os.getpid() and not job_store.owner_gone(me)
    dead = 4_000_000  # above any pid this machine has handed out (pid_max is 4,194,304 at most)
    assert job_store.owner_gone((me >> job_store.PID_BITS << job_store.PID_BITS) | dead)
    assert job_store.owner_gone(dead)  # a record from before owners named their host
    another_host = ((job_store._host() ^ 1) << job_store.PID_BITS) | dead
    assert not job_store.owner_gone(another_host)  # a replica elsewhere: never taken for dead here


OLD_JOBS = """
CREATE TABLE jobs (
    id TEXT PRIMARY KEY, key TEXT NOT NULL, status TEXT NOT NULL, filename TEXT NOT NULL,
    source TEXT NOT NULL, target TEXT NOT NULL, model TEXT NOT NULL,
    done BIGINT NOT NULL DEFAULT 0, total BIGINT NOT NULL DEFAULT 0, reused BIGINT NOT NULL DEFAULT 0,
    decoded BIGINT NOT NULL DEFAULT 0,
    bytes BIGINT NOT NULL, error TEXT NOT NULL DEFAULT '', media_type TEXT NOT NULL DEFAULT '',
    created DOUBLE PRECISION NOT NULL, started DOUBLE PRECISION NOT NULL DEFAULT 0,
    updated DOUBLE PRECISION NOT NULL, expires DOUBLE PRECISION NOT NULL,
    owner BIGINT NOT NULL DEFAULT 0
)
"""  # the jobs table of a server before jobs kept a glossary


def test_a_jobs_glossary_is_kept_with_it_and_an_older_table_gains_the_columns(state_url, tmp_path):
    old = open_database(state_url, tmp_path)
    old.create(OLD_JOBS)
    old.run(
        "INSERT INTO jobs (id, key, status, filename, source, target, model, bytes, created, updated, expires) "
        "VALUES ('before', '', 'queued', 'a.docx', 'en', 'de', '', 10, 1.0, 1.0, 100.0)"
    )
    stores = [SqlJobStore(open_database(state_url, tmp_path)) for _ in range(2)]  # the second finds it done
    store = stores[1]
    assert store.get("", "before").glossary_id == "" and store.glossary("before") == ()
    terms = (("Monday", "Wochenbeginn"), ("ACME", ""), ("Zürich", "Zürich"))
    with_glossary = dataclasses.replace(job("after", created=2.0), glossary_id="g-1")
    assert store.add(with_glossary, 10, 10, 1000, terms) == ""
    assert stores[0].get_any("after").glossary_id == "g-1" and stores[0].glossary("after") == terms
    assert store.claim(owner=1).id == "before" and store.claim(owner=1).glossary_id == "g-1"


def test_servers_starting_at_once_on_an_older_table_add_its_columns_once(state_url, tmp_path):
    open_database(state_url, tmp_path).create(OLD_JOBS)
    failed: list[Exception] = []

    def start() -> None:  # each a server's store on its own connection
        try:
            SqlJobStore(open_database(state_url, tmp_path))
        except Exception as exc:  # reported by the assertion below
            failed.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failed, failed
    store = SqlJobStore(open_database(state_url, tmp_path))
    assert store.add(job("j"), 10, 10, 1000, (("a", "b"),)) == "" and store.glossary("j") == (("a", "b"),)


def _open_store_at(args: tuple[str, object]) -> str:
    path, barrier = args
    barrier.wait()  # type: ignore[attr-defined]
    try:
        SqlJobStore(open_database("", Path(path)))
    except Exception as exc:  # noqa: BLE001 - what a server's start-up would have died of
        return f"{type(exc).__name__}: {exc}"
    return ""


def test_processes_starting_together_on_a_new_sqlite_store_all_open_it(tmp_path):
    # two servers on one state folder, or the processes of --workers N: the first to open the new
    # file turns it to WAL while the others open it too, and none of them may die of the lock
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    failures: list[str] = []
    with ctx.Manager() as manager, ctx.Pool(4) as pool:
        for n in range(60):
            folder = tmp_path / f"s{n}"
            barrier = manager.Barrier(4)
            failures += [f for f in pool.map(_open_store_at, [(str(folder), barrier)] * 4) if f]
    assert failures == []
