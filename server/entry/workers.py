"""``--workers N``: N server processes on one host sharing the gRPC and HTTP ports.

One Python process serves everything under one GIL: gRPC's event loop, the protobuf
parsing and every batcher's or decode engine's Python work share it, so a server tops out
on one core's worth of Python whatever onnxruntime could do (benchmarks/README.md). With
``--workers N`` the command becomes a small parent that starts N worker processes (spawn,
not fork: grpc and onnxruntime threads do not survive a fork), each a complete server with
its own models, batchers, decode engines and event loop, all listening on the same gRPC
and HTTP ports with ``SO_REUSEPORT``: the kernel spreads new connections over the workers.
A connection (a gRPC channel) stays on the worker that accepted it.

The parent:

- reserves the ports first (a bound, never listening ``SO_REUSEPORT`` socket), so that
  ``--port 0`` means one free port for every worker, and a port held by another program
  fails before any model is loaded;
- forwards SIGTERM / SIGINT (drain: every worker stops taking work and gives its in-flight
  requests ``--grace-seconds``) and SIGHUP (hot reload: every worker reloads the changed
  model directories) and waits; it exits 0 when every worker drained cleanly, 1 otherwise.
  When a worker dies on its own, the parent drains the others and exits 1, so that a
  supervisor (docker's restart policy, Kubernetes) starts the whole set again;
- is watched by its workers: a parent killed outright (SIGKILL, the OOM killer) leaves no
  worker behind to hold the ports and claim jobs, as each worker drains when its parent
  goes (Linux's parent-death signal, and a thread watching the parent pid: other systems, and a
  parent that died before the signal was set);
- serves ``/metrics`` on ``--metrics-port``: every worker's metrics, collected at scrape
  time from the worker (each serves its own on a private 127.0.0.1 port), with a
  ``worker`` label ("0".."N-1") added to every sample. Per-worker series, not sums,
  because the gauges (rows in the decode batch, KV cache bytes, queue lengths) are read
  from live objects at scrape time, which prometheus-client's multiprocess mode cannot
  do; ``sum without (worker) (...)`` in PromQL gives the host's total.

With ``--shared-classifier`` the parent also starts, before the workers, the session host
(``session_host.py``): one process holding the classification models' sessions, which the
workers' batches run in; it is stopped after them, and its death stops the set as a worker's does.

The admin RPCs (Reload, KServe model load / unload) would act on the one worker that
received the call, so ``--enable-admin`` with more than one worker is refused at start-up;
reload a multi-worker server with SIGHUP to the parent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from multiprocessing.connection import Connection, wait

from ..shared.config import Settings
from ..shared.rate_table import create_table
from .lifeline import follow_parent

log = logging.getLogger("attnserve.server")

START_TIMEOUT_S = 600.0  # loading and warming up large models in N processes on a busy host
KILL_AFTER_S = 30.0  # beyond the drain's grace: a worker still running then is killed
SCRAPE_TIMEOUT_S = 5.0


def reserve_port(host: str, port: int) -> tuple[socket.socket, int]:
    """A bound (not listening) SO_REUSEPORT socket on ``host:port``: holds the port for the workers.

    A socket that never listens receives no connections; it only keeps the port number
    (``port`` 0: a free one) while the workers bind it with SO_REUSEPORT as well.
    """
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    # as every listening server does: the connections of a server just stopped, in TIME_WAIT on
    # the port for a minute, must not keep the next one from binding it
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot bind {host}:{port}: {exc.strerror or exc}") from exc
    return sock, sock.getsockname()[1]


def _worker_main(
    settings: Settings,
    index: int,
    conn: Connection,
    metrics: bool,
    log_level: str,
    parent: int,
    host: str | None,
    rates: tuple[str, bytes],
) -> None:
    """Entry point of one worker process (spawned): a whole server on the shared ports; its
    classification models' sessions in the session host at ``host``, when there is one; its
    clients' request rates in the table ``rates`` (path, key) every worker counts in."""
    import asyncio

    from ..shared.rate_table import use_table
    from ..shared.remote_sessions import use_host

    follow_parent(parent)
    use_host(host)
    use_table(*rates)
    # SIGHUP's default action ends a process: until serve() installs its reload handler, a SIGHUP
    # from elsewhere (a terminal's process group) is ignored; the parent holds the reloads it is
    # asked for until this worker reports ready (Workers.forward, Workers.wait_ready).
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    from ..runtime.registry import RepositoryError
    from ..shared.config import ConfigError
    from ..shared.onnx_sessions import ProviderError
    from ..state.database import StoreUnavailable
    from .process import WorkerLink, serve

    logging.basicConfig(
        level=log_level.upper(),
        format=f"%(asctime)s %(levelname)s worker-{index} %(name)s: %(message)s",
        stream=sys.stderr,
    )
    link = WorkerLink(index, conn, metrics)
    try:
        code = asyncio.run(serve(settings, link))
    except (RepositoryError, ProviderError, OSError, ConfigError, StoreUnavailable) as exc:
        link.failed(str(exc))
        code = 1
    sys.exit(code)


class Workers:
    """The parent's view of its worker processes."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.procs: list[multiprocessing.process.BaseProcess] = []
        self.conns: list[Connection] = []
        self.metrics_ports: dict[int, int] = {}
        self.ready: set[int] = set()
        self.reload_pending: set[int] = set()  # got a SIGHUP before they were ready: sent again then
        self.stopping = False
        self.host: SessionHostProcess | None = None  # --shared-classifier: the process the workers' sessions run in
        self.rates: tuple[str, bytes] | None = None  # (path, key): the clients' request rates, every worker's

    def start(self, worker_settings: Settings, metrics: bool) -> None:
        ctx = multiprocessing.get_context("spawn")
        host = self.host.address if self.host is not None else None
        self.rates = create_table()
        for index in range(self.settings.workers):
            parent_end, child_end = ctx.Pipe(duplex=False)
            args = (worker_settings, index, child_end, metrics, self.settings.log_level, os.getpid(), host, self.rates)
            proc = ctx.Process(
                target=_worker_main,
                args=args,
                name=f"attnserve-worker-{index}",
            )
            proc.start()
            child_end.close()
            self.procs.append(proc)
            self.conns.append(parent_end)

    def wait_ready(self) -> str | None:
        """Block until every worker reported; returns the first start-up error, if any."""
        pending = dict(enumerate(self.conns))
        deadline = time.monotonic() + START_TIMEOUT_S
        while pending:
            if self.stopping:
                return "stopped during start-up"
            sentinels = [self.procs[i].sentinel for i in pending]
            ready = wait([*pending.values(), *sentinels], timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                return f"workers {sorted(pending)} did not start in {START_TIMEOUT_S:.0f} s"
            for index, conn in list(pending.items()):
                if conn in ready or self.procs[index].sentinel in ready:
                    try:
                        message = conn.recv()
                    except EOFError:
                        return f"worker {index} exited during start-up (exit code {self.procs[index].exitcode})"
                    if "error" in message:
                        return f"worker {index}: {message['error']}"
                    if message["metrics_port"] is not None:
                        self.metrics_ports[index] = message["metrics_port"]
                    log.info("worker %d (pid %d) ready", index, message["pid"])
                    del pending[index]
                    self.ready.add(index)
                    if index in self.reload_pending:
                        self.reload_pending.discard(index)
                        os.kill(self.procs[index].pid, signal.SIGHUP)
        return None

    def unlink_rates(self) -> None:
        """Once every worker has opened the rates table (they are ready), or the set ends: its file
        leaves /dev/shm, the workers' mappings stay."""
        if self.rates is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.rates[0])

    def forward(self, sig: int) -> None:
        if sig in (signal.SIGTERM, signal.SIGINT):
            self.stopping = True
        for index, proc in enumerate(self.procs):
            if sig == signal.SIGHUP and index not in self.ready:
                self.reload_pending.add(index)  # still starting (maybe not yet able to take it): sent when ready
            elif proc.is_alive():
                os.kill(proc.pid, sig)

    def wait_all(self) -> int:
        """Wait for every worker to exit; a worker that exits unasked stops the rest. 0 = all drained cleanly."""
        failed = False
        kill_at: float | None = None
        alive, host = list(self.procs), self.host
        while alive:
            if self.stopping and kill_at is None:
                kill_at = time.monotonic() + self.settings.grace_seconds + KILL_AFTER_S
            timeout = None if kill_at is None else max(0.0, kill_at - time.monotonic())
            # the session host's sentinel until its end is seen (it may have died before this loop began)
            wait([p.sentinel for p in alive] + ([host.proc.sentinel] if host else []), timeout=timeout)
            if host is not None and not host.proc.is_alive():
                if not self.stopping:
                    code = host.proc.exitcode
                    log.error("the shared classifier process exited with code %s: stopping the workers", code)
                    failed = True
                    self.forward(signal.SIGTERM)
                host = None
            for proc in [p for p in alive if not p.is_alive()]:
                alive.remove(proc)
                if proc.exitcode != 0 or not self.stopping:
                    failed = True
                    log.error("%s (pid %d) exited with code %s", proc.name, proc.pid, proc.exitcode)
                if not self.stopping:
                    log.error("stopping the other workers")
                    self.forward(signal.SIGTERM)
            if kill_at is not None and time.monotonic() >= kill_at:
                for proc in alive:
                    log.error("%s (pid %d) did not stop in time: killed", proc.name, proc.pid)
                    proc.kill()
                    failed = True
        return 1 if failed else 0

    def collect_metrics(self) -> Iterator[object]:
        """Every worker's metric families with a ``worker`` label (a prometheus-client collector)."""
        from prometheus_client.metrics_core import Metric
        from prometheus_client.parser import text_string_to_metric_families

        merged: dict[str, Metric] = {}
        for index, port in sorted(self.metrics_ports.items()):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=SCRAPE_TIMEOUT_S) as reply:
                    text = reply.read().decode()
            except OSError as exc:  # a worker that is draining or gone: its series are absent
                log.debug("worker %d metrics: %s", index, exc)
                continue
            for family in text_string_to_metric_families(text):
                out = merged.setdefault(family.name, Metric(family.name, family.documentation, family.type))
                for s in family.samples:
                    out.add_sample(s.name, {**s.labels, "worker": str(index)}, s.value, s.timestamp, s.exemplar)
        yield from merged.values()


class SessionHostProcess:
    """The ``--shared-classifier`` process (``session_host.py``), listening in a private folder."""

    def __init__(self, settings: Settings) -> None:
        from .session_host import host_main

        self.folder = tempfile.mkdtemp(prefix="attnserve-sessions-")  # 0700: only the server's user enters
        self.address = os.path.join(self.folder, "sessions.sock")
        ctx = multiprocessing.get_context("spawn")
        self.ready, child_end = ctx.Pipe(duplex=False)
        args = (settings, self.address, child_end, settings.log_level, os.getpid())
        self.proc = ctx.Process(target=host_main, args=args, name="attnserve-session-host")
        self.proc.start()
        child_end.close()

    def wait_ready(self) -> str | None:
        """None once it listens, else why it does not."""
        if not wait([self.ready, self.proc.sentinel], timeout=START_TIMEOUT_S):
            return f"the shared classifier process did not start in {START_TIMEOUT_S:.0f} s"
        try:
            message = self.ready.recv()
        except EOFError:
            return f"the shared classifier process exited during start-up (exit code {self.proc.exitcode})"
        log.info("shared classifier process (pid %d) ready", self.proc.pid)
        return message.get("error")

    def stop(self) -> None:
        """After the workers: SIGTERM, then killed when it does not end."""
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(KILL_AFTER_S)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()
        shutil.rmtree(self.folder, ignore_errors=True)


class _Collector:
    def __init__(self, workers: Workers) -> None:
        self.workers = workers

    def collect(self):
        return self.workers.collect_metrics()


def _metrics_server(settings: Settings, workers: Workers):
    """The parent's ``/metrics``: every worker's; None when it cannot listen (said on stderr)."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    registry.register(_Collector(workers))
    try:
        http, _thread = start_http_server(settings.metrics_port, addr=settings.host, registry=registry)
    except OSError as exc:
        print(
            f"attnserve-server: error: cannot serve metrics on {settings.host}:{settings.metrics_port}: "
            f"{exc.strerror or exc} (see --metrics-port)",
            file=sys.stderr,
        )
        return None
    log.info("metrics on http://%s:%d/metrics (every worker's, label worker)", settings.host, http.server_port)
    return http


def run(settings: Settings) -> int:
    """The parent of ``settings.workers`` server processes; returns the exit code."""
    held: list[socket.socket] = []
    workers: Workers | None = None
    try:
        grpc_sock, port = reserve_port(settings.host, settings.port)
        held.append(grpc_sock)
        http_port = settings.http_port
        if http_port >= 0:
            http_sock, http_port = reserve_port(settings.host, http_port)
            held.append(http_sock)
        metrics = settings.metrics_port >= 0
        worker_settings = dataclasses.replace(settings, port=port, http_port=http_port, metrics_port=-1)
        workers = Workers(settings)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda s, _frame: workers.forward(s))
        if settings.shared_classifier:
            workers.host = SessionHostProcess(settings)
            if (error := workers.host.wait_ready()) is not None:
                print(f"attnserve-server: error: {error}", file=sys.stderr)
                return 1
        workers.start(worker_settings, metrics)
        error = workers.wait_ready()
        workers.unlink_rates()
        if error is not None:
            print(f"attnserve-server: error: {error}", file=sys.stderr)
            workers.forward(signal.SIGTERM)
            workers.wait_all()
            return 1
        http = _metrics_server(settings, workers) if metrics else None
        if metrics and http is None:
            workers.forward(signal.SIGTERM)
            workers.wait_all()
            return 1
        log.info(
            "serving with %d workers on %s:%d%s (pids %s)",
            settings.workers,
            settings.host,
            port,
            f", HTTP port {http_port}" if http_port >= 0 else "",
            ", ".join(str(p.pid) for p in workers.procs),
        )
        code = workers.wait_all()
        if http is not None:
            http.shutdown()
            http.server_close()
        log.info("stopped (exit code %d)", code)
        return code
    finally:
        for sock in held:
            sock.close()
        if workers is not None:
            workers.unlink_rates()
        if workers is not None and workers.host is not None:
            workers.host.stop()
