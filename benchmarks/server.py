"""Serving under load: classification (dynamic batching vs unbatched) and translation (continuous vs static batching).

Classification (this module):

A live ``attnserve-server`` (a subprocess on 127.0.0.1) serves a random ViT; an asyncio
gRPC load generator keeps C requests of one preprocessed image (a raw float32 tensor)
in flight for a bounded count and time. Two servers take turns per concurrency level:
dynamic batching (``--max-batch-size 32``) and unbatched (``--max-batch-size 1``).
In-process onnxruntime at batch 1 and 32 in the same run gives the overhead figure.
``--workers N`` adds a dynamic-batching server of N worker processes (``attnserve-server
--workers N``: N GILs on one port), its clients spread over ``--channels`` connections;
``--shared-classifier`` one more per N whose workers run their batches in one process
(``attnserve-server --workers N --shared-classifier``: one session for every worker).
``--transports``: how the image travels, each in turn at every level (server-profile's load
generators): attnserve.v1 ``Classify`` (the default), or KServe ``ModelInfer`` raw or with the
image in Triton's system shared memory, by calls or on streams (``kserve-shm-stream``, the
cheapest per request: the servers then run with ``--shared-memory system``, which a server of
several workers refuses, so shared-memory rows have no ``--workers`` server).
Translation: see ``server_translation.py`` (its own JSON and PNG, ``server-translation``).

    python -m benchmarks.server              # or: attnserve-bench server (both workloads)
    python -m benchmarks.server --workloads classification --transports v1 kserve-shm-stream
    python -m benchmarks.server --workloads translation
    python -m benchmarks.server --quick
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import kserve_load, server_translation
from .common import (
    add_common_arguments,
    header,
    load_summary,
    machine,
    preset_name,
    pyplot,
    save_plot,
    table,
    write_results,
)
from .decode import vars_of
from .launch import start_server, wait_ready
from .vit import export

NAME = "server"
WORKLOADS = ("classification", "translation")
# How a request's raw FP32 image travels: attnserve.v1 Classify; KServe ModelInfer with the image
# in raw_input_contents or in system shared memory (-shm), by calls or as messages of one
# ModelStreamInfer stream per client (-stream).
TRANSPORTS = ("v1", "v1-jpeg", "kserve", "kserve-shm", "kserve-stream", "kserve-shm-stream")


# A ViT with the preset's 224x224 input (the same 602 KB requests) but almost no compute: the
# server is then bound by its serving path (server and server-profile --light).
LIGHT = dict(patch_size=32, dim=64, depth=2, num_heads=2)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnserve-bench server", description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument(
        "--workloads",
        nargs="+",
        choices=WORKLOADS,
        default=list(WORKLOADS),
        help="which halves run (default both)",
    )
    parser.add_argument(
        "--preset", type=preset_name("vit"), default="vit-tiny", help="ViT preset served (default vit-tiny)"
    )
    parser.add_argument(
        "--light",
        action="store_true",
        help="the preset's 224x224 input with almost no compute (LIGHT): the serving path's own ceiling",
    )
    parser.add_argument("--clients", type=int, nargs="+", default=None, help="default 1 8 32 64 (quick: 1 4)")
    parser.add_argument("--requests", type=int, default=None, help="requests per level (default 256; quick 16)")
    parser.add_argument("--max-seconds", type=float, default=30.0, help="time bound per level")
    parser.add_argument(
        "--client-procs", type=int, default=1, help="load-generator processes the clients are spread over (default 1)"
    )
    parser.add_argument(
        "--provider", choices=["cpu", "cuda"], default="cpu", help="onnxruntime provider of the servers and in-process"
    )
    parser.add_argument(
        "--transports",
        nargs="+",
        choices=TRANSPORTS,
        default=["v1"],
        help="how each classification request travels, each in turn (default v1: attnserve.v1 Classify); "
        "v1-jpeg: Classify with the image as a 224x224 JPEG, decoded by the server; "
        "kserve-shm-stream: KServe streams with the image in system shared memory (no --workers rows)",
    )
    parser.add_argument(
        "--shared-classifier",
        action="store_true",
        help="also each --workers N server with --shared-classifier (its workers' batches run in one process)",
    )
    server_translation.add_arguments(parser)
    return parser


async def load_raw(
    address: str, request, clients: int, count: int, max_seconds: float, channels: int = 1
) -> dict[str, Any]:
    """``clients`` loops sending ``request`` until ``count`` are done or ``max_seconds`` pass, over
    ``channels`` connections (client i on connection i mod ``channels``: one worker process each)."""
    import grpc

    from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

    latencies: list[float] = []
    batches: list[int] = []
    started = 0
    own = [("grpc.use_local_subchannel_pool", 1)]  # a connection per channel, not one shared per target
    opened = [grpc.aio.insecure_channel(address, options=own) for _ in range(max(1, min(channels, clients)))]
    try:
        stubs = [pb_grpc.InferenceServiceStub(channel) for channel in opened]
        for stub in stubs:
            await stub.Classify(request)  # warm-up
        t_end = time.perf_counter() + max_seconds

        async def client(stub) -> None:
            nonlocal started
            while started < count and time.perf_counter() < t_end:
                started += 1
                t0 = time.perf_counter()
                reply = await stub.Classify(request)
                latencies.append(time.perf_counter() - t0)
                batches.append(reply.results[0].batch_size)

        t0 = time.perf_counter()
        await asyncio.gather(*(client(stubs[i % len(stubs)]) for i in range(clients)))
        wall = time.perf_counter() - t0
    finally:
        for channel in opened:
            await channel.close()
    return {"latencies": latencies, "batches": batches, "wall": wall}


def v1_request(pixels: np.ndarray):
    """attnserve.v1's ClassifyRequest of one raw FP32 image (``pixels``: (C, H, W)), top 1."""
    from attnserve.protos.attnserve.v1 import inference_pb2 as pb

    tensor = pb.Tensor(shape=list(pixels.shape), datatype=pb.DATA_TYPE_FP32, raw_contents=pixels.tobytes())
    return pb.ClassifyRequest(model="vit", images=[pb.ImageInput(tensor=tensor)], top_k=1)


def v1_jpeg_request(pixels: np.ndarray):
    """attnserve.v1's ClassifyRequest of one encoded image, a JPEG (quality 90) of ``pixels``' size
    as a camera would send it: shapes and a camera's grain (20 KB at 224 x 224, against 602 KB
    as a raw tensor); the server decodes, resizes and normalises it in its work pool."""
    import io

    from PIL import Image, ImageDraw

    from attnserve.protos.attnserve.v1 import inference_pb2 as pb

    _, h, w = pixels.shape
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x + y) * 255 // max(h + w - 2, 1)], -1)
    image = Image.fromarray(base.astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(6):
        cx, cy, r = int(rng.integers(w)), int(rng.integers(h)), int(rng.integers(8, max(9, w // 4)))
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=tuple(int(v) for v in rng.integers(0, 255, 3)))
    grain = rng.normal(0, 12, base.shape)  # a camera's: what makes a photo's JPEG its size
    image = Image.fromarray((np.asarray(image) + grain).clip(0, 255).astype(np.uint8))
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=90)
    return pb.ClassifyRequest(model="vit", images=[pb.ImageInput(encoded=buffer.getvalue())], top_k=1)


async def load_share(
    transport: str, address: str, pixels: np.ndarray, clients: int, count: int, max_seconds: float, channels: int = 1
) -> dict[str, Any]:
    """One load process's clients, each sending one image (``pixels``: (C, H, W)) over ``transport``:
    their latencies (s), the window (s) and the mean batch."""
    if transport.startswith("v1"):
        request = v1_jpeg_request(pixels) if transport == "v1-jpeg" else v1_request(pixels)
        raw = await load_raw(address, request, clients, count, max_seconds, channels)
        return {"latencies": raw["latencies"], "wall": raw["wall"], "mean_batch": float(np.mean(raw["batches"]))}
    shm, stream = "-shm" in transport, transport.endswith("-stream")
    got = await kserve_load.load(address, "vit", pixels, clients, count, max_seconds, shm, stream, channels, raw=True)
    return {"latencies": got["latencies_s"], "wall": got["wall_s"], "mean_batch": got["mean_batch"]}


def _share_in_process(*args) -> dict[str, Any]:
    return asyncio.run(load_share(*args))


async def load(
    address: str,
    pixels: np.ndarray,
    clients: int,
    count: int,
    max_seconds: float,
    procs: int = 1,
    channels: int = 1,
    transport: str = "v1",
) -> dict[str, Any]:
    """Throughput and latency of ``clients`` concurrent callers of one image each (``pixels``) over
    ``transport``, spread over ``procs`` client processes (one Python process tops out at some
    hundreds of large requests per second)."""
    if procs <= 1 or clients < 2:
        parts = [await load_share(transport, address, pixels, clients, count, max_seconds, channels)]
    else:
        from concurrent.futures import ProcessPoolExecutor

        procs = min(procs, clients)
        shares = [clients // procs + (i < clients % procs) for i in range(procs)]
        per_proc = max(1, -(-channels // procs))  # the connections, spread over the processes
        loop = asyncio.get_running_loop()
        with ProcessPoolExecutor(procs) as pool:
            jobs = [
                loop.run_in_executor(
                    pool, _share_in_process, transport, address, pixels, c, count * c // clients, max_seconds, per_proc
                )
                for c in shares
            ]
            parts = await asyncio.gather(*jobs)
    latencies = [x for p in parts for x in p["latencies"]]
    # each part's mean weighted by its requests: v1's is the mean over every reply's batch size
    mean_batch = sum(p["mean_batch"] * len(p["latencies"]) for p in parts) / max(len(latencies), 1)
    return load_summary(latencies, max(p["wall"] for p in parts), mean_batch)


def in_process(model_dir: Path, threads: int, batch: int, repeats: int, provider: str = "cpu") -> float:
    """images/s of onnxruntime called directly at ``batch`` (median of ``repeats``)."""
    from attnserve.contract.manifest import load_manifest
    from attnserve.server.shared.onnx_sessions import create_session

    # The server's own session (options, provider, CUDA settings); raises if cuda is not usable.
    graph = load_manifest(model_dir).graphs["model"]
    session = create_session(model_dir / graph.file, provider, threads)
    size = int(load_manifest(model_dir).preprocessing.image_size)
    pixels = np.random.default_rng(0).standard_normal((batch, 3, size, size), dtype=np.float32)
    session.run(None, {"pixels": pixels})
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        session.run(None, {"pixels": pixels})
        times.append(time.perf_counter() - t0)
    return batch / float(np.median(times))


DYNAMIC, UNBATCHED = "dynamic batching (max 32)", "unbatched (max_batch_size 1)"


def _measure(args, repo: Path, pixels: np.ndarray) -> list[dict[str, Any]]:
    """Every server started, then per level and transport the servers in turn (interleaved: load
    from elsewhere lands on all alike); a row per (clients, transport, server)."""
    shm = ["--shared-memory", "system"] if any("-shm" in t for t in args.transports) else []
    servers = {DYNAMIC: (32, shm), UNBATCHED: (1, shm)}
    for n in args.workers:  # --shared-memory is refused with workers: regions are registered per process
        servers[f"{DYNAMIC}, {n} workers"] = (32, ["--workers", str(n)])
        if args.shared_classifier:
            servers[f"{DYNAMIC}, {n} workers, shared classifier"] = (32, ["--workers", str(n), "--shared-classifier"])
    channels = args.channels or (4 * max(args.workers) if args.workers else 1)
    procs = {name: start_server(repo, args.threads, mb, args.provider, extra) for name, (mb, extra) in servers.items()}
    rows: list[dict[str, Any]] = []
    try:

        async def window(name: str, address: str, transport: str, clients: int) -> None:
            several = "--workers" in servers[name][1]
            if several and "-shm" in transport:
                return
            load_args = (args.requests, args.max_seconds, args.client_procs, channels, transport)
            stats = await load(address, pixels, clients, *load_args)
            if several and not transport.startswith("v1"):  # KServe's statistics are one worker's
                stats["mean_batch"] = None
            rows.append({"server": name, "transport": transport, "clients": clients, **stats})

        async def session() -> None:
            for proc, address in procs.values():
                await wait_ready(address, proc)
            for clients in args.clients:
                for transport in args.transports:
                    for name, (_, address) in procs.items():
                        await window(name, address, transport, clients)

        asyncio.run(session())
    finally:
        for proc, _ in procs.values():
            proc.terminate()
        for proc, _ in procs.values():
            proc.wait(30)
    return rows


def _compare(args, rows: list[dict[str, Any]], direct: dict[int, float]) -> tuple[dict, dict]:
    """Each row's ratio to the unbatched server (same level and transport); per transport, at the
    most clients: each server's overhead against onnxruntime in process (unbatched against
    batch 1, the others against batch 32) and the dynamic batching gain."""
    overhead: dict[str, dict[str, float]] = {}
    gain: dict[str, float] = {}
    for r in rows:
        peer = next(
            x for x in rows if (x["clients"], x["transport"], x["server"]) == (r["clients"], r["transport"], UNBATCHED)
        )
        r["ratio_to_unbatched"] = r["images_per_s"] / peer["images_per_s"]
        if r["clients"] == max(args.clients):
            ref = direct[1] if r["server"] == UNBATCHED else direct[32]
            overhead.setdefault(r["transport"], {})[r["server"]] = 1 - r["images_per_s"] / ref
            if r["server"] == DYNAMIC:
                gain[r["transport"]] = r["ratio_to_unbatched"]
    return overhead, gain


def _report(rows: list[dict[str, Any]], direct: dict[int, float], overhead: dict, gain: dict) -> None:
    print(
        table(
            ["clients", "transport", "server", "img/s", "p50 ms", "p95 ms", "p99 ms", "mean batch", "vs unbatched"],
            [
                [r["clients"], r["transport"], r["server"], r["images_per_s"], r["p50_ms"], r["p95_ms"], r["p99_ms"]]
                + [r["mean_batch"] if r["mean_batch"] is not None else "-", f"{r['ratio_to_unbatched']:.2f}x"]
                for r in rows
            ],
        )
    )
    print(f"in-process onnxruntime: batch 1 {direct[1]:.1f} img/s, batch 32 {direct[32]:.1f} img/s")
    for transport, by_server in overhead.items():
        print(
            f"{transport}: gRPC + queue overhead at the most clients: "
            + ", ".join(f"{k}: {100 * v:.0f}%" for k, v in by_server.items())
            + f"; dynamic batching {gain[transport]:.2f}x unbatched"
        )


def _plot(args, rows: list[dict[str, Any]], direct: dict[int, float]) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for key in dict.fromkeys((r["transport"], r["server"]) for r in rows):
        sel = [r for r in rows if (r["transport"], r["server"]) == key]
        label = key[1] if args.transports == ["v1"] else f"{key[0]}: {key[1]}"
        ax.plot([r["clients"] for r in sel], [r["images_per_s"] for r in sel], marker="o", label=label)
    ax.axhline(direct[32], ls="--", color="gray", label="in-process onnxruntime, batch 32")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent clients")
    ax.set_ylabel("images/s")
    ax.legend(fontsize=8)
    return save_plot(fig, args.out, NAME, args.quick)


def run(args: argparse.Namespace) -> dict[str, Any]:
    q = args.quick
    server_translation.check_workers(args)
    if args.shared_classifier and not args.workers:
        raise SystemExit("--shared-classifier adds a server per --workers N: give --workers too")
    args.clients = args.clients or ([1, 4] if q else [1, 8, 32, 64])
    args.requests = args.requests or (16 if q else 256)
    args.repeats = args.repeats or (3 if q else 5)
    overrides = dict(image_size=32, patch_size=8, dim=64, depth=4, num_heads=2, num_classes=10) if q else {}
    info = machine()
    light = " light" if args.light else ""
    title = f"server: classification, {args.preset}{light}, {args.provider}, {' + '.join(args.transports)}"
    header(title + (" (quick: a tiny config)" if q else ""), info, args.threads)
    repo = args.work_dir / f"server-repo{'-quick' if q else ''}"
    if args.light and not q:
        overrides, repo = LIGHT, args.work_dir / f"server-repo-{args.preset}-light"
    model_dir = export(overrides, args.preset, repo / "vit", "fp32", "fused", 1.0)
    size = 32 if q else 224
    pixels = np.random.default_rng(0).standard_normal((3, size, size), dtype=np.float32)
    rows = _measure(args, repo, pixels)
    direct = {b: in_process(model_dir, args.threads, b, args.repeats, args.provider) for b in (1, 32)}
    overhead, gain = _compare(args, rows, direct)
    _report(rows, direct, overhead, gain)
    result = {"benchmark": NAME, "settings": vars_of(args), "machine": info, "transports": args.transports}
    result["rows"] = rows
    result["in_process_images_per_s"] = {str(k): v for k, v in direct.items()}
    result["overhead_vs_in_process"] = overhead  # transport -> server -> 1 - img/s / in process
    result["dynamic_batching_gain"] = gain  # transport -> dynamic batching / unbatched img/s
    if not args.no_plot:
        result["plot"] = str(_plot(args, rows, direct))
    write_results(args.out, NAME, result, q)
    return result


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if "classification" in args.workloads:
        run(argparse.Namespace(**vars(args)))
    if "translation" in args.workloads:
        server_translation.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
