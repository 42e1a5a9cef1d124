"""KServe v2 gRPC (measured by Triton's perf_analyzer) side by side with attnserve.v1, same server, same load.

One ``attnserve-server`` (a subprocess on 127.0.0.1) serves the bundled models (built from
``models/zoo`` into the work dir). For each kind and each concurrency C in 1..4, three
contenders take turns, each keeping C requests in flight, closed loop, for the same
number of requests, with the same inputs (the example sentences; the example digit PNGs):

- ``perf_analyzer, KServe gRPC``: Triton's own load generator (C++), ``ModelInfer`` for
  images, decoupled ``ModelStreamInfer`` for texts (its latency is the first response's);
- ``python, KServe gRPC``: an asyncio client of this module on the same RPCs;
- ``python, attnserve.v1``: the same asyncio client on ``Classify`` / ``TranslateStream``.

The two Python rows differ only in the protocol (the protocol's cost); the perf_analyzer row
is what Triton's tool reports. Translation latency is time to the first piece; throughput
is texts or images answered per second.

    python -m benchmarks.perf            # or: attnserve-bench perf
    python -m benchmarks.perf --quick
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import struct
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import perf_analyzer
from .common import add_common_arguments, header, machine, table, write_results
from .launch import start_server, wait_ready

NAME = "perf"
ROOT = Path(__file__).resolve().parent.parent
KINDS = {"translation": "translator-en-de", "classification": "digits-vit"}


def sentences(count: int = 16) -> list[str]:
    lines = (ROOT / "examples" / "sentences.tsv").read_text().splitlines()
    return [line.split("\t")[0] for line in lines if line and not line.startswith("#")][:count]


def images() -> list[bytes]:
    return [p.read_bytes() for p in sorted((ROOT / "examples" / "digits").glob("digit-*.png"))]


def input_data(kind: str, path: Path) -> Path:
    """perf_analyzer's --input-data: one step per sentence or image (BYTES in base64 hold their length prefix)."""
    if kind == "translation":
        steps = [{"TEXT": {"content": [s], "shape": [1]}} for s in sentences()]
    else:
        raw = [struct.pack("<I", len(i)) + i for i in images()]
        steps = [{"IMAGE": {"b64": base64.b64encode(r).decode(), "shape": [1]}} for r in raw]
    path.write_text(json.dumps({"data": steps}))
    return path


async def python_load(address: str, kind: str, protocol: str, clients: int, count: int) -> dict[str, float]:
    """``clients`` asyncio callers, ``count`` requests in all: throughput, p50/p99 ms (first piece for texts)."""
    import grpc

    from attnserve.protos.attnserve.triton import grpc_service_pb2 as gs
    from attnserve.protos.attnserve.v1 import inference_pb2 as pb
    from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
    from attnserve.server.doors.kserve.tensors import join_bytes

    model, texts, pngs = KINDS[kind], sentences(), images()
    latencies: list[float] = []
    remaining = count
    async with grpc.aio.insecure_channel(address) as channel:
        v1 = pb_grpc.InferenceServiceStub(channel)
        infer = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=gs.ModelInferRequest.SerializeToString,
            response_deserializer=gs.ModelInferResponse.FromString,
        )
        stream_infer = channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            request_serializer=gs.ModelInferRequest.SerializeToString,
            response_deserializer=gs.ModelStreamInferResponse.FromString,
        )

        async def one(i: int, stream) -> float:
            t0 = time.perf_counter()
            if kind == "classification" and protocol == "attnserve.v1":
                request = pb.ClassifyRequest(model=model, images=[pb.ImageInput(encoded=pngs[i % len(pngs)])], top_k=1)
                await v1.Classify(request)
                return time.perf_counter() - t0
            if kind == "classification":
                request = gs.ModelInferRequest(model_name=model, raw_input_contents=[join_bytes([pngs[i % len(pngs)]])])
                request.inputs.add(name="IMAGE", datatype="BYTES", shape=[1])
                await infer(request)
                return time.perf_counter() - t0
            text = texts[i % len(texts)]
            first = None
            if protocol == "attnserve.v1":
                async for _ in v1.TranslateStream(pb.TranslateRequest(model=model, texts=[text])):
                    first = first or time.perf_counter() - t0
                return first
            request = gs.ModelInferRequest(
                model_name=model, id=str(i), raw_input_contents=[join_bytes([text.encode()])]
            )
            request.inputs.add(name="TEXT", datatype="BYTES", shape=[1])
            own = stream is None  # a warm-up call: a stream of its own
            stream = stream_infer() if own else stream
            await stream.write(request)
            while True:
                reply = await stream.read()
                if reply is grpc.aio.EOF:
                    raise RuntimeError("stream ended without a final response")
                first = first or time.perf_counter() - t0
                if reply.error_message:
                    raise RuntimeError(reply.error_message)
                if reply.infer_response.parameters["triton_final_response"].bool_param:
                    break
            if own:
                await stream.done_writing()
            return first

        async def client(c: int) -> None:
            nonlocal remaining
            # one stream per client, as perf_analyzer keeps one per context
            stream = stream_infer() if kind == "translation" and protocol == "kserve" else None
            i = c
            while remaining > 0:
                remaining -= 1
                latencies.append(await one(i, stream))
                i += clients
            if stream is not None:
                await stream.done_writing()

        for c in range(clients):  # warm-up: one request per client
            await one(c, None)
        t0 = time.perf_counter()
        await asyncio.gather(*(client(c) for c in range(clients)))
        wall = time.perf_counter() - t0
    ms = 1000 * np.array(latencies)
    return {
        "throughput": len(latencies) / wall,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnserve-bench perf", description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS))
    parser.add_argument("--max-concurrency", type=int, default=4)
    parser.add_argument(
        "--requests", type=int, default=None, help="per window of perf_analyzer (3 windows; default 50)"
    )
    return parser


def run(args: argparse.Namespace) -> dict[str, Any]:
    from attnserve.export.zoo import build_repo

    q = args.quick
    per_window = args.requests or (10 if q else 50)
    repeats = args.repeats or (1 if q else 3)
    perf_analyzer.check()
    info = machine()
    header(
        f"{NAME}: KServe v2 gRPC (perf_analyzer) vs attnserve.v1, concurrency 1..{args.max_concurrency}",
        info,
        args.threads,
    )
    repo = args.work_dir / "zoo-repo"
    build_repo(repo)
    proc, address = start_server(repo, args.threads, 32)
    rows: list[dict[str, Any]] = []
    try:
        asyncio.run(wait_ready(address, proc))
        for kind in args.kinds:
            data = input_data(kind, args.work_dir / f"perf-{kind}.json")
            for c in range(1, args.max_concurrency + 1):
                runs: dict[str, list[dict[str, float]]] = {}
                for _ in range(repeats):  # interleaved: the contenders take turns
                    pa_rows, _ = perf_analyzer.run(
                        KINDS[kind], address, "grpc", (c, c), data, streaming=kind == "translation",
                        requests_per_window=per_window,
                    )  # fmt: skip
                    r = pa_rows[0]
                    runs.setdefault("perf_analyzer, KServe gRPC", []).append(
                        {"throughput": r.throughput, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms}
                    )
                    for protocol in ("kserve", "attnserve.v1"):
                        label = f"python, {'KServe gRPC' if protocol == 'kserve' else 'attnserve.v1'}"
                        stats = asyncio.run(python_load(address, kind, protocol, c, 3 * per_window))
                        runs.setdefault(label, []).append(stats)
                for label, stats in runs.items():
                    median = {k: statistics.median(s[k] for s in stats) for k in stats[0]}
                    rows.append({"kind": kind, "concurrency": c, "client": label, **median, "rounds": stats})
    finally:
        proc.terminate()
        proc.wait(30)
    for r in rows:
        peer = next(
            x
            for x in rows
            if (x["kind"], x["concurrency"], x["client"]) == (r["kind"], r["concurrency"], "python, attnserve.v1")
        )
        r["vs_attnserve_v1"] = r["throughput"] / peer["throughput"]
    print(
        table(
            ["kind", "C", "client, protocol", "items/s", "p50 ms", "p99 ms", "vs v1"],
            [
                [r["kind"], r["concurrency"], r["client"], r["throughput"], r["p50_ms"], r["p99_ms"]]
                + [f"{r['vs_attnserve_v1']:.2f}x"]
                for r in rows
            ],
        )
    )
    settings = {"threads": args.threads, "requests_per_level": 3 * per_window, "repeats": repeats}
    result = {"benchmark": NAME, "settings": settings, "machine": info, "rows": rows}
    write_results(args.out, NAME, result, q)
    return result


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except perf_analyzer.PerfAnalyzerError as exc:
        print(f"attnserve-bench perf: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
