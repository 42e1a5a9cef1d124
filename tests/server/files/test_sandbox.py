"""The file worker pool (``server.files.sandbox``): a job past its CPU time, memory or deadline,
or one whose worker crashes, fails with its own typed error, naming the setting; the job running
beside it in the other worker is answered; the worker is replaced and the next job works."""

from __future__ import annotations

import asyncio

import pytest

from attnserve.contract.deadline import Deadline
from attnserve.server.files import jobs
from attnserve.server.files.sandbox import FileTooCostly, FileTooLarge, FileWorkers, Limits, WorkerDied
from attnserve.server.shared.errors import DeadlineExceeded, InvalidRequest
from tests.support import file_jobs

MEMORY = 64 << 20


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def workers(loop):
    pool = FileWorkers(2, Limits(cpu_seconds=1, memory_bytes=MEMORY), warm=("tests.support.file_jobs",))
    yield pool
    pool.close()


def run(loop, workers, fn, *args, cpu: float = 1, deadline: Deadline | None = None):
    return loop.run_until_complete(workers.run(fn, args, cpu, deadline))


def test_a_job_past_its_cpu_time_is_killed_while_the_other_worker_answers(loop, workers):
    async def both():
        spinning = asyncio.ensure_future(workers.run(file_jobs.spin, (), 1, None))
        answered = [(await workers.run(file_jobs.echo, (i,), 1, None)).result for i in range(5)]
        assert not spinning.done()  # the other worker answered while this one spun
        with pytest.raises(FileTooCostly, match=r"more than 1 s of CPU time.*--file-cpu-seconds"):
            await spinning
        return answered

    replaced = workers.replaced
    assert loop.run_until_complete(both()) == [0, 1, 2, 3, 4]
    assert workers.replaced == replaced + 1
    assert run(loop, workers, file_jobs.echo, "next").result == "next"  # a fresh worker took its place


def test_a_job_past_its_memory_is_413_and_the_worker_replaced(loop, workers):
    with pytest.raises(FileTooLarge, match=r"--file-memory-bytes") as err:
        run(loop, workers, file_jobs.allocate, 4 * MEMORY)
    assert (err.value.status, err.value.http_status) == ("RESOURCE_EXHAUSTED", 413)
    assert run(loop, workers, file_jobs.allocate, MEMORY // 4).result == MEMORY // 4


def test_a_job_past_its_deadline_is_killed(loop, workers):
    replaced = workers.replaced
    with pytest.raises(DeadlineExceeded, match="the test's deadline"):
        run(loop, workers, file_jobs.spin, cpu=60, deadline=Deadline.from_timeout(0.5, "the test's deadline"))
    assert workers.replaced == replaced + 1
    assert run(loop, workers, file_jobs.echo, 1).result == 1


def test_a_crashed_worker_fails_only_its_job(loop, workers):
    with pytest.raises(WorkerDied, match="its worker ended") as err:
        run(loop, workers, file_jobs.crash)
    assert err.value.status == "INVALID_ARGUMENT"
    assert run(loop, workers, file_jobs.echo, 2).result == 2


def test_a_cancelled_job_kills_its_worker(loop, workers):
    async def cancelled():
        task = asyncio.ensure_future(workers.run(file_jobs.spin, (), 60, None))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    replaced = workers.replaced
    loop.run_until_complete(cancelled())
    assert workers.replaced == replaced + 1
    assert run(loop, workers, file_jobs.echo, 3).result == 3


def test_a_refusal_keeps_its_status_and_words(loop, workers):
    with pytest.raises(InvalidRequest, match=r"not a valid \.docx") as err:
        run(loop, workers, jobs.read_text, "a.docx", b"PK\x03\x04 not a zip", 1 << 20)
    assert err.value.status == "INVALID_ARGUMENT"
    text = run(loop, workers, jobs.read_text, "a.txt", b"Hello.", 1 << 20).result
    assert (text.texts, text.format) == (("Hello.",), "text")


async def ready(pool: FileWorkers) -> None:
    for _ in range(1200):  # a worker's imports take seconds on a busy host
        if pool.ready_workers:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("no worker became ready in 60 s")


def test_the_first_file_after_start_finds_a_worker_spawned_ahead_and_a_dead_one_is_replaced_ahead(loop):
    pool = FileWorkers(1, Limits(cpu_seconds=1, memory_bytes=MEMORY), warm=("tests.support.file_jobs",))

    async def scenario():
        pool.start()
        assert (pool.spawned, pool.ready_workers) == (1, 0)  # on its way: start did not wait for it
        await ready(pool)
        first = (await pool.run(file_jobs.pid, (), 1, None)).result
        assert pool.spawned == 1  # the first file spawned nothing
        assert (await pool.run(file_jobs.pid, (), 1, None)).result == first  # the worker is kept
        with pytest.raises(WorkerDied):
            await pool.run(file_jobs.crash, (), 1, None)
        assert pool.spawned == 2  # replaced at once, before the next file asks
        await ready(pool)
        second = (await pool.run(file_jobs.pid, (), 1, None)).result
        assert second != first and pool.spawned == 2

    try:
        loop.run_until_complete(scenario())
    finally:
        pool.close()


def test_workers_spawned_ahead_stay_within_the_pool_size(loop):
    pool = FileWorkers(2, Limits(cpu_seconds=1, memory_bytes=MEMORY), warm=("tests.support.file_jobs",))

    async def scenario():
        pool.start()
        pool.start()  # one on its way is enough
        assert pool.spawned == 1
        first = asyncio.ensure_future(pool.run(file_jobs.pid, (), 1, None))  # waits for the one on its way
        pids = {(await first).result}
        assert pool.spawned == 1
        for _ in range(3):
            replies = await asyncio.gather(*(pool.run(file_jobs.pid, (), 1, None) for _ in range(4)))
            pids |= {r.result for r in replies}
        assert pool.spawned == 2 and len(pids) == 2

    try:
        loop.run_until_complete(scenario())
    finally:
        pool.close()
