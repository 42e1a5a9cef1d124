"""Files translated as jobs in the server's background, for every door (HTTP ``/translate_file_job``,
attnserve.v1 ``SubmitFileJob``): a submit returns at once with the job's id; its progress
(sentences done / total, and an estimate of the time left), its cancel and its result are
asked for by id, and only by the key that submitted it. A large file's sentences decode while
the rest of it is split (``files.FileTranslation``), so its first ones are done before its total
is known: the total is 0 until then.

Records are a :class:`~..files.job_store.JobStore`'s (SQLite in ``--state-dir``, or
PostgreSQL at ``--state-url``), the files plain files in the state folder, so jobs and
results survive a restart and the processes of ``--workers N`` (and replicas sharing the
store and the folder) share them: each process claims queued jobs from the store, at most ``--running-jobs`` at
a time, and translates them with :class:`~.files.FileTranslation`. Every sentence the engine
translates is stored as its engine call finishes; a job interrupted by a restart (its
process gone), or whose end the store failed to record, is queued again when a server starts
on the folder or within seconds by one running on it, and resumes with those sentences known
(``files.Resume``): only the rest goes to the engine. A job naming a stored glossary
(``glossary_id``) has it read for its key when it is submitted (an unknown id is refused then)
and keeps its entries in its record, so that every run uses the same terms.
Jobs are bounded (``--max-jobs``, ``--max-jobs-per-key``, ``--max-job-bytes-per-key``) and
deleted, result and all, ``--job-retention-s`` after they were submitted, never while they run (one
that runs past that is kept ``--job-retention-s`` from its end). What a record
reports, and what a finished run writes into it: ``job_records``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import files
from ..files.download_store import key_digest, safe_filename
from ..files.job_store import Job, JobStore, owner_gone, owner_id, sqlite_job_store
from ..shared.calls import Call
from ..shared.config import ConfigError, Settings
from ..shared.errors import InvalidRequest, ModelNotFound, Overloaded, ServingError, StorageUnavailable, echo
from ..shared.locations import per_repository_dir
from ..state import StoreUnavailable
from .files import FileRequest, FileTranslation, Resume
from .job_records import finished, kept

log = logging.getLogger(__name__)

TICK_S = 1.0  # at most, between two looks at the store for queued jobs (another process's) and cancels
REQUEUE_S = 5.0  # at most, between two looks for running jobs no live process runs
SWEEP_S = 60.0  # at most, between two deletions of expired jobs
PROGRESS_S = 0.2  # at least, between two writes of a job's progress to its record
METHOD = "FileJob"  # the metrics' method label of a job's translation


class JobNotFound(ModelNotFound):
    """An id no job of the caller's key has (never made, expired, or another key's): 404."""


class NotFinished(InvalidRequest):
    """A result asked for before the job is done: 409."""

    status = "FAILED_PRECONDITION"
    http_status = 409


@dataclass(frozen=True)
class JobRequest:
    api_key: str | None  # None or "": the server has no keys
    filename: str
    content: bytes
    source_language: str
    target_language: str
    model: str = ""
    glossary_id: str = ""  # a stored glossary of the key: its entries are read at submission, kept with the job
    client: str = ""  # who submits it (``Call.client``): its characters count in that client's usage


# What each bound of ``JobStore.add`` counts, and what frees a place, after "keeps at most N".
_BOUNDS = {
    "max_jobs": "file jobs, finished ones included until they expire (--max-jobs, --job-retention-s); retry later",
    "max_jobs_per_key": "queued or running file jobs per api key (--max-jobs-per-key); "
    "wait for one to finish, or cancel one",
    "max_job_bytes_per_key": "bytes of job files per api key, finished jobs' included until they expire "
    "(--max-job-bytes-per-key, --job-retention-s); retry when one has expired",
}


def new_job_id() -> str:
    """144 random bits, URL-safe, never beginning with "-": a command line reads such an argument
    as an option (``attnserve-client job -Qm9...`` would fail: "the following arguments are
    required: id"), and one in 64 ids would begin so."""
    while (token := secrets.token_urlsafe(18)).startswith("-"):
        pass
    return token


def default_dir(settings: Settings) -> Path:
    return per_repository_dir("attnserve-state", settings.model_repo)


def state_folder(settings: Settings) -> Path:
    """``--state-dir``, else the model repository's own folder in the system temp dir; created
    here, so a folder that cannot be is one line naming the setting at start-up."""
    folder = Path(settings.state_dir) if settings.state_dir else default_dir(settings)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"state_dir: cannot create the folder {folder}: {exc.strerror or exc}") from None
    return folder


def delete_files(blobs: Path, job_id: str) -> None:
    """A job's upload and result in the ``blobs`` folder."""
    for kind in ("in", "out"):
        (blobs / f"{job_id}.{kind}").unlink(missing_ok=True)


def discard_files(blobs: Path, job_id: str) -> None:
    """The files of a job that was never stored; a folder that is gone leaves none to delete."""
    with contextlib.suppress(OSError):
        delete_files(blobs, job_id)


def progress_writer(job: Job, resume: Resume, write: Callable[..., object]) -> Callable[[int, int], None]:
    """A run's progress callback: ``write`` (the record's changes) at most every ``PROGRESS_S``,
    and at once for the first sentence done, the total known, this run's first decoded one and the end."""
    last, seen = 0.0, None

    def progress(done: int, total: int) -> None:
        nonlocal last, seen
        # a resumed run counts again from 0 as it splits the file, its total unknown till
        # then: what an earlier run reported stands (its sentences are stored, so they are
        # done), so that no client sees the job go back
        done, total = max(done, job.done), total or job.total
        now, state = time.monotonic(), (done > 0, total > 0, done == total, resume.decoded > 0)
        if now - last >= PROGRESS_S or state != seen:
            changes = dict(done=done, total=total, reused=resume.reused, decoded=resume.decoded)
            if state[3] and not (seen and seen[3]):  # this run's pace is measured from here
                changes.update(paced=time.time(), paced_decoded=resume.decoded)
            last, seen = now, state
            write(**changes)

    return progress


# Every FileJobs of this process: a job's owner is the process, so the jobs it still runs are
# all of theirs (servers started in one process, as tests do, share one owner id).
_IN_PROCESS: weakref.WeakSet[FileJobs] = weakref.WeakSet()


class FileJobs:
    """The jobs of one server process (see the module docstring)."""

    def __init__(self, translation: FileTranslation, settings: Settings, store: JobStore | None = None) -> None:
        self.translation, self.settings = translation, settings
        folder = state_folder(settings)
        self.blobs = folder / "jobs"
        self.blobs.mkdir(parents=True, exist_ok=True)
        self.store = store if store is not None else sqlite_job_store(folder)
        self._io = ThreadPoolExecutor(1, thread_name_prefix="jobs")  # the store and the files, off the loop
        self.running: dict[str, asyncio.Task] = {}
        self._wake: asyncio.Event | None = None
        self._loop_task: asyncio.Task | None = None
        self._last_sweep = 0.0
        self._last_requeue = 0.0
        self._store_down = False  # logged once per outage, not every tick
        self.stopping = False  # watches end: their clients re-attach to the next server
        _IN_PROCESS.add(self)

    async def _off(self, fn: Callable, *args: Any, **kw: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._io, lambda: fn(*args, **kw))

    def path(self, job_id: str, kind: str) -> Path:
        return self.blobs / f"{job_id}.{kind}"

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await self._requeue()
        self._wake = asyncio.Event()
        self._loop_task = asyncio.ensure_future(self._loop())

    async def stop(self, grace_s: float | None = None) -> None:
        """Running jobs stop and go back to the queue, their finished sentences kept; watches end.
        A job that has not stopped within ``grace_s`` is queued again all the same: the server's
        shutdown never waits on a job longer than its grace."""
        self.stopping = True
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        tasks = list(self.running.items())
        for _, task in tasks:
            task.cancel()
        if tasks:
            _, late = await asyncio.wait([t for _, t in tasks], timeout=grace_s)
            if late:
                log.warning("file jobs: %d job(s) still stopping after %.1f s, queued again", len(late), grace_s)
        for job_id, _ in tasks:
            try:
                job = await self._off(self.store.get_any, job_id)
                if job is not None and job.status == "running":
                    await self._off(self.store.update, job_id, status="queued", owner=0)
            except Exception as exc:  # noqa: BLE001 - a failing store must not keep the server from stopping
                # its record still names this process: the next server on the store queues it again
                log.error("file jobs: job %s not put back in the queue: %s", job_id, exc)

    def close(self) -> None:
        """After :meth:`stop` and the last call: the store's thread ends."""
        self._io.shutdown(wait=True)

    async def _loop(self) -> None:
        assert self._wake is not None
        # ``stopping`` ends it too: before Python 3.12, ``wait_for`` loses a cancel that arrives as
        # the event it waits on is set (a cancelled job sets it), and the loop would run on
        while not self.stopping:
            try:
                await self._tick()
            except StoreUnavailable as exc:  # a locked, full or vanished store: the next tick tries again
                if not self._store_down:
                    log.error("file jobs: %s; trying again every %.0f s", exc, TICK_S)
                self._store_down = True
            except Exception:
                log.exception("file jobs: the store failed")
            else:
                if self._store_down:
                    log.info("file jobs: the state store answers again")
                self._store_down = False
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TICK_S)

    async def _tick(self) -> None:
        for job_id, task in list(self.running.items()):  # cancelled by a request to another process
            job = await self._off(self.store.get_any, job_id)
            if job is None or job.status == "cancelled":
                task.cancel()
        if time.monotonic() - self._last_requeue >= REQUEUE_S:
            await self._requeue()
        while len(self.running) < self.settings.running_jobs:
            job = await self._off(self.store.claim, owner_id(), self.translation.serves)
            if job is None:
                break
            self.running[job.id] = asyncio.ensure_future(self._run(job))
        now = time.time()
        if now - self._last_sweep >= min(SWEEP_S, self.settings.job_retention_s / 4):
            self._last_sweep = now
            for job_id in await self._off(self.store.expired, now, self.settings.job_retention_s):
                await self._off(delete_files, self.blobs, job_id)

    async def _requeue(self) -> None:
        """Back in the queue: the running jobs of this host's processes that are gone (killed: no
        stop put them back), and this process's own that it no longer runs (a run whose end the
        store failed to record)."""
        self._last_requeue = time.monotonic()
        me = owner_id()

        def gone(owner: int) -> bool:
            return owner == me or owner_gone(owner)

        running = {job_id for jobs in list(_IN_PROCESS) for job_id in jobs.running}
        # a job claimed this moment by another server of the process is not yet in its running
        claimed = time.time() - REQUEUE_S
        requeued = await self._off(self.store.requeue, gone, running, claimed)
        if requeued:
            log.info("file jobs: %d interrupted job(s) queued again", requeued)

    # ------------------------------------------------------------------ a job's run

    async def _run(self, job: Job) -> None:
        try:
            content = await self._off(self.path(job.id, "in").read_bytes)
            known = await self._off(self.store.sentences, job.id)
            terms = await self._off(self.store.glossary, job.id)  # as resolved when it was submitted
            resume = Resume(known, lambda pairs: self._io.submit(self.store.add_sentences, job.id, pairs))
            progress = progress_writer(
                job, resume, lambda **changes: self._io.submit(self.store.update, job.id, **changes)
            )

            call = Call(METHOD, job.model, job.id, client=job.client)  # its characters: the submitter's usage
            request = FileRequest(call, job.filename, content, job.source, job.target, job.model, stored_glossary=terms)
            translated = await self.translation.translate(request, progress, resume)
            await self._off(self.path(job.id, "out").write_bytes, translated.content)
            taken = await self._off(
                self.store.update, job.id, **finished(job, translated, resume, self.settings.job_retention_s)
            )
            if not taken:  # expired, or cancelled meanwhile (by a request to this process or another)
                await self._off(self.path(job.id, "out").unlink, missing_ok=True)
        except asyncio.CancelledError:
            raise
        except StoreUnavailable as exc:  # its record still says running: queued again once the store answers
            log.error("file job %s stopped: %s", job.id, exc)
        except ServingError as exc:
            await self._failed(job, str(exc))
        except OSError as exc:  # its files: a full disk, a vanished folder
            log.error("file job %s failed: %s", job.id, exc)
            reason = exc.strerror or type(exc).__name__
            await self._failed(job, f"the server could not read or write the job's files: {reason}")
        except Exception as exc:  # the job fails, the server goes on
            log.exception("file job %s failed", job.id)
            await self._failed(job, f"internal error: {type(exc).__name__}")
        finally:
            self.running.pop(job.id, None)
            if self._wake is not None:
                self._wake.set()

    async def _failed(self, job: Job, error: str) -> None:
        expires = kept(job, self.settings.job_retention_s)
        try:
            await self._off(self.store.update, job.id, status="failed", error=error, expires=expires)
        except Exception as exc:  # noqa: BLE001 - its record still says running: queued again, it runs again
            log.error("file job %s: its failure was not recorded: %s", job.id, exc)

    # ------------------------------------------------------------------ the doors' operations

    async def submit(self, request: JobRequest) -> Job:
        # refused now what the job would fail at once: an unsupported type, an empty file, an unserved pair
        files.reader(request.filename)
        self.translation.check_size(len(request.content))
        self.translation.check_quota(request.client)
        if not request.content:
            raise InvalidRequest(f"{echo(request.filename)} is empty: there is nothing to translate")
        key, terms = key_digest(request.api_key), ()
        if request.glossary_id:  # resolved once: a resumed job uses these terms whatever becomes of the glossary
            languages = (request.source_language, request.target_language, request.model)
            terms = await self.translation.stored_glossary(
                Call(METHOD, "", "", key=key), request.glossary_id, *languages
            )
        self.translation.check_route(request.source_language, request.target_language, request.model)
        now, s = time.time(), self.settings
        job = Job(
            new_job_id(), key, "queued", safe_filename(request.filename),
            request.source_language, request.target_language, request.model, 0, 0, 0, 0,
            len(request.content), "", "", now, 0.0, now, now + s.job_retention_s, 0, request.glossary_id,
            client=request.client,
        )  # fmt: skip
        bounds = (s.max_jobs, s.max_jobs_per_key, s.max_job_bytes_per_key)
        try:
            await self._off(self.path(job.id, "in").write_bytes, request.content)
            over = await self._off(self.store.add, job, *bounds, terms)
        except Exception as exc:
            await self._off(discard_files, self.blobs, job.id)  # no upload left behind without its record
            if isinstance(exc, OSError):
                reason = exc.strerror or type(exc).__name__  # never the path: the folder is the server's business
                raise StorageUnavailable(f"the server cannot keep the file now ({reason}); retry later") from None
            raise
        if over:
            await self._off(discard_files, self.blobs, job.id)
            raise Overloaded(f"this server keeps at most {getattr(s, over):,} {_BOUNDS[over]}")
        if self._wake is not None:
            self._wake.set()
        return job

    async def get(self, api_key: str | None, job_id: str) -> Job:
        job = await self._off(self.store.get, key_digest(api_key), job_id)
        if job is None:
            raise JobNotFound(f"no file job {job_id!r}: it expired, was removed, or was never made with this api key")
        return job

    async def cancel(self, api_key: str | None, job_id: str) -> Job:
        job = await self._off(self.store.cancel, key_digest(api_key), job_id)
        if job is None:
            raise JobNotFound(f"no file job {job_id!r}: it expired, was removed, or was never made with this api key")
        task = self.running.get(job_id)
        if task is not None and job.status == "cancelled":
            task.cancel()
        return job

    async def result(self, api_key: str | None, job_id: str) -> tuple[Job, Path]:
        job = await self.get(api_key, job_id)
        if job.status != "done":
            raise NotFinished(f"file job {job_id} is {job.status}" + (f": {job.error}" if job.error else ""))
        return job, self.path(job.id, "out")

    async def delete(self, api_key: str | None, job_id: str) -> None:
        """A finished job, record, upload and result, gone at once (DeepL's document once downloaded)."""
        if await self._off(self.store.delete, key_digest(api_key), job_id):
            await self._off(discard_files, self.blobs, job_id)

    async def watch(self, api_key: str | None, job_id: str, every_s: float = 0.25):
        """The job each time its record changes, until it is finished (the last one yielded) or
        the server stops."""
        seen = None
        while True:
            job = await self.get(api_key, job_id)
            state = (job.status, job.done, job.total)
            if state != seen:
                seen = state
                yield job
            if job.finished or self.stopping:
                return
            await asyncio.sleep(every_s)
