"""No file job stays "running" with no process running it: a job of a server killed while another
shares its store is taken over by the live one within seconds, and a job whose end the store
failed to record runs again once the store answers."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from attnserve.server.files.job_store import PID_BITS, SqlJobStore, _host
from attnserve.server.service.file_jobs import REQUEUE_S, FileJobs, JobRequest
from attnserve.server.shared.errors import InvalidRequest

from .test_file_jobs_stop import Breakable, HeldFiles, settings_in, status_of


def dead_owner() -> int:
    """A job owner of this host whose process has ended."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return (_host() << PID_BITS) | proc.pid


def test_a_killed_servers_running_job_is_taken_over_by_a_live_one_sharing_the_store(tmp_path):
    settings = settings_in(tmp_path)
    db = Breakable(tmp_path / "state" / "state.sqlite3")

    async def main() -> None:
        # what a server killed mid-job leaves: its record running, naming a process that is gone
        other = FileJobs(HeldFiles(), settings, SqlJobStore(db))  # type: ignore[arg-type]
        job = await other.submit(JobRequest(None, "memo.txt", b"Monday.", "en", "de"))
        assert SqlJobStore(db).claim(dead_owner()).id == job.id
        live = FileJobs(HeldFiles(held=False), settings, SqlJobStore(db))  # type: ignore[arg-type]
        await live.start()  # claimed a moment ago: left a few seconds (REQUEUE_S), then taken over
        assert await status_of(live, job.id, "done", seconds=REQUEUE_S + 10) == "done"
        await live.stop()
        live.close()
        other.close()

    asyncio.run(asyncio.wait_for(main(), 60))


@pytest.mark.parametrize("ending", ["done", "failed"])
def test_a_job_whose_end_the_store_failed_to_record_runs_again_once_it_answers(tmp_path, ending):
    settings = settings_in(tmp_path)
    db = Breakable(tmp_path / "state" / "state.sqlite3")

    async def main() -> None:
        files = HeldFiles()
        if ending == "failed":
            files.fail = InvalidRequest("the file cannot be read")
        jobs = FileJobs(files, settings, SqlJobStore(db))  # type: ignore[arg-type]
        await jobs.start()
        job = await jobs.submit(JobRequest(None, "memo.txt", b"Monday.", "en", "de"))
        await asyncio.wait_for(files.started.wait(), 15)
        db.broken = True  # a full disk as the job ends: its end is not recorded
        files.release.set()
        await asyncio.sleep(1.5)
        db.broken = False
        assert await status_of(jobs, job.id, "done") == "done"  # its second run, with the store back
        await jobs.stop()
        jobs.close()

    asyncio.run(asyncio.wait_for(main(), 60))
