"""attnserve.v1 over gRPC: ``InferenceService`` (Translate, TranslateStream, TranslateFile, Classify,
ListModels, GetModel) and ``AdminService`` (Reload), each RPC inside :meth:`AttnServer.rpc`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import grpc

from attnserve.protos.attnserve.v1 import admin_pb2
from attnserve.protos.attnserve.v1 import admin_pb2_grpc as admin_grpc
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

from ..errors import ModelNotFound, echo
from ..security import bearer_token
from ..service.file_jobs import JobRequest
from . import client_deadline
from . import v1_codec as convert
from .v1_wire import LiftedClassify

if TYPE_CHECKING:
    from ..app import AttnServer


class InferenceServicer(pb_grpc.InferenceServiceServicer):
    def __init__(self, app: AttnServer) -> None:
        self.app = app

    async def Translate(self, request: pb.TranslateRequest, context: grpc.aio.ServicerContext) -> pb.TranslateResponse:
        async with self.app.rpc(context, "Translate", request.model, inference=True) as call:
            wanted = convert.translation_request(request, call, client_deadline(context))
            return convert.translate_response(await self.app.translation.translate(wanted), request.options)

    async def TranslateStream(
        self, request: pb.TranslateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.TranslateChunk]:
        async with self.app.rpc(context, "TranslateStream", request.model, inference=True) as call:
            wanted = convert.translation_request(request, call, client_deadline(context), single=True)
            events = self.app.translation.stream(wanted)
            try:
                async for event in events:
                    chunk = convert.translate_chunk(event, request.options)
                    if chunk is not None:
                        yield chunk
            finally:
                await events.aclose()  # a cancelled or closed stream frees its row at the next step

    async def TranslateFile(
        self, request: pb.TranslateFileRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.TranslateFileChunk]:
        async with self.app.rpc(context, "TranslateFile", request.model, inference=True) as call:
            wanted = convert.file_request(request, call, client_deadline(context))
            progress: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
            work = asyncio.ensure_future(self.app.files.translate(wanted, lambda *p: progress.put_nowait(p)))
            try:
                while not work.done() or not progress.empty():
                    waiter = asyncio.ensure_future(progress.get())
                    await asyncio.wait([work, waiter], return_when=asyncio.FIRST_COMPLETED)
                    if not waiter.done():
                        waiter.cancel()
                        continue
                    done, total = waiter.result()
                    while not progress.empty():  # only the latest of a burst goes out
                        done, total = progress.get_nowait()
                    yield pb.TranslateFileChunk(progress=pb.FileProgress(sentences_done=done, sentences_total=total))
                for chunk in convert.file_chunks(work.result()):
                    yield chunk
            finally:
                work.cancel()  # a cancelled call drops the file's sentences at the next step

    def _key(self, context: grpc.aio.ServicerContext) -> str | None:
        """The caller's token (checked by the interceptor), when the server has tokens."""
        if self.app.token_checker is None:
            return None
        value = next((v for k, v in context.invocation_metadata() or () if k == "authorization"), None)
        return bearer_token(value) or None

    async def SubmitFileJob(self, request: pb.TranslateFileRequest, context: grpc.aio.ServicerContext) -> pb.FileJob:
        async with self.app.rpc(context, "SubmitFileJob", request.model):
            wanted = JobRequest(
                self._key(context),
                request.filename,
                request.content,
                request.source_language,
                request.target_language,
                request.model,
            )
            return convert.file_job(await self.app.jobs.submit(wanted))

    async def GetFileJob(self, request: pb.FileJobRequest, context: grpc.aio.ServicerContext) -> pb.FileJob:
        async with self.app.rpc(context, "GetFileJob", ""):
            return convert.file_job(await self.app.jobs.get(self._key(context), request.id))

    async def CancelFileJob(self, request: pb.FileJobRequest, context: grpc.aio.ServicerContext) -> pb.FileJob:
        async with self.app.rpc(context, "CancelFileJob", ""):
            return convert.file_job(await self.app.jobs.cancel(self._key(context), request.id))

    async def WatchFileJob(
        self, request: pb.FileJobRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.FileJob]:
        async with self.app.rpc(context, "WatchFileJob", ""):
            async for job in self.app.jobs.watch(self._key(context), request.id):
                yield convert.file_job(job)  # ends with the job, or when the server stops

    async def GetFileJobResult(
        self, request: pb.FileJobRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.TranslateFileChunk]:
        async with self.app.rpc(context, "GetFileJobResult", ""):
            job, path = await self.app.jobs.result(self._key(context), request.id)
            content = await asyncio.get_running_loop().run_in_executor(self.app.preprocess_pool, path.read_bytes)
            for chunk in convert.job_result_chunks(job, content):
                yield chunk

    async def CreateGlossary(
        self, request: pb.CreateGlossaryRequest, context: grpc.aio.ServicerContext
    ) -> pb.StoredGlossary:
        async with self.app.rpc(context, "CreateGlossary", "") as call:
            entries = [(e.source, e.target) for e in request.entries]
            glossary = await self.app.glossaries.create(
                call.key, request.name, request.source_language, request.target_language, entries
            )
            return convert.stored_glossary(glossary)

    async def ListGlossaries(
        self, request: pb.ListGlossariesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListGlossariesResponse:
        async with self.app.rpc(context, "ListGlossaries", "") as call:
            found = await self.app.glossaries.list(call.key)
            return pb.ListGlossariesResponse(glossaries=[convert.stored_glossary(g) for g in found])

    async def GetGlossary(self, request: pb.GlossaryRequest, context: grpc.aio.ServicerContext) -> pb.StoredGlossary:
        async with self.app.rpc(context, "GetGlossary", "") as call:
            return convert.stored_glossary(await self.app.glossaries.get(call.key, request.id, entries=True))

    async def DeleteGlossary(
        self, request: pb.GlossaryRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteGlossaryResponse:
        async with self.app.rpc(context, "DeleteGlossary", "") as call:
            await self.app.glossaries.delete(call.key, request.id)
            return pb.DeleteGlossaryResponse()

    async def Classify(
        self, request: LiftedClassify | pb.ClassifyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ClassifyResponse:
        """``request``: parsed by :func:`v1_wire.parse_classify` (the server's ParseGuardInterceptor)."""
        if not isinstance(request, LiftedClassify):
            request = LiftedClassify(request)
        async with self.app.rpc(context, "Classify", request.message.model, inference=True) as call:
            wanted = convert.classification_request(request.message, call, client_deadline(context), request.raw)
            name, results = await self.app.classification.classify(wanted)
            return convert.classify_response(name, results)

    async def ListModels(
        self, request: pb.ListModelsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListModelsResponse:
        async with self.app.rpc(context, "ListModels", ""):
            registry, settings = self.app.registry, self.app.settings
            entries = [registry.get(n, None) for n in registry.served()] + list(registry.failed.values())
            models = [convert.model_info(m, settings) for m in entries]
            routes = convert.language_routes(self.app.translation.routes())
            return pb.ListModelsResponse(models=models, routes=routes)

    async def GetModel(self, request: pb.GetModelRequest, context: grpc.aio.ServicerContext) -> pb.ModelInfo:
        async with self.app.rpc(context, "GetModel", request.name):
            registry = self.app.registry
            name = request.name
            model = registry.models.get(name) or registry.index.get(name) or registry.failed.get(name)
            if model is None:
                raise ModelNotFound(f"unknown model {echo(name)}; served: {', '.join(registry.served())}")
            return convert.model_info(model, self.app.settings)


class AdminServicer(admin_grpc.AdminServiceServicer):
    """Admin RPCs: registered only with ``enable_admin``; behind the bearer tokens when they are set."""

    ACTIONS = {
        "unchanged": admin_pb2.RELOAD_ACTION_UNCHANGED,
        "reloaded": admin_pb2.RELOAD_ACTION_RELOADED,
        "added": admin_pb2.RELOAD_ACTION_ADDED,
        "failed": admin_pb2.RELOAD_ACTION_FAILED,
    }

    def __init__(self, app: AttnServer) -> None:
        self.app = app

    async def Reload(self, request: admin_pb2.ReloadRequest, context: grpc.aio.ServicerContext):
        async with self.app.rpc(context, "Reload", ""):
            outcomes = await self.app.reload(list(request.models))
            return admin_pb2.ReloadResponse(
                models=[
                    admin_pb2.ModelReload(
                        name=o.name,
                        action=self.ACTIONS[o.action],
                        version=o.version,
                        error=self.app.calls.message(o.error),
                    )
                    for o in outcomes
                ]
            )
