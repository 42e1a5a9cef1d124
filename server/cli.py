"""``attnserve-server``: load the model repository and serve it over gRPC until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from . import workers
from .app import create_server
from .config import ConfigError, Settings, bundled_model_repo
from .config_sources import add_arguments, resolve_settings
from .registry import RepositoryError
from .runtime import ProviderError
from .workers import WorkerLink

log = logging.getLogger("attnserve.server")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnserve-server",
        description="Serve the models of a repository over gRPC (attnserve.v1, grpc.health.v1, reflection).",
        epilog="Every flag is also an environment variable ATTNSERVE_<FLAG> and a key of the --config file; "
        "precedence: flag > environment > file > default.",
    )
    add_arguments(parser)
    return parser


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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = resolve_settings(args)
    except ConfigError as exc:
        print(f"attnserve-server: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    if settings.model_repo == bundled_model_repo():
        log.info("serving the bundled models from %s (no --model-repo and no ./model-repo folder)", settings.model_repo)
    if settings.workers > 1:
        try:
            return workers.run(settings)
        except OSError as exc:
            print(f"attnserve-server: error: {exc}", file=sys.stderr)
            return 1
    try:
        return asyncio.run(serve(settings))
    except (RepositoryError, ProviderError, OSError, ConfigError) as exc:
        print(f"attnserve-server: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
