"""Where a live classification server spends its CPU per request: py-spy samples, grouped.

A live ``attnserve-server`` (a subprocess on 127.0.0.1, dynamic batching) serves a random
ViT; a load generator keeps C requests of one raw float32 image in flight (``--transports``:
attnserve.v1's of ``benchmarks.server``, or KServe's of ``benchmarks.kserve_load``, raw or in
system shared memory, by calls or on streams, each in turn on the same server) while
``py-spy record`` samples every thread of the server. Each sample
is put in one group by the frames on its stack (onnxruntime's ``run``, the request's
tensor decode in the thread pool, batch assembly, gRPC and the event loop, other), and
each group's CPU time is divided by the requests served in the same window. The groups
other than onnxruntime run Python, mostly holding the GIL, so their sum per request
bounds the server's request rate whatever the accelerator does:
``1000 / (ms outside onnxruntime)`` requests per second.

    python -m benchmarks.server_profile --preset vit-s16 --clients 64 --seconds 20
    python -m benchmarks.server_profile --light --clients 64 --seconds 20   # the serving path alone
    python -m benchmarks.server_profile --light --transports v1 kserve kserve-shm kserve-shm-stream
    python -m benchmarks.server_profile --quick
    python -m benchmarks.server_profile --workload translation   # server_profile_translation.py
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import server_translation
from .common import add_common_arguments, header, in_fresh_process, machine, preset_name, table, write_results
from .decode import vars_of
from .launch import start_server, wait_ready
from .pyspy import WAITING, parse_raw, process_cpu_seconds
from .server import LIGHT, TRANSPORTS, load
from .vit import export

NAME = "server-profile"

GROUPS = [
    ("onnxruntime run", ("Session.run (onnxruntime",)),
    (
        "request tensor decode + preprocessing (thread pool)",
        ("ImageClassifier.prepare (", "server/images/preprocess.py"),
    ),
    (
        "batch assembly + batcher",
        ("ImageClassifier._run_batch (", "ImageClassifier.infer_items (", "server/images/batching.py"),
    ),
    ("replies (softmax, top-k, protobuf)", ("top_labels (", "softmax (")),
    (
        "handlers, checks, metrics",
        (
            "server/entry/app.py",
            "server/doors/",
            "server/service/",
            "server/shared/security.py",
            "server/shared/metrics.py",
            "prometheus",
        ),
    ),
    ("gRPC aio + event loop (Cython and asyncio)", ("asyncio/", "grpc")),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.server_profile", description=__doc__.split("\n\n")[0])
    add_common_arguments(parser)
    parser.add_argument(
        "--workload",
        choices=["classification", "translation"],
        default="classification",
        help="the server profiled (translation: server_profile_translation.py, with the translation workload's "
        "options below; --rates takes the arrival rate, default 256 texts/s)",
    )
    parser.add_argument(
        "--preset",
        type=preset_name("vit"),
        default="vit-tiny",
        help="ViT preset of the random model (default vit-tiny)",
    )
    parser.add_argument("--clients", type=int, default=None, help="concurrent clients (default 64; quick: 4)")
    parser.add_argument("--seconds", type=float, default=None, help="sampled load window (default 20; quick: 3)")
    parser.add_argument("--max-batch-size", type=int, default=32, help="the server's dynamic batch (default 32)")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second (default 200)")
    parser.add_argument("--provider", choices=["cpu", "cuda"], default="cpu", help="the server's provider")
    parser.add_argument(
        "--light",
        action="store_true",
        help="a ViT with the preset's 224x224 input (the same 602 KB requests) but almost no compute "
        "(patch 32, dim 64, depth 2): the server is then bound by its serving path, measured alone",
    )
    parser.add_argument(
        "--transports",
        nargs="+",
        choices=TRANSPORTS,
        default=["v1"],
        help="how each request's raw FP32 image travels, profiled in turn on one server: v1 (attnserve.v1 "
        "Classify), kserve (KServe ModelInfer, raw_input_contents), kserve-shm (KServe ModelInfer with the "
        "input and output in Triton's system shared memory: a region pair per client, registered once); "
        "kserve-stream, kserve-shm-stream: the same as messages of one ModelStreamInfer stream per client",
    )
    parser.add_argument("--keep-raw", metavar="FILE", help="also keep py-spy's raw stacks in FILE.<transport>")
    server_translation.add_arguments(parser)
    return parser


def onnxruntime_cpu_ms_per_image(model_dir: Path, threads: int, batch: int, provider: str) -> float:
    """CPU ms per image of onnxruntime at ``batch``, with the server's session options. Run in a fresh process."""
    from attnserve.contract.manifest import load_manifest
    from attnserve.server.shared.onnx_sessions import create_session

    manifest = load_manifest(model_dir)
    session = create_session(model_dir / manifest.graphs["model"].file, provider, threads)
    size = int(manifest.preprocessing.image_size)
    pixels = np.random.default_rng(0).standard_normal((batch, 3, size, size), dtype=np.float32)
    session.run(None, {"pixels": pixels})
    runs, t0 = 0, time.process_time()
    t_end = time.perf_counter() + 3.0
    while time.perf_counter() < t_end or runs < 3:
        session.run(None, {"pixels": pixels})
        runs += 1
    return 1000 * (time.process_time() - t0) / (runs * batch)


def _attach(pyspy: str, pid: int, rate: int, seconds: float, raw: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [pyspy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw"]
        + ["--duration", str(int(seconds) + 1), "--nonblocking", "--output", str(raw)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


async def _profile(args, transport: str, proc: subprocess.Popen, address: str, pixels, raw: Path) -> dict[str, Any]:
    """One transport's load window under py-spy: the load's stats, the server's CPU and the samples."""
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    clients, seconds = args.resolved_clients, args.resolved_seconds

    def window(count: int, limit: float):
        return load(address, pixels, clients, count, limit, transport=transport)

    await window(4 * clients, 60.0)  # warm-up: every batch size seen
    spy = _attach(pyspy, proc.pid, args.rate, seconds, raw)
    await asyncio.sleep(0.5)  # py-spy attaches
    cpu0 = process_cpu_seconds(proc.pid)
    stats = await window(10**9, seconds)
    stats["server_cpu_s"] = process_cpu_seconds(proc.pid) - cpu0
    _, err = await asyncio.get_running_loop().run_in_executor(None, spy.communicate)
    if spy.returncode != 0 or not raw.exists():
        raise SystemExit(f"py-spy failed ({spy.returncode}): {err.decode(errors='replace').strip()[-400:]}")
    stats["samples"] = parse_raw(raw.read_text(), GROUPS)
    return stats


def _summary(stats: dict[str, Any], ort_ms: float, batch: int) -> dict[str, Any]:
    """The serving path's CPU per request: the server's (/proc) minus onnxruntime's, split by py-spy's shares."""
    total_ms = 1000 * stats["server_cpu_s"] / stats["requests"]
    # py-spy samples cover slightly more than the load window; the shares among groups are what count.
    counted = {k: v for k, v in stats["samples"].items() if k != WAITING}
    serving = {k: v for k, v in counted.items() if k != "onnxruntime run"}
    serving_total = sum(serving.values()) or 1
    return {
        "served": {k: v for k, v in stats.items() if k != "samples"},
        "samples": stats["samples"],
        "server_cpu_ms_per_request": total_ms,
        "onnxruntime_cpu_ms_per_image": ort_ms,
        "onnxruntime_batch": batch,
        "serving_path_cpu_ms_per_request": max(total_ms - ort_ms, 0.0),
        "serving_path_shares": {k: n / serving_total for k, n in serving.items()},
    }


def _report(results: dict[str, dict[str, Any]]) -> None:
    names = list(results)
    rows = []
    for group in next(iter(results.values()))["samples"]:
        row: list[Any] = [group]
        for name in names:
            r = results[name]
            share = r["serving_path_shares"].get(group)
            ms = r["serving_path_cpu_ms_per_request"] * share if share is not None else None
            row += [r["samples"][group], f"{ms:.2f}" if ms is not None else ""]
        rows.append(row)
    print(
        table(["where (py-spy samples of the server)", *[f"{n}: {h}" for n in names for h in ("samples", "ms")]], rows)
    )
    for name, r in results.items():
        served, ms = r["served"], r["serving_path_cpu_ms_per_request"]
        print(
            f"{name}: served {served['requests']} requests, {served['images_per_s']:.1f} img/s at mean batch "
            f"{served['mean_batch']:.1f}; server CPU {r['server_cpu_ms_per_request']:.2f} ms per request (/proc), "
            f"onnxruntime in process at batch {r['onnxruntime_batch']} {r['onnxruntime_cpu_ms_per_image']:.2f} ms "
            f"per image -> serving path {ms:.2f} ms per request"
            + (f", a ceiling of ~{1000 / ms:.0f} requests/s on one core (the GIL)" if ms else "")
        )


def run(args: argparse.Namespace) -> dict[str, Any]:
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(pyspy).exists():
        raise SystemExit("py-spy is not installed: pip install -e '.[bench]'")
    q = args.quick
    args.resolved_clients = clients = args.clients or (4 if q else 64)
    args.resolved_seconds = args.seconds or (3.0 if q else 20.0)
    overrides = dict(image_size=32, patch_size=8, dim=64, depth=4, num_heads=2, num_classes=10) if q else {}
    info = machine()
    what = f"{args.preset}{' light' if args.light else ''}, {clients} clients{' (quick)' if q else ''}"
    header(f"server profile: classification, {what}, {' vs '.join(args.transports)}", info, 1)
    if args.light and not q:
        overrides = LIGHT
    repo = args.work_dir / f"server-repo{'-quick' if q else ''}"
    if not q and (args.preset != "vit-tiny" or args.light):
        repo = args.work_dir / f"server-repo-{args.preset}{'-light' if args.light else ''}"
    model_dir = export(overrides, args.preset, repo / "vit", "fp32", "fused", 1.0)
    size = 32 if q else 224
    pixels = np.random.default_rng(0).standard_normal((3, size, size), dtype=np.float32)
    extra = ["--shared-memory", "system"] if any("-shm" in t for t in args.transports) else []
    proc, address = start_server(repo, args.threads, args.max_batch_size, args.provider, extra)
    measured: dict[str, dict[str, Any]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:

            async def session() -> None:
                await wait_ready(address, proc)
                for transport in args.transports:
                    raw = Path(tmp) / f"profile-{transport}.txt"
                    measured[transport] = await _profile(args, transport, proc, address, pixels, raw)
                    if args.keep_raw:
                        shutil.copy(raw, f"{args.keep_raw}.{transport}")

            asyncio.run(session())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    results = {}
    for transport, stats in measured.items():
        batch = max(1, round(stats["mean_batch"]))
        ort_ms = in_fresh_process(onnxruntime_cpu_ms_per_image, model_dir, args.threads, batch, args.provider)
        results[transport] = _summary(stats, ort_ms, batch)
    _report(results)
    settings = vars_of(argparse.Namespace(**vars(args)))
    result = {"benchmark": NAME, "settings": settings, "machine": info, **results[args.transports[0]]}
    result["transports"] = results
    write_results(args.out, NAME + ("-light" if args.light else ""), result, q)
    return result


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.workload == "translation":
        from . import server_profile_translation

        server_profile_translation.run(args)
    else:
        run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
