"""``inference.GRPCInferenceService`` (KServe v2 + Triton's extensions) on attnserve's gRPC port.

Handlers are codecs: decode (``grpc_codec``) -> ``KServeInference`` (the services) / ``describe`` -> encode,
inside :meth:`AttnServer.rpc` like attnserve.v1's (request ids, draining, limits, errors,
metrics with the method label ``kserve.<RPC>``). The vendored proto lives in its own
package (``attnserve.triton``); :func:`add_to_server` registers the handlers under the
service's real name, which is all a client sees on the wire. Health (ServerLive,
ServerReady, ModelReady) stays open without a token, like grpc.health.v1. System shared
memory (``shared_memory``) is served with ``--shared-memory system``, else its RPCs and tensor
parameters answer UNIMPLEMENTED; CUDA shared memory, trace and log RPCs are not served.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc

from attnserve.protos.attnserve.triton import grpc_service_pb2 as gs

from ...shared.calls import CallFailed
from ...shared.errors import InvalidRequest, NotEnabled
from .. import client_deadline
from ..context import DoorContext
from . import describe
from .describe import check_repository_parameters
from .grpc_codec import infer_request, infer_response, parameters_of
from .grpc_wire import LiftedInfer, parse_model_infer
from .infer import VERSION, KServeInference
from .shared_memory import SystemSharedMemory

SERVICE = "inference.GRPCInferenceService"
OPEN_METHODS = tuple(f"/{SERVICE}/{name}" for name in ("ServerLive", "ServerReady", "ModelReady"))
STREAM = "ModelStreamInfer"
UNARY = {
    "ServerLive": (gs.ServerLiveRequest, gs.ServerLiveResponse),
    "ServerReady": (gs.ServerReadyRequest, gs.ServerReadyResponse),
    "ModelReady": (gs.ModelReadyRequest, gs.ModelReadyResponse),
    "ServerMetadata": (gs.ServerMetadataRequest, gs.ServerMetadataResponse),
    "ModelMetadata": (gs.ModelMetadataRequest, gs.ModelMetadataResponse),
    "ModelConfig": (gs.ModelConfigRequest, gs.ModelConfigResponse),
    "ModelInfer": (gs.ModelInferRequest, gs.ModelInferResponse),
    "ModelStatistics": (gs.ModelStatisticsRequest, gs.ModelStatisticsResponse),
    "RepositoryIndex": (gs.RepositoryIndexRequest, gs.RepositoryIndexResponse),
    "RepositoryModelLoad": (gs.RepositoryModelLoadRequest, gs.RepositoryModelLoadResponse),
    "RepositoryModelUnload": (gs.RepositoryModelUnloadRequest, gs.RepositoryModelUnloadResponse),
    "SystemSharedMemoryStatus": (gs.SystemSharedMemoryStatusRequest, gs.SystemSharedMemoryStatusResponse),
    "SystemSharedMemoryRegister": (gs.SystemSharedMemoryRegisterRequest, gs.SystemSharedMemoryRegisterResponse),
    "SystemSharedMemoryUnregister": (gs.SystemSharedMemoryUnregisterRequest, gs.SystemSharedMemoryUnregisterResponse),
}


def method(name: str) -> str:
    """The metrics' method label of a KServe RPC (attnserve.v1's are the bare RPC names)."""
    return f"kserve.{name}"


class KServeServicer:
    def __init__(self, doors: DoorContext) -> None:
        self.doors = doors
        self.kserve = KServeInference(doors)
        self.regions = SystemSharedMemory(doors.settings.shared_memory == "system")

    # ------------------------------------------------------------------- health (open)

    async def ServerLive(self, request: gs.ServerLiveRequest, context) -> gs.ServerLiveResponse:
        return gs.ServerLiveResponse(live=True)

    async def ServerReady(self, request: gs.ServerReadyRequest, context) -> gs.ServerReadyResponse:
        return gs.ServerReadyResponse(ready=self.doors.models.ready)

    async def ModelReady(self, request: gs.ModelReadyRequest, context) -> gs.ModelReadyResponse:
        return gs.ModelReadyResponse(ready=self.doors.models.model_ready(request.name, request.version))

    # --------------------------------------------------------------------- metadata

    async def ServerMetadata(self, request, context) -> gs.ServerMetadataResponse:
        async with self.doors.rpc(context, method("ServerMetadata"), "", metered=False):
            return describe.server_metadata(self.doors.settings, shared_memory=self.regions.enabled)

    async def ModelMetadata(self, request: gs.ModelMetadataRequest, context) -> gs.ModelMetadataResponse:
        async with self.doors.rpc(context, method("ModelMetadata"), request.name, metered=False) as call:
            model = self.doors.models.get(request.name, request.version)
            call.model = model.name
            return describe.model_metadata(model)

    async def ModelConfig(self, request: gs.ModelConfigRequest, context) -> gs.ModelConfigResponse:
        async with self.doors.rpc(context, method("ModelConfig"), request.name, metered=False) as call:
            model = self.doors.models.get(request.name, request.version)
            call.model = model.name
            return gs.ModelConfigResponse(config=describe.model_config(model, self.doors.settings))

    async def ModelStatistics(self, request: gs.ModelStatisticsRequest, context) -> gs.ModelStatisticsResponse:
        async with self.doors.rpc(context, method("ModelStatistics"), request.name, metered=False):
            models = (
                [self.doors.models.get(request.name, request.version)]
                if request.name
                else sorted(self.doors.models.models.values(), key=lambda m: m.name)
            )
            stats, view = self.doors.calls.stats, self.doors.models
            return gs.ModelStatisticsResponse(
                model_stats=[
                    describe.model_statistics(m.name, view.executions(m.name), stats.get(m.name)) for m in models
                ]
            )

    # -------------------------------------------------------------------- inference

    async def ModelInfer(self, request: LiftedInfer | gs.ModelInferRequest, context) -> gs.ModelInferResponse:
        """``request``: parsed by :func:`grpc_wire.parse_model_infer` (the server's ParseGuardInterceptor)."""
        if not isinstance(request, LiftedInfer):
            request = LiftedInfer(request)
        message = request.message
        async with self.doors.rpc(context, method("ModelInfer"), message.model_name, inference=True) as call:
            wanted, targets = infer_request(message, request.raw, self.regions)
            response = await self.kserve.infer(wanted, call, client_deadline(context))
            return infer_response(response, targets)

    async def ModelStreamInfer(
        self, requests: AsyncIterator[bytes], context
    ) -> AsyncIterator[gs.ModelStreamInferResponse]:
        """Every request of the stream runs concurrently; responses go out as they are ready,
        matched by ``id``. A failed request is answered in-band (``error_message``) and the
        stream goes on, as Triton does; closing or cancelling the stream stops its work."""
        if self.doors.calls.draining:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "server is shutting down; retry on another replica")
        out: asyncio.Queue = asyncio.Queue()
        slots = asyncio.Semaphore(self.doors.settings.max_concurrent_rpcs)  # bounds a stream's parsed requests
        tasks: set[asyncio.Task] = set()
        request_id = dict(context.invocation_metadata() or ()).get("x-request-id")

        async def run(raw: bytes) -> None:
            try:
                await self._stream_one(raw, context, out.put_nowait, request_id)
            finally:
                slots.release()

        async def read() -> None:
            async for raw in requests:
                await slots.acquire()
                task = asyncio.ensure_future(run(raw))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            while tasks:
                await asyncio.gather(*list(tasks), return_exceptions=True)
            out.put_nowait(None)

        reader = asyncio.ensure_future(read())
        try:
            while (item := await out.get()) is not None:
                yield item
            await reader  # surfaces a failure of the request stream itself
        finally:
            for task in (reader, *tasks):
                task.cancel()

    async def _stream_one(self, raw: bytes, context, put, request_id: str | None) -> None:
        try:
            lifted = parse_model_infer(raw)  # raw tensors stay in the received bytes, as ModelInfer's
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError or a UnicodeDecodeError
            put(gs.ModelStreamInferResponse(error_message=f"request of {STREAM} is not a valid message: {exc}"))
            return
        request = lifted.message
        calls, rid = self.doors.calls, self.doors.calls.request_id(request_id)
        try:
            async with calls.track(
                method(STREAM),
                request.model_name,
                rid,
                inference=True,
                deadline_passed=_deadline_passed(context),
                caller=self.doors.grpc_caller(context),
            ) as call:
                wanted, targets = infer_request(request, lifted.raw, self.regions)
                async for response in self.kserve.stream(wanted, call, client_deadline(context)):
                    put(gs.ModelStreamInferResponse(infer_response=infer_response(response, targets)))
        except CallFailed as exc:
            failed = gs.ModelInferResponse(model_name=request.model_name, model_version=VERSION, id=request.id)
            put(gs.ModelStreamInferResponse(error_message=exc.message, infer_response=failed))

    # ------------------------------------------------------------ model repository

    async def RepositoryIndex(self, request: gs.RepositoryIndexRequest, context) -> gs.RepositoryIndexResponse:
        async with self.doors.rpc(context, method("RepositoryIndex"), "", metered=False):
            return describe.repository_index(self.doors.models, request.ready)

    async def RepositoryModelLoad(self, request: gs.RepositoryModelLoadRequest, context):
        async with self.doors.rpc(context, method("RepositoryModelLoad"), request.model_name):
            self._admin(request)
            await self.doors.repository.load(request.model_name)
            return gs.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request: gs.RepositoryModelUnloadRequest, context):
        async with self.doors.rpc(context, method("RepositoryModelUnload"), request.model_name):
            self._admin(request)
            await self.doors.repository.unload(request.model_name)
            return gs.RepositoryModelUnloadResponse()

    # ---------------------------------------------------------- system shared memory

    async def SystemSharedMemoryStatus(self, request: gs.SystemSharedMemoryStatusRequest, context):
        async with self.doors.rpc(context, method("SystemSharedMemoryStatus"), ""):
            reply = gs.SystemSharedMemoryStatusResponse()
            for r in self.regions.status(request.name):
                reply.regions[r.name].CopyFrom(
                    gs.SystemSharedMemoryStatusResponse.RegionStatus(
                        name=r.name, key=r.key, offset=r.offset, byte_size=r.byte_size
                    )
                )
            return reply

    async def SystemSharedMemoryRegister(self, request: gs.SystemSharedMemoryRegisterRequest, context):
        async with self.doors.rpc(context, method("SystemSharedMemoryRegister"), ""):
            self.regions.register(request.name, request.key, request.offset, request.byte_size)
            return gs.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(self, request: gs.SystemSharedMemoryUnregisterRequest, context):
        async with self.doors.rpc(context, method("SystemSharedMemoryUnregister"), ""):
            self.regions.unregister(request.name)
            return gs.SystemSharedMemoryUnregisterResponse()

    def _admin(self, request: Any) -> None:
        if not self.doors.settings.enable_admin:
            raise NotEnabled("model load and unload are admin operations: start the server with --enable-admin")
        check_repository_parameters(parameters_of(request.parameters, "request"))
        if not request.model_name:
            raise InvalidRequest("model_name is required")


def _deadline_passed(context):
    def passed() -> bool:
        remaining = context.time_remaining()
        return remaining is not None and remaining <= 0

    return passed


def add_to_server(servicer: KServeServicer, server: grpc.aio.Server) -> None:
    """Register ``servicer`` as ``inference.GRPCInferenceService`` (see the module docstring)."""
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, name), request_deserializer=req.FromString, response_serializer=resp.SerializeToString
        )
        for name, (req, resp) in UNARY.items()
    }
    # Raw bytes in: each message of the stream is parsed by the handler, so a bad one is
    # answered in-band instead of failing the whole stream.
    handlers[STREAM] = grpc.stream_stream_rpc_method_handler(
        servicer.ModelStreamInfer,
        request_deserializer=None,
        response_serializer=gs.ModelStreamInferResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    with contextlib.suppress(AttributeError):  # grpcio >= 1.62: the faster path for known methods
        server.add_registered_method_handlers(SERVICE, handlers)
