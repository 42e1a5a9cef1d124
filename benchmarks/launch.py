"""An ``attnserve-server`` subprocess for the benchmarks that measure a live server: a free port,
the server started with the settings every benchmark shares, and its wait until gRPC health says
SERVING."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    repo: Path, threads: int, max_batch: int, provider: str = "cpu", extra: list[str] | None = None
) -> tuple[subprocess.Popen, str]:
    port = free_port()
    code = "import sys; from attnserve.server.entry.cli import main; sys.exit(main())"
    argv = [sys.executable, "-c", code, "--model-repo", str(repo), "--port", str(port), "--metrics-port", "-1"]
    argv += ["--http-port", "-1"]
    argv += [
        "--provider",
        provider,
        "--threads",
        str(threads),
        "--max-batch-size",
        str(max_batch),
        "--log-level",
        "warning",
        # decoding is what the server benchmarks time: rounds that repeat a text must not come
        # from the translation cache (attnserve-bench translation-cache passes its own size)
        "--translation-cache-mb",
        "0",
        *(extra or []),
    ]
    proc = subprocess.Popen(argv)
    return proc, f"127.0.0.1:{port}"


async def wait_ready(address: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + timeout
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}")
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.2)
    raise TimeoutError(f"server at {address} not ready after {timeout} s")
