"""``--shared-classifier``: the process that holds the classification models' sessions for every
worker of ``--workers N`` and runs their batches, those that arrive together as one.

One process serving everything tops out on one core's worth of Python (gRPC receiving a 602 KB
image costs about a millisecond), so a GPU waits for requests; N workers each with their own
sessions make N CUDA contexts that take turns, each with a batch of a share of the clients. Here
the workers keep everything but the sessions: each worker batches its own requests as ever (its
queue delay, its deadlines, its metrics) and sends each batch to this process
(``shared/remote_sessions.py``: the inputs in a memory-mapped file, read in place), which runs
every batch waiting when it is free, those of the same model and shapes as one run of up to
``--max-batch-size`` rows (:func:`merge_runs`), and sends each worker its rows of the outputs.

The parent starts it before the workers and stops it after them (``workers.run``). It takes no
requests from outside: it listens on a Unix socket in a folder only the server's user can enter,
and a connection must prove the key every process of the server inherits from the parent.
"""

from __future__ import annotations

import logging
import mmap
import os
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing import AuthenticationError, current_process
from multiprocessing.connection import Connection, Listener, wait
from pathlib import Path

import numpy as np

from ..shared.config import Settings
from ..shared.onnx_sessions import ProviderError, create_session
from ..shared.remote_sessions import describe
from .lifeline import follow_parent

log = logging.getLogger("attnserve.server")

RUNS_IN_FLIGHT = 2  # one group copied into its batch while the other runs


@dataclass
class Run:
    """One worker's batch: its connection, the session's key, the outputs asked for, the inputs
    (views of the worker's mapped file) and its rows."""

    conn: Connection
    key: tuple
    outputs: list[str]
    feeds: dict[str, np.ndarray]
    rows: int

    def signature(self) -> tuple:
        """What batches must share to run as one: the session, the outputs, every input's type and
        shape past the batch axis."""
        shapes = tuple((name, a.dtype.str, a.shape[1:]) for name, a in self.feeds.items())
        return self.key, tuple(self.outputs), shapes


def merge_runs(runs: list[Run], max_rows: int) -> list[list[Run]]:
    """The runs in groups that run as one: the same :meth:`Run.signature`, at most ``max_rows`` rows
    together (a batch larger than that runs alone), in the order they came."""
    groups: list[list[Run]] = []
    open_groups: dict[tuple, list[Run]] = {}
    for run in runs:
        sig = run.signature()
        group = open_groups.get(sig)
        if group is None or sum(r.rows for r in group) + run.rows > max_rows:
            group = open_groups[sig] = []
            groups.append(group)
        group.append(run)
    return groups


class SessionHost:
    """The sessions, the workers' mapped files, and the loop that serves them."""

    def __init__(self, settings: Settings) -> None:
        self.max_rows = settings.max_batch_size
        self.sessions: dict[tuple, object] = {}  # (path, size, mtime_ns) -> session
        self.users: dict[tuple, set[str]] = {}  # the workers' RemoteSessions that hold each
        self.maps: dict[Connection, tuple[str, mmap.mmap]] = {}  # a worker thread's file, by its path
        self.stopping = False
        self.run_lock = threading.Lock()  # one session run at a time: the device runs one batch anyway
        self.runs = self.batches = 0  # runs of the sessions, and the workers' batches they ran

    def open(self, key: tuple, provider: str, threads: int, user: str) -> dict:
        """The session of ``key`` (a graph file's path, size and modification time), opened when no
        worker had it open: one per graph version for every worker. ``user``: the worker's
        RemoteSession that holds it (a model reloaded with the same graph holds it twice)."""
        session = self.sessions.get(key)
        if session is None:
            session = create_session(Path(key[0]), provider, threads)
            self.sessions[key] = session
            log.info("session host: %s opened on %s", Path(key[0]).name, session.get_providers()[0])
        self.users.setdefault(key, set()).add(user)
        return {
            "inputs": describe(session.get_inputs()),
            "outputs": describe(session.get_outputs()),
            "providers": session.get_providers(),
        }

    def close(self, key: tuple, user: str) -> None:
        """A worker unloaded the model (or replaced it after a reload): the session goes with its last user."""
        users = self.users.get(key, set())
        users.discard(user)
        if not users and self.sessions.pop(key, None) is not None:
            self.users.pop(key, None)
            log.info("session host: %s closed (no worker runs it)", Path(key[0]).name)

    def request(self, conn: Connection, message: tuple) -> Run:
        """A ``run`` message as a :class:`Run` whose inputs are views of the worker's file."""
        _, key, outputs, specs, path, size = message
        if key not in self.sessions:
            raise LookupError(f"{Path(key[0]).name} was not opened")
        held = self.maps.get(conn)
        if held is None or held[0] != path:
            if held is not None:  # the worker's thread outgrew its file: the old one is done with
                _unmap(held[1])
            fd = os.open(path, os.O_RDWR)
            try:
                held = self.maps[conn] = (path, mmap.mmap(fd, size))
            finally:
                os.close(fd)
        feeds = {}
        for name, dtype, shape, offset in specs:
            count = int(np.prod(shape, dtype=np.int64))
            feeds[name] = np.frombuffer(held[1], np.dtype(dtype), count, offset).reshape(shape)
        rows = int(specs[0][2][0]) if specs and specs[0][2] else 1
        return Run(conn, key, outputs, feeds, rows)

    def run(self, group: list[Run]) -> None:
        """One session run for ``group``; each worker gets its rows of every output. The inputs of
        several batches are copied into one array first, outside the lock, so that the copy of one
        group overlaps the other group's run; the session runs one group at a time."""
        first = group[0]
        if len(group) == 1:
            feeds = first.feeds  # read where the worker wrote them
        else:
            feeds = {name: np.concatenate([r.feeds[name] for r in group]) for name in first.feeds}
        total = sum(r.rows for r in group)
        try:
            with self.run_lock:
                outputs = self.sessions[first.key].run(first.outputs, feeds)
                self.runs, self.batches = self.runs + 1, self.batches + len(group)
            if len(group) > 1 and any(o.ndim == 0 or o.shape[0] != total for o in outputs):
                raise ValueError("an output without the inputs' batch axis: the batches cannot run together")
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own errors, sent to every batch's worker
            for r in group:
                _reply(r.conn, ("error", str(exc)))
            return
        start = 0
        for r in group:
            rows = [np.ascontiguousarray(o[start : start + r.rows]) for o in outputs] if len(group) > 1 else outputs
            _reply(r.conn, ("ok", (rows, total)))
            start += r.rows

    def drop(self, conn: Connection) -> None:
        held = self.maps.pop(conn, None)
        if held is not None:
            _unmap(held[1])
        conn.close()

    def serve(self, listener: Listener) -> None:
        """Take connections and messages until :attr:`stopping`. The batches wait while both of
        :data:`RUNS_IN_FLIGHT` are busy, and a freed one takes every batch waiting that runs as one."""
        wake_r, wake_w = os.pipe()
        arrived: list[Connection] = []
        lock = threading.Lock()
        free = threading.Semaphore(RUNS_IN_FLIGHT)

        def accept() -> None:
            while True:
                try:
                    conn = listener.accept()
                except (AuthenticationError, EOFError, ConnectionError):
                    continue  # not one of the server's processes, or one that went away at once
                except OSError:
                    return  # the listener was closed
                with lock:
                    arrived.append(conn)
                os.write(wake_w, b"x")

        def run_then_wake(group: list[Run]) -> None:
            try:
                self.run(group)
            finally:
                free.release()
                os.write(wake_w, b"x")  # the loop hands out the batches that waited

        threading.Thread(target=accept, name="session-host-accept", daemon=True).start()
        conns: list[Connection] = []
        pending: list[Run] = []
        # opening a model takes seconds: in a thread of its own, the others' batches run meanwhile
        loads = ThreadPoolExecutor(1, thread_name_prefix="session-host-open")
        with loads, ThreadPoolExecutor(RUNS_IN_FLIGHT, thread_name_prefix="session-host-run") as pool:
            while not self.stopping:
                ready = wait([*conns, wake_r], timeout=0.5)
                if wake_r in ready:
                    os.read(wake_r, 4096)
                    with lock:
                        conns += arrived
                        arrived.clear()
                for conn in [c for c in ready if c is not wake_r]:
                    try:
                        message = conn.recv()
                    except (EOFError, OSError):
                        conns.remove(conn)
                        self.drop(conn)
                        continue
                    pending += self.handle(conn, message, loads)
                while pending and free.acquire(blocking=False):
                    group = merge_runs(pending, self.max_rows)[0]
                    pending = [r for r in pending if all(r is not g for g in group)]
                    pool.submit(run_then_wake, group)

    def handle(self, conn: Connection, message: tuple, loads: ThreadPoolExecutor | None = None) -> list[Run]:
        """A ``run`` returned to be merged with the round's others; an ``open`` or ``close``
        answered in ``loads``, in the order they came (now, without one)."""
        if message[0] in ("open", "close"):
            if loads is None:
                self.answer(conn, message)
            else:
                loads.submit(self.answer, conn, message)
            return []
        try:
            return [self.request(conn, message)]
        except (LookupError, OSError, ValueError, TypeError) as exc:
            _reply(conn, ("error", str(exc)))
            return []

    def answer(self, conn: Connection, message: tuple) -> None:
        """An ``open`` (the session's inputs, outputs and providers) or a ``close``, answered."""
        try:
            if message[0] == "open":
                _reply(conn, ("ok", self.open(*message[1:])))
            else:
                self.close(*message[1:])
                _reply(conn, ("ok", None))
        except (ProviderError, LookupError, OSError, ValueError, TypeError) as exc:
            _reply(conn, ("error", str(exc)))


def _unmap(mapped: mmap.mmap) -> None:
    try:
        mapped.close()
    except BufferError:  # a view still alive: the garbage collector unmaps it
        pass


def _reply(conn: Connection, message: tuple) -> None:
    try:
        conn.send(message)
    except OSError:  # the worker went away; its connection is dropped at the next read
        pass


def host_main(settings: Settings, address: str, ready: Connection, log_level: str, parent: int) -> None:
    """Entry point of the session host (spawned by the parent of ``--workers N``)."""
    follow_parent(parent)
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s session-host %(name)s: %(message)s",
        stream=sys.stderr,
    )
    host = SessionHost(settings)

    def stop(_sig, _frame) -> None:
        host.stopping = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a reload opens new sessions when the workers ask
    try:
        listener = Listener(address, family="AF_UNIX", authkey=current_process().authkey)
    except OSError as exc:
        ready.send({"error": f"the shared classifier process cannot listen on {address}: {exc}"})
        sys.exit(1)
    ready.send({"pid": os.getpid()})
    try:
        host.serve(listener)
    finally:
        listener.close()
    log.info("session host stopped after %d runs of %d batches", host.runs, host.batches)
