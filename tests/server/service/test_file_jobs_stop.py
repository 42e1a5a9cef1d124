"""A server's file jobs stop when it does: the job loop ends at stop even when its cancel meets the
wake-up a finished or cancelled job gives it in the same turn (``asyncio.wait_for`` loses such a
cancel before Python 3.12), and stop never waits on a job longer than the grace it is given."""

from __future__ import annotations

import asyncio
import threading

from attnserve.server.service.file_jobs import FileJobs
from attnserve.server.shared.config import Settings


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
