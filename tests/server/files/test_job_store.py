"""The file jobs' SQLite store (``files.job_store``), as two server processes share it: a job is
claimed by one of them only, bounds hold per key and in all, keys never see each other's
jobs, the jobs of a dead process go back to the queue, and expired jobs go with their
sentences."""

from __future__ import annotations

import threading

from attnserve.server.files.job_store import Job, SqliteJobStore


def job(job_id: str, key: str = "", size: int = 10, created: float = 1.0, expires: float = 100.0) -> Job:
    return Job(job_id, key, "queued", "a.docx", "en", "de", "", 0, 0, 0, 0, size, "", "", created, 0.0, created,
               expires, 0)  # fmt: skip


def test_bounds_per_key_and_in_all_and_keys_apart(tmp_path):
    store = SqliteJobStore(tmp_path)
    assert store.add(job("a1", "alice"), max_jobs=3, max_per_key=2, max_key_bytes=25) == ""
    assert store.add(job("a2", "alice"), 3, 2, 25) == ""
    assert store.add(job("a3", "alice"), 3, 2, 25) == "max_jobs_per_key"
    assert store.add(job("b1", "bob", size=30), 3, 2, 25) == "max_job_bytes_per_key"
    assert store.add(job("b1", "bob"), 3, 2, 25) == ""
    assert store.add(job("c1", "carol"), 3, 2, 25) == "max_jobs"
    assert store.get("alice", "a1") is not None and store.get("bob", "a1") is None
    assert store.cancel("bob", "a1") is None and store.get("alice", "a1").status == "queued"


def test_two_processes_never_claim_the_same_job(tmp_path):
    SqliteJobStore(tmp_path)
    stores = [SqliteJobStore(tmp_path) for _ in range(2)]  # two connections, as two workers hold
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


def test_a_dead_owners_jobs_are_queued_again_with_their_sentences(tmp_path):
    store = SqliteJobStore(tmp_path)
    store.add(job("x"), 10, 10, 1000)
    store.add(job("y", created=2.0), 10, 10, 1000)
    assert store.claim(owner=111).id == "x" and store.claim(owner=222).id == "y"
    store.add_sentences("x", {"Hello.": "Hallo."})
    assert store.requeue(lambda pid: pid == 111) == 1
    assert store.get("", "x").status == "queued" and store.get("", "y").status == "running"
    assert SqliteJobStore(tmp_path).sentences("x") == {"Hello.": "Hallo."}  # another process reads them


def test_expired_jobs_go_with_their_sentences(tmp_path):
    store = SqliteJobStore(tmp_path)
    store.add(job("old", expires=5.0), 10, 10, 1000)
    store.add(job("new", expires=50.0), 10, 10, 1000)
    store.add_sentences("old", {"a": "b"})
    assert store.expired(now=10.0) == ["old"]
    assert store.get("", "old") is None and store.sentences("old") == {}
    assert store.get("", "new").status == "queued"
