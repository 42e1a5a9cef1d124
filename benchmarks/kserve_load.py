"""KServe v2 gRPC load for ``server-profile``: C clients each keep one inference of one raw
FP32 image in flight, the tensor either in ``raw_input_contents`` or in system shared memory
(Triton's extension: each client creates and registers its own input and output regions once,
as perf_analyzer does, and every request names them; the server must run with
``--shared-memory system``); each request a ``ModelInfer`` call, or a message on one
``ModelStreamInfer`` stream per client (perf_analyzer's ``--streaming``).

The replies carry no batch size, so the mean batch comes from the model's statistics
(inferences / executions over the window)."""

from __future__ import annotations

import asyncio
import time
import uuid
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from .common import load_summary

INPUT, OUTPUT = "PIXELS", "PROBABILITIES"
OUTPUT_BYTES = 1 << 16  # room for 16,384 FP32 probabilities
PAGE = 4096


class _Stub:
    """The RPCs used here under the service's real name (the vendored proto's package is
    ``attnserve.triton``, so its generated stub would call a service no server has)."""

    def __init__(self, channel) -> None:
        from attnserve.protos.attnserve.triton import grpc_service_pb2 as gs

        for name in ("ModelInfer", "ModelStatistics", "SystemSharedMemoryRegister", "SystemSharedMemoryUnregister"):
            reply = getattr(gs, f"{name}Response")
            method = channel.unary_unary(
                f"/inference.GRPCInferenceService/{name}",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=reply.FromString,
            )
            setattr(self, name, method)
        self.ModelStreamInfer = channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=gs.ModelStreamInferResponse.FromString,
        )


def _request(model: str, pixels: np.ndarray, region: str | None):
    """One image's ModelInferRequest; with ``region``, its input and output in that client's regions."""
    from attnserve.protos.attnserve.triton import grpc_service_pb2 as gs

    shape = [1, *pixels.shape]
    request = gs.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name=INPUT, datatype="FP32", shape=shape)
    output = request.outputs.add(name=OUTPUT)
    if region is None:
        request.raw_input_contents.append(pixels.tobytes())
        return request
    tensor.parameters["shared_memory_region"].string_param = f"{region}-in"
    tensor.parameters["shared_memory_byte_size"].int64_param = pixels.nbytes
    output.parameters["shared_memory_region"].string_param = f"{region}-out"
    output.parameters["shared_memory_byte_size"].int64_param = OUTPUT_BYTES
    return request


async def _statistics(stub, model: str) -> tuple[int, int]:
    """(inferences, executions) of ``model`` so far."""
    from attnserve.protos.attnserve.triton import grpc_service_pb2 as gs

    stats = (await stub.ModelStatistics(gs.ModelStatisticsRequest(name=model))).model_stats[0]
    return stats.inference_count, stats.execution_count


async def _register(stub, region: str, pixels: np.ndarray) -> shared_memory.SharedMemory:
    """A /dev/shm object holding the image, then room for the output; registered as two regions."""
    from attnserve.protos.attnserve.triton import grpc_service_pb2 as gs

    out_at = -(-pixels.nbytes // PAGE) * PAGE
    memory = shared_memory.SharedMemory(name=region, create=True, size=out_at + OUTPUT_BYTES)
    np.ndarray(pixels.shape, np.float32, buffer=memory.buf)[:] = pixels
    key = f"/{region}"
    await stub.SystemSharedMemoryRegister(
        gs.SystemSharedMemoryRegisterRequest(name=f"{region}-in", key=key, offset=0, byte_size=pixels.nbytes)
    )
    await stub.SystemSharedMemoryRegister(
        gs.SystemSharedMemoryRegisterRequest(name=f"{region}-out", key=key, offset=out_at, byte_size=OUTPUT_BYTES)
    )
    return memory


async def _call_loop(stub, request, more, done) -> None:
    """One ModelInfer call per request while ``more()``; ``done(seconds)`` after each."""
    while more():
        t0 = time.perf_counter()
        await stub.ModelInfer(request)
        done(time.perf_counter() - t0)


async def _stream_loop(stub, request, more, done) -> None:
    """The requests as messages of one ModelStreamInfer stream, one in flight."""
    call = stub.ModelStreamInfer()
    try:
        while more():
            t0 = time.perf_counter()
            await call.write(request)
            reply = await call.read()
            if reply.error_message:
                raise RuntimeError(f"ModelStreamInfer: {reply.error_message}")
            done(time.perf_counter() - t0)
        await call.done_writing()
    finally:
        call.cancel()


async def load(
    address: str,
    model: str,
    pixels: np.ndarray,
    clients: int,
    count: int,
    max_seconds: float,
    shm: bool,
    stream: bool = False,
    channels: int = 1,
    raw: bool = False,
) -> dict[str, Any]:
    """Throughput, latency and mean batch of ``clients`` callers of one image each (``pixels``: (C, H, W)),
    over ``channels`` connections (client i on connection i mod ``channels``: with ``--workers N`` the
    kernel spreads connections, not calls, over the workers; the mean batch is then the one worker's
    that answers the statistics call). ``raw``: also the latencies (s) and the window (s), to be merged
    with another load process's."""
    import grpc

    from attnserve.protos.attnserve.triton import grpc_service_pb2 as gs

    latencies: list[float] = []
    started = 0
    prefix = f"attnserve-bench-{uuid.uuid4().hex[:8]}"
    memories: list[shared_memory.SharedMemory] = []
    options = [("grpc.max_send_message_length", 64 << 20), ("grpc.use_local_subchannel_pool", 1)]
    opened = [grpc.aio.insecure_channel(address, options=options) for _ in range(max(1, min(channels, clients)))]
    stubs = [_Stub(channel) for channel in opened]
    stub = stubs[0]
    try:
        requests = []
        for i in range(clients):
            region = f"{prefix}-{i}" if shm else None
            if region:
                memories.append(await _register(stub, region, pixels))
            requests.append(_request(model, pixels, region))
        for s in stubs:
            await s.ModelInfer(requests[0])  # warm-up, and every connection up
        before = await _statistics(stub, model)
        t_end = time.perf_counter() + max_seconds

        def more() -> bool:
            nonlocal started
            started += 1
            return started <= count and time.perf_counter() < t_end

        loop = _stream_loop if stream else _call_loop
        t0 = time.perf_counter()
        await asyncio.gather(*(loop(stubs[i % len(stubs)], r, more, latencies.append) for i, r in enumerate(requests)))
        wall = time.perf_counter() - t0
        after = await _statistics(stub, model)
    finally:
        for memory in memories:  # this load's regions only: another load process may share the server
            for name in (f"{memory.name}-in", f"{memory.name}-out"):
                await stub.SystemSharedMemoryUnregister(gs.SystemSharedMemoryUnregisterRequest(name=name))
            memory.close()
            memory.unlink()
        for channel in opened:
            await channel.close()
    inferences, executions = after[0] - before[0], after[1] - before[1]
    summary = load_summary(latencies, wall, inferences / max(executions, 1))
    return {**summary, "latencies_s": latencies, "wall_s": wall} if raw else summary
