"""A file job is deleted ``--job-retention-s`` after it was submitted, but never while it runs: a
large file still translating when that time is up was deleted, record and files, under its run,
and its user was left with a 404 for a job that had been working for them."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from attnserve.server.service.file_jobs import FileJobs, JobNotFound, JobRequest

from .test_file_jobs_stop import HeldFiles, settings_in, status_of

RETENTION_S = 0.8  # the expired jobs are looked for every retention / 4 at most


def test_a_job_running_past_its_expiry_is_kept_and_its_result_then_kept_for_the_retention(tmp_path):
    settings = dataclasses.replace(settings_in(tmp_path), job_retention_s=RETENTION_S)

    async def main() -> None:
        files = HeldFiles()
        jobs = FileJobs(files, settings)  # type: ignore[arg-type]
        await jobs.start()
        try:
            done = await jobs.submit(JobRequest(None, "quick.txt", b"...", "en", "de"))
            files.release.set()
            assert await status_of(jobs, done.id, "done") == "done"
            files.release.clear()
            slow = await jobs.submit(JobRequest(None, "book.txt", b"...", "en", "de"))
            await asyncio.wait_for(files.started.wait(), 15)
            await asyncio.sleep(3 * RETENTION_S)  # several sweeps past both jobs' expiry
            assert (await jobs.get(None, slow.id)).status == "running"  # not deleted under its run
            with pytest.raises(JobNotFound):  # a finished one past its expiry is gone, as before
                await jobs.get(None, done.id)
            files.release.set()
            assert await status_of(jobs, slow.id, "done") == "done"
            ended = await jobs.get(None, slow.id)
            assert ended.expires >= time.time() + RETENTION_S / 2  # kept the retention from its end
            job, path = await jobs.result(None, slow.id)
            assert path.read_bytes() == b"out"
        finally:
            await jobs.stop()
            jobs.close()

    asyncio.run(asyncio.wait_for(main(), 60))
