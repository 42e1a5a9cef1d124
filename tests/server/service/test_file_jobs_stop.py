"""A server's file jobs stop when it does: the job loop ends at stop even when its cancel meets the
wake-up a finished or cancelled job gives it in the same turn (``asyncio.wait_for`` loses such a
cancel before Python 3.12), stop never waits on a job longer than the grace it is given, and a
store that fails as the server stops neither keeps it from stopping nor loses the running job."""

from __future__ import annotations

import asyncio
import threading

from attnserve.server.entry.app import create_server
from attnserve.server.files.job_store import SqlJobStore
from attnserve.server.runtime.registry import ModelRegistry
from attnserve.server.service.file_jobs import FileJobs, JobRequest, new_job_id
from attnserve.server.service.files import TranslatedFile
from attnserve.server.shared.config import Settings
from attnserve.server.state import StoreUnavailable
from attnserve.server.state.database import SqliteDatabase


def jobs_in(tmp_path) -> FileJobs:
    return FileJobs(None, Settings(model_repo=str(tmp_path), state_dir=str(tmp_path / "state")))  # type: ignore[arg-type]


def finishes(main, seconds: float = 20.0) -> bool:
    """Whether ``asyncio.run(main())`` returns within ``seconds`` (run on a thread: a hung loop
    fails the test instead of hanging it)."""
    thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()


def test_stop_ends_the_job_loop_though_a_job_wakes_it_in_the_same_turn(tmp_path):
    async def main() -> None:
        for _ in range(5):
            jobs = jobs_in(tmp_path)
            await jobs.start()
            await asyncio.sleep(0.01)  # the loop waits for a wake-up or its tick
            jobs._wake.set()  # what a job that ends does, in the turn the server's stop begins
            await jobs.stop()
            jobs.close()

    assert finishes(main)


def test_stop_waits_for_a_job_that_ignores_its_cancel_only_as_long_as_the_grace(tmp_path):
    held = [True]

    async def stubborn() -> None:
        while held[0]:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue  # as a job stuck in a call that swallows cancellation would

    async def main() -> None:
        jobs = jobs_in(tmp_path)
        await jobs.start()
        jobs.running["stuck"] = task = asyncio.ensure_future(stubborn())
        await jobs.stop(0.2)
        assert not task.done()
        held[0] = False  # the test's own clean-up: the job lets go at its next cancel
        task.cancel()
        jobs.close()

    assert finishes(main)


class Breakable(SqliteDatabase):
    """The state folder's SQLite store, failing as a full or vanished disk makes it while ``broken``."""

    broken = False

    def _check(self) -> None:
        if self.broken:
            raise StoreUnavailable(f"the state store {self.url} did not answer: database or disk is full")

    def rows(self, sql, params=()):
        self._check()
        return super().rows(sql, params)

    def run(self, sql, params=()):
        self._check()
        return super().run(sql, params)

    def run_many(self, sql, params):
        self._check()
        return super().run_many(sql, params)

    def transaction(self, lock=""):
        self._check()
        return super().transaction(lock)


class HeldFiles:
    """A file translation that holds each file until ``release`` is set, then returns "out"."""

    def __init__(self, held: bool = True) -> None:
        self.release = asyncio.Event()
        if not held:
            self.release.set()
        self.started = asyncio.Event()
        self.fail: Exception | None = None  # raised once, instead of returning, when released

    def check_size(self, size: int) -> None:
        pass

    def check_quota(self, client: str) -> None:
        pass

    def check_route(self, source: str, target: str, model: str = "") -> None:
        pass

    def serves(self, source: str, target: str, model: str = "") -> bool:
        return True

    async def translate(self, request, progress, resume) -> TranslatedFile:
        progress(1, 2)
        self.started.set()
        await self.release.wait()
        fail, self.fail = self.fail, None
        if fail is not None:
            raise fail
        return TranslatedFile(request.filename, b"out", "text/plain", "", "en", "de", 3, 2)


def settings_in(tmp_path) -> Settings:
    return Settings(model_repo=str(tmp_path), state_dir=str(tmp_path / "state"), http_port=-1, metrics_port=-1)


async def status_of(jobs: FileJobs, job_id: str, wanted: str, seconds: float = 15.0) -> str:
    """The job's status once it is ``wanted``, or as it is after ``seconds``."""
    deadline = asyncio.get_running_loop().time() + seconds
    while (job := await jobs.get(None, job_id)).status != wanted and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    return job.status


def test_a_store_failing_as_jobs_stop_loses_no_job_the_next_start_runs_it(tmp_path):
    settings = settings_in(tmp_path)
    db = Breakable(tmp_path / "state" / "state.sqlite3")

    async def main() -> None:
        files = HeldFiles()
        jobs = FileJobs(files, settings, SqlJobStore(db))  # type: ignore[arg-type]
        await jobs.start()
        job = await jobs.submit(JobRequest(None, "memo.txt", b"Monday.", "en", "de"))
        await asyncio.wait_for(files.started.wait(), 15)
        db.broken = True
        await jobs.stop(0.5)  # returns: the server's stop goes on
        jobs.close()
        db.broken = False
        again = FileJobs(HeldFiles(held=False), settings, SqlJobStore(db))  # type: ignore[arg-type]
        await again.start()
        assert await status_of(again, job.id, "done") == "done"
        await again.stop()
        again.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_server_whose_jobs_fail_to_stop_still_stops(tmp_path):
    async def main() -> None:
        server, _ = await create_server("127.0.0.1:0", settings_in(tmp_path), ModelRegistry())
        await server.start()

        async def failing(grace_s=None) -> None:
            raise StoreUnavailable("the state store did not answer: database or disk is full")

        server.jobs.stop = failing
        await server.stop(1.0)
        await asyncio.wait_for(server.wait_for_termination(), 30)

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_job_id_never_begins_with_a_dash_which_the_command_line_reads_as_an_option():
    # attnserve-client job ID: an id "-Qm9..." (one in 64 of URL-safe tokens) failed to parse
    ids = [new_job_id() for _ in range(3_000)]
    assert not any(i.startswith("-") for i in ids) and len(set(ids)) == len(ids)
    assert all(len(i) == 24 for i in ids)
