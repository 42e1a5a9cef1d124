"""The ceiling in requests/s of one server process and of ``--workers N``, per transport.

Live ``attnserve-server`` processes on 127.0.0.1 serve the light ViT (``server --light``: the
preset's 602 KB input, almost no compute), one per worker count, all started before the first
window. For each transport the servers take turns: C clients, spread over P load-generator
processes (each on its own connections, so that ``--workers N``'s kernel spreads them), keep
one request each in flight for a fixed window; a server's requests/s is its ceiling on this
machine with the load generator beside it on the same cores. Transports are server-profile's:
attnserve.v1 ``Classify`` (raw), KServe ``ModelInfer`` raw or with the image in system shared
memory, and each KServe way as messages of one ``ModelStreamInfer`` stream per client. Shared
memory is served by one process only (``--shared-memory system`` is refused with several
workers: regions are registered per process), so those rows have no ``--workers`` peer.
``uptime``'s load average is recorded before and after every window.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from .common import add_common_arguments, header, load_summary, machine, preset_name, table, write_results
from .decode import vars_of
from .launch import start_server, wait_ready
from .server import LIGHT, TRANSPORTS, load_share
from .vit import export

NAME = "server-ceiling"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnserve-bench server-ceiling", description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument(
        "--preset", type=preset_name("vit"), default="vit-tiny", help="ViT preset whose input the light model takes"
    )
    parser.add_argument(
        "--transports", nargs="+", choices=TRANSPORTS, default=list(TRANSPORTS), help="default: every one"
    )
    parser.add_argument("--workers", type=int, nargs="+", default=None, help="worker counts (default 1 2)")
    parser.add_argument("--clients", type=int, default=None, help="concurrent clients in all (default 64; quick 4)")
    parser.add_argument("--client-procs", type=int, default=2, help="load-generator processes (default 2)")
    parser.add_argument("--channels", type=int, default=4, help="connections per load process (default 4)")
    parser.add_argument("--seconds", type=float, default=None, help="window per server and transport (default 10)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every window (default 1)")
    parser.add_argument("--max-batch-size", type=int, default=32, help="every server's dynamic batch (default 32)")
    return parser


def _one_process(transport: str, address: str, pixels: np.ndarray, clients: int, seconds: float, channels: int):
    """One load process's share: {latencies, wall, mean_batch} of its ``clients``."""
    return asyncio.run(load_share(transport, address, pixels, clients, 10**9, seconds, channels))


def window(args, transport: str, address: str, pixels: np.ndarray, workers: int) -> dict[str, Any]:
    """One server's requests/s under the load of every load process, with the load average around it."""
    procs = max(1, min(args.client_procs, args.resolved_clients))
    shares = [args.resolved_clients // procs + (i < args.resolved_clients % procs) for i in range(procs)]
    load_before = os.getloadavg()
    with ProcessPoolExecutor(procs) as pool:
        jobs = [
            pool.submit(_one_process, transport, address, pixels, c, args.resolved_seconds, args.channels)
            for c in shares
        ]
        parts = [job.result() for job in jobs]
    row = load_summary(
        [x for p in parts for x in p["latencies"]],
        max(p["wall"] for p in parts),
        float(np.mean([p["mean_batch"] for p in parts])),
    )
    row.update(transport=transport, workers=workers, load_before=load_before, load_after=os.getloadavg())
    if workers > 1 and not transport.startswith("v1"):  # KServe's statistics are one worker's
        row["mean_batch"] = None
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    q = args.quick
    args.resolved_clients = args.clients or (4 if q else 64)
    args.resolved_seconds = args.seconds or (2.0 if q else 10.0)
    workers = args.workers or [1, 2]
    info = machine()
    header(f"{NAME}: light {args.preset}, {args.resolved_clients} clients over {args.client_procs} processes", info, 1)
    overrides = dict(image_size=32, patch_size=8, dim=64, depth=4, num_heads=2, num_classes=10) if q else LIGHT
    repo = args.work_dir / (f"server-repo{'-quick' if q else ''}" if q else f"server-repo-{args.preset}-light")
    export(overrides, args.preset, repo / "vit", "fp32", "fused", 1.0)
    size = 32 if q else 224
    pixels = np.random.default_rng(0).standard_normal((3, size, size), dtype=np.float32)
    servers = {}
    for n in workers:
        extra = ["--workers", str(n)] if n > 1 else ["--shared-memory", "system"]
        servers[n] = start_server(repo, args.threads, args.max_batch_size, "cpu", extra)
    rows: list[dict[str, Any]] = []
    try:

        async def ready() -> None:
            for proc, address in servers.values():
                await wait_ready(address, proc)

        asyncio.run(ready())
        for _ in range(args.rounds):
            for transport in args.transports:
                for n, (_, address) in servers.items():  # interleaved: the servers take turns
                    if n > 1 and "-shm" in transport:
                        continue
                    rows.append(window(args, transport, address, pixels, n))
    finally:
        for proc, _ in servers.values():
            proc.terminate()
        for proc, _ in servers.values():
            proc.wait(30)
    _report(rows)
    result = {"benchmark": NAME, "settings": vars_of(args), "machine": info, "rows": rows}
    write_results(args.out, NAME, result, q)
    return result


def _report(rows: list[dict[str, Any]]) -> None:
    def load(r: dict[str, Any]) -> str:
        return f"{r['load_before'][0]:.1f} -> {r['load_after'][0]:.1f}"

    print(
        table(
            ["transport", "server", "requests/s", "p50 ms", "p95 ms", "mean batch", "load average (1 min)"],
            [
                [r["transport"], f"{r['workers']} process" + ("es" if r["workers"] > 1 else "")]
                + [r["images_per_s"], r["p50_ms"], r["p95_ms"], r["mean_batch"] or "-", load(r)]
                for r in rows
            ],
        )
    )


def main(argv: list[str] | None = None) -> int:
    run(build_parser().parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
