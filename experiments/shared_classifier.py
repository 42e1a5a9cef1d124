"""What the session host of ``--shared-classifier`` costs per image, beside the same runs in process.

``--clients`` processes (the workers' stand-ins) send batches of ``--batch`` images of the light
ViT (224 x 224 inputs, almost no compute: ``benchmarks.server.LIGHT``) through ``RemoteSession`` to
a session host started as the server starts it (``workers.SessionHostProcess``), back to back for
``--seconds``. The host's CPU time (``/proc``) minus onnxruntime's for the same images
(``server_profile.onnxruntime_cpu_ms_per_image``: the batch run in this process) is the host's own
cost per image: receiving, mapping, merging (a copy of each batch that runs with another),
replying. On a GPU that cost bounds the images/s one host can feed; the clients' CPU per image
(writing the batch into the mapped file, waiting, reading the outputs) is what each worker adds to
its serving path.

    python -m experiments.shared_classifier --clients 2 --batch 8 32 --seconds 5
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from attnserve.benchmarks.common import DEFAULT_OUT, DEFAULT_WORK, header, machine, table, write_results
from attnserve.benchmarks.pyspy import process_cpu_seconds
from attnserve.benchmarks.server import LIGHT
from attnserve.benchmarks.server_profile import onnxruntime_cpu_ms_per_image
from attnserve.benchmarks.vit import export

QUICK = dict(image_size=32, patch_size=8, dim=16, depth=1, num_heads=2, num_classes=10)


def _client(address: str, model: str, shape: tuple, seconds: float, conn) -> None:
    from attnserve.server.shared.remote_sessions import RemoteSession

    session = RemoteSession(address, Path(model), "cpu", 1)
    rows: list[int] = []
    session.on_run = rows.append
    pixels = np.random.default_rng(os.getpid()).standard_normal(shape, dtype=np.float32)
    session.run(None, {"pixels": pixels})  # the file mapped, the session warm
    conn.recv()  # every client starts together
    cpu, start, batches = time.process_time(), time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        session.run(None, {"pixels": pixels})
        batches += 1
    rows = rows[-batches:]
    conn.send({"batches": batches, "wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu})
    conn.send({"mean_run_rows": float(np.mean(rows))})


def measure(model: Path, shape: tuple, clients: int, seconds: float, max_rows: int) -> dict[str, Any]:
    from attnserve.server.entry.workers import SessionHostProcess
    from attnserve.server.shared.config import Settings

    ctx = multiprocessing.get_context("spawn")
    host = SessionHostProcess(Settings(max_batch_size=max_rows, log_level="warning"))  # the server's own
    if (error := host.wait_ready()) is not None:
        raise SystemExit(error)
    address = host.address
    links, procs = [], []
    try:
        for _ in range(clients):
            ours, theirs = ctx.Pipe()
            procs.append(ctx.Process(target=_client, args=(address, str(model), shape, seconds, theirs)))
            procs[-1].start()
            links.append(ours)
        time.sleep(1.0)  # every client's warm-up run done
        host_cpu = process_cpu_seconds(host.proc.pid)
        for link in links:
            link.send("go")
        results = [link.recv() for link in links]
        host_cpu = process_cpu_seconds(host.proc.pid) - host_cpu
        merged = [link.recv()["mean_run_rows"] for link in links]
    finally:
        for proc in procs:
            proc.join(30)
        host.stop()
    images = sum(r["batches"] for r in results) * shape[0]
    wall = max(r["wall_s"] for r in results)
    return {
        "images": images,
        "images_per_s": images / wall,
        "host_cpu_us_per_image": 1e6 * host_cpu / images,
        "client_cpu_us_per_image": 1e6 * sum(r["cpu_s"] for r in results) / images,
        "mean_run_rows": float(np.mean(merged)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=2, help="worker stand-ins (default 2)")
    parser.add_argument("--batch", type=int, nargs="+", default=[8, 32], help="images per batch (default 8 32)")
    parser.add_argument("--seconds", type=float, default=5.0, help="per batch size (default 5)")
    parser.add_argument("--max-rows", type=int, default=32, help="the host's --max-batch-size (default 32)")
    parser.add_argument("--quick", action="store_true", help="a tiny ViT, a second per batch size")
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if not sys.platform.startswith("linux"):
        raise SystemExit("the probe reads /proc: Linux only")
    overrides = QUICK if args.quick else LIGHT
    seconds = 1.0 if args.quick else args.seconds
    info = machine()
    header("shared classifier: the session host's cost per image", info, 1)
    model = export(
        overrides,
        "vit-tiny",
        args.work_dir / f"shared-classifier-{'quick' if args.quick else 'light'}",
        "fp32",
        "fused",
        1.0,
    )
    size = 32 if args.quick else 224
    rows = []
    for batch in args.batch:
        shape = (batch, 3, size, size)
        ort_us = 1e3 * onnxruntime_cpu_ms_per_image(model, 1, batch, "cpu")
        row = {
            "batch": batch,
            "clients": args.clients,
            **measure(model / "model.onnx", shape, args.clients, seconds, args.max_rows),
        }
        row["onnxruntime_cpu_us_per_image"] = ort_us
        row["host_overhead_us_per_image"] = row["host_cpu_us_per_image"] - ort_us
        rows.append(row)
    print(
        table(
            [
                "batch",
                "clients",
                "img/s",
                "host CPU us/img",
                "onnxruntime us/img",
                "host's own us/img",
                "client us/img",
                "rows a run",
            ],
            [
                [r["batch"], r["clients"], f"{r['images_per_s']:.0f}", f"{r['host_cpu_us_per_image']:.1f}"]
                + [f"{r['onnxruntime_cpu_us_per_image']:.1f}", f"{r['host_overhead_us_per_image']:.1f}"]
                + [f"{r['client_cpu_us_per_image']:.1f}", f"{r['mean_run_rows']:.1f}"]
                for r in rows
            ],
        )
    )
    settings = {k: str(v) for k, v in vars(args).items()} | {"work_dir": "$WORK"}
    write_results(args.out, "shared-classifier", {"machine": info, "settings": settings, "rows": rows}, args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
