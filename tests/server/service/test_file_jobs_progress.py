"""A resumed file job's progress never goes back and its time left is this run's: a job
stopped at 3,000 of 9,000 sentences that resumes on the next server still reports 3,000 / 9,000
while the new run splits the file again (counting its reused sentences from 0, its total not yet
known), and it has no estimate of the time left until this run has translated a sentence of its
own and then some more: the earlier run's sentences, and this run's first moments (its file
split again, the engine's first batch), are no pace of the sentences left."""

from __future__ import annotations

import asyncio

from attnserve.server.service.file_jobs import FileJobs, JobRequest
from attnserve.server.service.files import TranslatedFile
from attnserve.server.service.job_records import remaining_s, view

from .test_file_jobs_stop import HeldFiles, settings_in, status_of


class Resumed(HeldFiles):
    """A file translation whose run reports ``steps`` of (reused, decoded, done, total), each once
    ``go`` is set, then holds until ``release``."""

    def __init__(self, *steps: tuple[int, int, int, int]) -> None:
        super().__init__()
        self.steps, self.go, self.told = steps, asyncio.Event(), asyncio.Event()

    async def translate(self, request, progress, resume) -> TranslatedFile:
        self.started.set()
        for reused, decoded, done, total in self.steps:
            await self.go.wait()
            self.go.clear()
            resume.reused, resume.decoded = reused, decoded
            progress(done, total)
            self.told.set()
        await self.release.wait()
        return TranslatedFile(request.filename, b"out", "text/plain", "", "en", "de", 3, 9000)


async def told(jobs: FileJobs, files: Resumed, job_id: str):
    """The job's record once the run's next step is written to it."""
    files.told.clear()
    files.go.set()
    await asyncio.wait_for(files.told.wait(), 15)
    await asyncio.sleep(0.3)  # the write goes through the jobs' store thread
    return await jobs.get(None, job_id)


def test_a_resumed_jobs_progress_never_goes_back_and_its_time_left_is_this_runs(tmp_path):
    settings = settings_in(tmp_path)

    async def main() -> None:
        first = Resumed((0, 3000, 3000, 9000))
        jobs = FileJobs(first, settings)  # type: ignore[arg-type]
        await jobs.start()
        job = await jobs.submit(JobRequest(None, "memo.docx", b"...", "en", "de"))
        assert (await told(jobs, first, job.id)).done == 3000
        await jobs.stop(0.5)  # SIGTERM: the job goes back to the queue, its 3,000 sentences stored
        jobs.close()

        # the next run reuses them as it splits the file: 171 of them first, the total not yet known
        second = Resumed((171, 0, 171, 0), (3000, 40, 3040, 9000), (3000, 80, 3080, 9000))
        again = FileJobs(second, settings)  # type: ignore[arg-type]
        await again.start()
        await asyncio.wait_for(second.started.wait(), 15)
        claimed = await again.get(None, job.id)
        assert claimed.status == "running" and (claimed.done, claimed.total) == (3000, 9000), view(claimed)
        assert remaining_s(claimed, claimed.started + 1.0) is None, view(claimed)  # no pace of this run yet
        splitting = await told(again, second, job.id)
        assert (splitting.done, splitting.total) == (3000, 9000), view(splitting)  # not 171 of an unknown total
        first_batch = await told(again, second, job.id)
        assert (first_batch.done, first_batch.total) == (3040, 9000), view(first_batch)
        # this run's first 40 sentences came after its file was split: no pace yet (40 in the
        # seconds since the claim would read as minutes left, 3,040 as 2 s)
        assert remaining_s(first_batch, first_batch.started + 10.0) is None, view(first_batch)
        going = await told(again, second, job.id)
        assert remaining_s(going, going.paced + 0.25) is None, view(going)  # a batch or two is no pace yet
        # 40 more sentences in the 1 s since the first ones: the 5,920 left take about 148 s
        assert remaining_s(going, going.paced + 1.0) == 5920 / 40, view(going)
        second.release.set()
        assert await status_of(again, job.id, "done") == "done"
        await again.stop()
        again.close()

    asyncio.run(asyncio.wait_for(main(), 60))
