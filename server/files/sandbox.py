"""Untrusted files read and written in bounded worker processes, never in the server's own.

A file is parsed by third-party code (lxml, the ``srt`` library, regular expressions) whose
cost the server cannot bound from outside: a parse holds the GIL for its whole length, so on
a thread it would stall the event loop (gRPC, health checks, every other client) and could
take gigabytes. Here each piece of file work is a job of a :class:`FileWorkers` pool:

- ``--file-workers`` processes, spawned (the server's gRPC and onnxruntime threads must not
  be forked) and kept; a job waits for a free one within its deadline. A worker's start costs
  a second or more (an interpreter and the parsers' imports), so :meth:`FileWorkers.start`
  spawns one ahead in the background, and a job that ends leaving no idle worker (its own
  retired, killed or dead) spawns one ahead again: a file finds a ready worker, not a spawn
  (files in flight together beyond the idle workers still spawn theirs, up to the size);
- a job's CPU time is capped by the kernel (``RLIMIT_CPU`` raised to the worker's time so far
  plus the job's budget: SIGXCPU ends it), the worker's memory by ``RLIMIT_AS``
  (``--file-memory-bytes`` over what the worker took at start: an allocation past it fails
  with MemoryError), and the job's wall time by its request's deadline (the worker is killed);
- a worker that dies, is killed or runs out of memory fails only its own job, with a typed
  error naming the setting, and is replaced (ahead, as above); the other jobs
  run on in their own workers.

Jobs are module-level functions (pickled by reference) and their arguments and results
must pickle: the file's bytes go in, its texts or its translated bytes come out
(``files.jobs``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import multiprocessing
import os
import resource
import signal
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from attnserve.contract.deadline import Deadline

from ..shared.errors import DeadlineExceeded, InvalidRequest, Overloaded, ServingError

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0  # a worker's imports, on a busy host
RETIRE_RSS_BYTES = 512 << 20  # a worker holding more than this after a job is replaced (a big file's heap)


class FileTooCostly(InvalidRequest):
    """A file whose reading or writing took more CPU time than ``--file-cpu-seconds``: 400."""


class FileTooLarge(Overloaded):
    """A file whose reading or writing needed more memory than ``--file-memory-bytes``: 413."""

    http_status = 413


class WorkerDied(InvalidRequest):
    """The worker handling a file ended without an answer (a crash in a parser): 400."""


@dataclass(frozen=True)
class Limits:
    cpu_seconds: float  # per file, all its jobs together
    memory_bytes: int  # per worker, over its size at start (0: none)


@dataclass(frozen=True)
class Done:
    """A job's result and the CPU seconds it took (charged to the file's budget)."""

    result: Any
    cpu_seconds: float


# ------------------------------------------------------------------------ the worker's side


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _limit_memory(memory_bytes: int) -> None:
    """RLIMIT_AS: the worker's address space now plus ``memory_bytes``."""
    if memory_bytes <= 0:
        return
    with open("/proc/self/statm") as statm:
        size = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    wanted = size + memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (wanted if hard == resource.RLIM_INFINITY else min(wanted, hard), hard))


def _limit_cpu(seconds: float) -> None:
    """RLIMIT_CPU's soft limit at this process's CPU time plus ``seconds`` (whole seconds, the
    kernel's unit); the hard limit stays, so the next job may raise it again."""
    used = time.process_time()
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = math.floor(used + max(seconds, 0.0)) + 1  # the kernel counts whole seconds: up to one more
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def _next_job(conn: Connection) -> Any:
    """The next job, or None: the server's stop, or its end of the pipe closed (a server that
    stopped while this worker was starting ahead of a file) ends the worker without a traceback."""
    try:
        return conn.recv()
    except (EOFError, OSError):
        return None


def _serve(conn: Connection, memory_bytes: int, warm: tuple[str, ...]) -> None:
    """A worker's loop (the spawned process's target): jobs in, replies out, until None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is the server's to handle
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a job killed by its limit leaves no core file
    for module in warm:
        __import__(module)
    _limit_memory(memory_bytes)
    conn.send(("ready", os.getpid()))
    while (message := _next_job(conn)) is not None:
        fn, args, cpu_seconds = message
        _limit_cpu(cpu_seconds)
        start = time.process_time()
        try:
            result = fn(*args)
        except MemoryError:
            conn.send(("memory", time.process_time() - start))
            return  # a heap that failed an allocation is not trusted with another job
        except ServingError as exc:
            conn.send(("refused", (type(exc).__name__, exc.status, getattr(exc, "http_status", None), str(exc))))
            continue
        except Exception as exc:  # noqa: BLE001 - a parser's failure on hostile input is the file's
            conn.send(("failed", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
            continue
        conn.send(("ok", result, time.process_time() - start, _rss_bytes()))


# ------------------------------------------------------------------------ the server's side


class _Refused(InvalidRequest):
    """A worker's refusal, rebuilt in the server with the status it was raised with."""

    def __init__(self, message: str, status: str, http_status: int | None) -> None:
        super().__init__(message)
        self.status, self.http_status = status, http_status


class _Worker:
    def __init__(self, ctx: Any, memory_bytes: int, warm: tuple[str, ...]) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, memory_bytes, warm), name="attnserve-file-worker")
        self.process.daemon = True
        self.process.start()
        child.close()
        self.ready = False
        self.killed = False

    def wait_ready(self) -> None:
        """Block until the worker has its imports done (on a thread of the pool's own)."""
        if not self.ready:
            if not self.conn.poll(START_TIMEOUT_S):
                raise EOFError("the worker did not start")
            self.conn.recv()
            self.ready = True

    def exchange(self, message: Any) -> Any:
        """Send a job and wait for its reply (on a thread of the pool's own)."""
        self.wait_ready()
        self.conn.send(message)
        return self.conn.recv()

    def kill(self) -> None:
        self.killed = True
        with contextlib.suppress(OSError):
            self.process.kill()

    def close(self) -> None:
        """Reap the process and close the pipe (once no thread uses it)."""
        if self.process.is_alive():
            with contextlib.suppress(OSError, ValueError):
                self.conn.send(None)
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self.conn.close()


class FileWorkers:
    """The pool (see the module docstring). ``run`` is called on the server's event loop."""

    def __init__(self, size: int, limits: Limits, warm: tuple[str, ...] = ("attnserve.server.files",)) -> None:
        self.size, self.limits, self.warm = size, limits, warm
        self._ctx = multiprocessing.get_context("spawn")
        self._idle: list[_Worker] = []
        self._free: asyncio.Semaphore | None = None
        # a thread per job waiting on its worker, and some to start and reap workers beside them
        self._threads = ThreadPoolExecutor(2 * size + 2, thread_name_prefix="file-worker")
        self._busy: set[_Worker] = set()
        self._ahead: asyncio.Future | None = None  # a worker on its way (spawned ahead), or None
        self._jobs = 0  # jobs holding a place in the pool
        self._closed = False
        self.replaced = 0  # workers ended by a limit or a crash
        self.spawned = 0  # worker processes started, ahead or for a job

    def start(self) -> None:
        """Spawn a worker ahead, off the event loop (called on it as the server starts): the
        first file finds a ready worker rather than a spawn; start-up does not wait for it."""
        self._spawn_ahead()

    @property
    def ready_workers(self) -> int:
        """Idle workers done with their imports."""
        return sum(w.ready for w in self._idle)

    def _spawn_ahead(self) -> None:
        """Spawn a worker and wait for its imports on a pool thread, when none is idle or on its
        way and the pool has room: at most ``size`` workers, counting one per job in the pool."""
        if self._closed or self._idle or self._ahead is not None or self._jobs >= self.size:
            return
        self.spawned += 1
        self._ahead = asyncio.get_running_loop().run_in_executor(self._threads, self._ready_worker)
        self._ahead.add_done_callback(self._arrived)

    def _ready_worker(self) -> _Worker | None:
        worker = _Worker(self._ctx, self.limits.memory_bytes, self.warm)
        try:
            worker.wait_ready()
        except (EOFError, OSError):
            log.warning("a file worker spawned ahead did not start (exit code %s)", worker.process.exitcode)
            worker.close()
            return None
        if self._closed:
            worker.close()
            return None
        return worker

    def _arrived(self, ahead: asyncio.Future) -> None:
        """The worker spawned ahead joins the idle ones (runs before the jobs awaiting it wake)."""
        self._ahead = None
        if ahead.cancelled():
            return
        if (error := ahead.exception()) is not None:
            log.warning("a file worker could not be spawned ahead: %s", error)
            return
        worker = ahead.result()
        if worker is not None and self._closed:
            worker.kill()
        elif worker is not None:
            self._idle.append(worker)

    async def run(self, fn: Callable[..., Any], args: tuple, cpu_seconds: float, deadline: Deadline | None) -> Done:
        """``fn(*args)`` in a worker within ``cpu_seconds`` of CPU and ``deadline`` (None: none);
        the typed errors of the module docstring otherwise."""
        if self._free is None:
            self._free = asyncio.Semaphore(self.size)
        remaining = None if deadline is None else deadline.remaining()
        try:
            await asyncio.wait_for(self._free.acquire(), remaining)
        except asyncio.TimeoutError:
            raise DeadlineExceeded(deadline.message) from None
        self._jobs += 1
        try:
            return await self._run(fn, args, cpu_seconds, deadline)
        finally:
            self._jobs -= 1
            self._free.release()
            # in place of a worker this job retired or lost to a limit; not as a job takes the last idle
            # one: that spawn's imports would take the CPU from the file's own sentence splitting
            self._spawn_ahead()

    async def _take(self, deadline: Deadline | None) -> _Worker:
        """An idle worker; else the one on its way ahead, once ready; else one spawned here."""
        while True:
            while self._idle:
                worker = self._idle.pop()
                if worker.process.is_alive():
                    self._busy.add(worker)
                    return worker
                self._bury(worker, None)
            if self._ahead is None:
                break
            remaining = None if deadline is None else deadline.remaining()
            arrived, _ = await asyncio.wait({self._ahead}, timeout=remaining)  # never cancels it
            if not arrived:
                raise DeadlineExceeded(deadline.message)
        self.spawned += 1
        worker = await asyncio.get_running_loop().run_in_executor(
            self._threads, _Worker, self._ctx, self.limits.memory_bytes, self.warm
        )
        self._busy.add(worker)
        return worker

    async def _run(self, fn: Callable[..., Any], args: tuple, cpu_seconds: float, deadline: Deadline | None) -> Done:
        worker = await self._take(deadline)
        reply_future = asyncio.get_running_loop().run_in_executor(
            self._threads, worker.exchange, (fn, args, cpu_seconds)
        )
        try:
            remaining = None if deadline is None else deadline.remaining()
            reply = await asyncio.wait_for(asyncio.shield(reply_future), remaining)
        except asyncio.TimeoutError:
            worker.kill()
            self._bury(worker, reply_future)
            raise DeadlineExceeded(deadline.message) from None
        except asyncio.CancelledError:  # the client went away: its parse stops with its worker
            worker.kill()
            self._bury(worker, reply_future)
            raise
        except (EOFError, OSError):
            # its exit code first, off the loop: reaped at once by a burial's close on another
            # thread, the process could read as not ended yet (exit code None), whatever ended it
            await asyncio.get_running_loop().run_in_executor(self._threads, worker.process.join, 5)
            failure = self._died(worker)
            self._bury(worker, None)
            raise failure from None
        return self._answer(worker, reply)

    def _answer(self, worker: _Worker, reply: tuple) -> Done:
        kind = reply[0]
        if kind == "ok":
            _, result, cpu, rss = reply
            if rss > RETIRE_RSS_BYTES:
                self._bury(worker, None, replaced=False)
            else:
                self._busy.discard(worker)
                self._idle.append(worker)
            return Done(result, cpu)
        if kind == "memory":
            self._bury(worker, None)
            raise self._out_of_memory()
        self._busy.discard(worker)
        self._idle.append(worker)
        if kind == "refused":
            _, status, http_status, message = reply[1]
            raise _Refused(message, status, http_status)
        log.warning("a file's worker job failed: %s", reply[2])
        raise InvalidRequest(f"the file could not be read or written: {reply[1][:200]}")

    def _out_of_memory(self) -> FileTooLarge:
        limit = self.limits.memory_bytes
        return FileTooLarge(
            f"the file needs more than {limit:,} bytes of memory to read or write; this server allows "
            f"{limit:,} per file (--file-memory-bytes)"
        )

    def _died(self, worker: _Worker) -> ServingError:
        code = worker.process.exitcode
        if code == -signal.SIGXCPU:
            limit = self.limits.cpu_seconds
            return FileTooCostly(
                f"reading or writing the file took more than {limit:g} s of CPU time; this server allows "
                f"{limit:g} s per file (--file-cpu-seconds)"
            )
        if code == -signal.SIGKILL and self.limits.memory_bytes:  # the kernel's OOM killer
            return self._out_of_memory()
        log.warning("a file's worker (pid %s) ended with exit code %s", worker.process.pid, code)
        return WorkerDied(f"the file could not be read or written: its worker ended (exit code {code})")

    def _bury(self, worker: _Worker, pending: asyncio.Future | None, replaced: bool = True) -> None:
        """Forget ``worker``; reap it off the loop once ``pending`` (its exchange) is done."""
        self._busy.discard(worker)
        self.replaced += replaced

        def reap(_: Any = None) -> None:
            if pending is not None and not pending.cancelled():
                pending.exception()  # retrieved: a killed worker's exchange ends in EOFError
            self._threads.submit(worker.close)

        if pending is None or pending.done():
            reap()
        else:
            pending.add_done_callback(reap)

    def close(self) -> None:
        """End every worker: idle ones asked to exit, busy ones killed (one on its way ends as it arrives)."""
        self._closed = True
        for worker in self._busy:
            worker.kill()
        for worker in [*self._idle, *self._busy]:
            self._threads.submit(worker.close)
        self._idle, self._busy = [], set()
        self._threads.shutdown(wait=False)
