"""One server process: serve until SIGTERM/SIGINT and reload the repository on SIGHUP; as one of
``--workers N``, report to the parent over its pipe (:class:`WorkerLink`, see workers.py)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from dataclasses import dataclass
from multiprocessing.connection import Connection

from ..shared.config import Settings
from .app import create_server

log = logging.getLogger("attnserve.server")


@dataclass(frozen=True)
class WorkerLink:
    """What a worker process gets from the parent: its index and the pipe to report on."""

    index: int
    conn: Connection
    metrics: bool  # serve this worker's metrics on a private port for the parent to collect

    def ready(self, metrics_port: int | None) -> None:
        self.conn.send({"index": self.index, "pid": os.getpid(), "metrics_port": metrics_port})

    def failed(self, message: str) -> None:
        self.conn.send({"index": self.index, "pid": os.getpid(), "error": message})


# How long a thread holding the GIL keeps it while another waits (Python's default: 5 ms).
# A large document is split and joined in pure Python on the work pool; meanwhile each step of
# the decode loop and each event-loop wake-up of other clients waits up to this long for the
# GIL (measured in docs/operations.md, "Limits and timeouts").
GIL_SWITCH_S = 0.0005


async def serve(settings: Settings, worker: WorkerLink | None = None) -> int:
    """Serve until SIGTERM/SIGINT; ``worker``: one of ``--workers N`` processes (see workers.py)."""
    sys.setswitchinterval(GIL_SWITCH_S)
    server, port = await create_server(settings.address, settings)
    await server.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda s=sig: _on_signal(server, s))
    loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(_reload(server)))
    served = server.registry.served()  # loaded, or (lazily served) loaded on their first request
    log.info("serving %d model(s) on %s:%d (%s)", len(served), settings.host, port, ", ".join(served))
    if worker is not None:  # metrics on a private port, collected by the parent with a worker label
        worker.ready(server.metrics.start_http("127.0.0.1", 0) if worker.metrics else None)
    await server.wait_for_termination()
    return 0


def _on_signal(server, sig: signal.Signals) -> None:
    log.info("received %s", sig.name)
    asyncio.ensure_future(server.stop())


async def _reload(server) -> None:
    """SIGHUP: hot-reload every model directory of the repository (docs/operations.md)."""
    log.info("received SIGHUP: reloading the model repository")
    try:
        await server.reload()
    except Exception:  # noqa: BLE001 - a failed reload must never take the server down
        log.exception("reload failed")
