"""Which HTTP server library carries attnserve's HTTP API: aiohttp or an ASGI app (Starlette) on uvicorn.

Each candidate runs the same handler in its own server process, on the plain asyncio event
loop (the loop grpc.aio shares with it in attnserve-server, so uvloop is out for both):
read a KServe v2 ``infer`` request, parse its JSON header, answer a JSON reply. Two bodies:
``json`` (one text as JSON, the shape of a translation request) and ``binary`` (a
3x224x224 FP32 tensor after a JSON header, Triton's binary-data extension: the shape of a
classification request, 602 KB). One client process (aiohttp, keep-alive connections)
keeps C requests in flight; the candidates take turns per round and the median round counts.

    python -m benchmarks.http_servers            # or: attnserve-bench http-servers
    python -m benchmarks.http_servers --quick
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

from .common import add_common_arguments, header, machine, table, write_results

NAME = "http-servers"
CANDIDATES = ("aiohttp", "uvicorn+starlette")
HEADER_LENGTH = "Inference-Header-Content-Length"


def reply_for(body: bytes, header_length: str | None) -> bytes:
    """The work every candidate does per request: split off and parse the JSON header, answer JSON."""
    head = body[: int(header_length)] if header_length else body
    request = json.loads(head)
    payload = len(body) - len(head)
    outputs = [{"name": "OUT", "datatype": "BYTES", "shape": [1], "data": [f"{payload} bytes"]}]
    return json.dumps({"model_name": "m", "id": request.get("id", ""), "outputs": outputs}).encode()


async def serve_aiohttp(port: int) -> None:
    from aiohttp import web

    async def infer(request: web.Request) -> web.Response:
        body = await request.read()
        return web.Response(body=reply_for(body, request.headers.get(HEADER_LENGTH)), content_type="application/json")

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v2/models/{name}/infer", infer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


async def serve_uvicorn(port: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def infer(request: Request) -> Response:
        body = await request.body()
        return Response(reply_for(body, request.headers.get(HEADER_LENGTH)), media_type="application/json")

    app = Starlette(routes=[Route("/v2/models/{name}/infer", infer, methods=["POST"])])
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, loop="asyncio", http="httptools", lifespan="off", access_log=False
    )
    config.log_level = "warning"
    await uvicorn.Server(config).serve()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bodies() -> dict[str, tuple[bytes, dict[str, str]]]:
    text = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["Monday, March 3, 2025"]}]}
    pixels = np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32).tobytes()
    tensor = {"name": "PIXELS", "datatype": "FP32", "shape": [1, 3, 224, 224], "parameters": {}}
    tensor["parameters"]["binary_data_size"] = len(pixels)
    head = json.dumps({"inputs": [tensor]}).encode()
    return {
        "json": (json.dumps(text).encode(), {"Content-Type": "application/json"}),
        "binary": (head + pixels, {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(head))}),
    }


async def load(port: int, body: bytes, headers: dict[str, str], clients: int, count: int) -> dict[str, float]:
    import aiohttp

    latencies: list[float] = []
    url = f"http://127.0.0.1:{port}/v2/models/m/infer"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as session:
        for _ in range(clients):  # warm-up: open the connections
            async with session.post(url, data=body, headers=headers) as r:
                await r.read()
        remaining = count

        async def client() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                t0 = time.perf_counter()
                async with session.post(url, data=body, headers=headers) as r:
                    await r.read()
                    assert r.status == 200, r.status
                latencies.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        wall = time.perf_counter() - t0
    ms = 1000 * np.array(latencies)
    return {
        "req_per_s": len(latencies) / wall,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
    }


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {port} after {timeout} s")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnserve-bench http-servers", description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--clients", type=int, default=8, help="requests in flight (default 8)")
    parser.add_argument("--requests", type=int, default=None, help="per round and body (default 3000 json, 300 binary)")
    parser.add_argument("--serve", choices=CANDIDATES, help=argparse.SUPPRESS)  # the server process
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    return parser


def run(args: argparse.Namespace) -> dict[str, Any]:
    repeats = args.repeats or (1 if args.quick else 3)
    counts = (
        {"json": 3000, "binary": 300} if args.requests is None else {"json": args.requests, "binary": args.requests}
    )
    if args.quick:
        counts = {"json": 100, "binary": 20}
    info = machine()
    header(f"{NAME}: aiohttp vs uvicorn+starlette, {args.clients} clients", info, 1)
    ports = {name: free_port() for name in CANDIDATES}
    code = "import sys; from attnserve.benchmarks.http_servers import main; sys.exit(main())"
    procs = {
        name: subprocess.Popen([sys.executable, "-c", code, "--serve", name, "--port", str(port)])
        for name, port in ports.items()
    }
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    try:
        for name, proc in procs.items():
            wait_listening(ports[name], proc)
        for _ in range(repeats):
            for kind, (body, headers) in bodies().items():
                for name in CANDIDATES:  # interleaved: the candidates take turns
                    stats = asyncio.run(load(ports[name], body, headers, args.clients, counts[kind]))
                    runs.setdefault((kind, name), []).append(stats)
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(30)
    rows = []
    for (kind, name), stats in runs.items():
        median = {k: statistics.median(s[k] for s in stats) for k in stats[0]}
        rows.append({"body": kind, "server": name, **median, "rounds": [s["req_per_s"] for s in stats]})
    for r in rows:
        peer = next(x for x in rows if x["body"] == r["body"] and x["server"] == "aiohttp")
        r["vs_aiohttp"] = r["req_per_s"] / peer["req_per_s"]
    print(
        table(
            ["body", "server", "req/s", "p50 ms", "p99 ms", "vs aiohttp"],
            [
                [r["body"], r["server"], r["req_per_s"], r["p50_ms"], r["p99_ms"], f"{r['vs_aiohttp']:.2f}x"]
                for r in rows
            ],
        )
    )
    result = {"benchmark": NAME, "settings": {"clients": args.clients, "requests": counts, "repeats": repeats}}
    result.update({"machine": info, "rows": rows})
    write_results(args.out, NAME, result, args.quick)
    return result


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.serve:
        asyncio.run(serve_aiohttp(args.port) if args.serve == "aiohttp" else serve_uvicorn(args.port))
        return 0
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
