"""attnserve.v1 over gRPC: ``InferenceService`` (Translate, TranslateStream, TranslateFile, Classify,
ListModels, GetModel) and ``AdminService`` (Reload), each RPC inside
:meth:`~.context.DoorContext.rpc`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc

from attnserve.protos.attnserve.v1 import admin_pb2
from attnserve.protos.attnserve.v1 import admin_pb2_grpc as admin_grpc
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

from ..service.file_jobs import JobRequest
from ..shared.security import bearer_token
from . import client_deadline, v1_files
from . import v1_codec as convert
from .context import DoorContext
from .v1_wire import LiftedClassify


class InferenceServicer(pb_grpc.InferenceServiceServicer):
    def __init__(self, doors: DoorContext) -> None:
        self.doors = doors

    async def Translate(self, request: pb.TranslateRequest, context: grpc.aio.ServicerContext) -> pb.TranslateResponse:
        async with self.doors.rpc(context, "Translate", request.model, inference=True) as call:
            wanted = convert.translation_request(request, call, client_deadline(context))
            return convert.translate_response(await self.doors.translation.translate(wanted), request.options)

    async def TranslateStream(
        self, request: pb.TranslateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.TranslateChunk]:
        async with self.doors.rpc(context, "TranslateStream", request.model, inference=True) as call:
            wanted = convert.translation_request(request, call, client_deadline(context), single=True)
            events = self.doors.translation.stream(wanted)
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
        async with self.doors.rpc(context, "TranslateFile", request.model, inference=True) as call:
            wanted = v1_files.file_request(request, call, client_deadline(context))
            progress: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
            work = asyncio.ensure_future(self.doors.files.translate(wanted, lambda *p: progress.put_nowait(p)))
            waiter: asyncio.Future | None = None
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
                for chunk in v1_files.file_chunks(work.result(), request.target_language):
                    yield chunk
            finally:
                work.cancel()  # a cancelled call drops the file's sentences at the next step
                if waiter is not None:  # cancelled while it waited: its wait ends with it
                    waiter.cancel()

    def _key(self, context: grpc.aio.ServicerContext) -> str | None:
        """The caller's token (checked by the interceptor), when the server has tokens."""
        if self.doors.auth.checker is None:
            return None
        value = next((v for k, v in context.invocation_metadata() or () if k == "authorization"), None)
        return bearer_token(value) or None

    async def SubmitFileJob(self, request: pb.TranslateFileRequest, context: grpc.aio.ServicerContext) -> pb.FileJob:
        async with self.doors.rpc(context, "SubmitFileJob", request.model) as call:
            wanted = JobRequest(
                self._key(context),
                request.filename,
                request.content,
                request.source_language,
                request.target_language,
                request.model,
                request.glossary_id,
                client=call.client,
            )
            return v1_files.file_job(await self.doors.jobs.submit(wanted))

    async def GetFileJob(self, request: pb.FileJobRequest, context: grpc.aio.ServicerContext) -> pb.FileJob:
        async with self.doors.rpc(context, "GetFileJob", ""):
            return v1_files.file_job(await self.doors.jobs.get(self._key(context), request.id))

    async def CancelFileJob(self, request: pb.FileJobRequest, context: grpc.aio.ServicerContext) -> pb.FileJob:
        async with self.doors.rpc(context, "CancelFileJob", ""):
            return v1_files.file_job(await self.doors.jobs.cancel(self._key(context), request.id))

    async def WatchFileJob(
        self, request: pb.FileJobRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.FileJob]:
        async with self.doors.rpc(context, "WatchFileJob", ""):
            async for job in self.doors.jobs.watch(self._key(context), request.id):
                yield v1_files.file_job(job)  # ends with the job, or when the server stops

    async def GetFileJobResult(
        self, request: pb.FileJobRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.TranslateFileChunk]:
        async with self.doors.rpc(context, "GetFileJobResult", ""):
            job, path = await self.doors.jobs.result(self._key(context), request.id)
            content = await asyncio.get_running_loop().run_in_executor(self.doors.preprocess_pool, path.read_bytes)
            for chunk in v1_files.job_result_chunks(job, content):
                yield chunk

    async def CreateGlossary(
        self, request: pb.CreateGlossaryRequest, context: grpc.aio.ServicerContext
    ) -> pb.StoredGlossary:
        async with self.doors.rpc(context, "CreateGlossary", "") as call:
            entries = [(e.source, e.target) for e in request.entries]
            glossary = await self.doors.glossaries.create(
                call.key, request.name, request.source_language, request.target_language, entries
            )
            return convert.stored_glossary(glossary)

    async def ListGlossaries(
        self, request: pb.ListGlossariesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListGlossariesResponse:
        async with self.doors.rpc(context, "ListGlossaries", "") as call:
            found = await self.doors.glossaries.list(call.key)
            return pb.ListGlossariesResponse(glossaries=[convert.stored_glossary(g) for g in found])

    async def GetGlossary(self, request: pb.GlossaryRequest, context: grpc.aio.ServicerContext) -> pb.StoredGlossary:
        async with self.doors.rpc(context, "GetGlossary", "") as call:
            return convert.stored_glossary(await self.doors.glossaries.get(call.key, request.id, entries=True))

    async def DeleteGlossary(
        self, request: pb.GlossaryRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteGlossaryResponse:
        async with self.doors.rpc(context, "DeleteGlossary", "") as call:
            await self.doors.glossaries.delete(call.key, request.id)
            return pb.DeleteGlossaryResponse()

    async def Classify(
        self, request: LiftedClassify | pb.ClassifyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ClassifyResponse:
        """``request``: parsed by :func:`v1_wire.parse_classify` (the server's ParseGuardInterceptor)."""
        if not isinstance(request, LiftedClassify):
            request = LiftedClassify(request)
        async with self.doors.rpc(context, "Classify", request.message.model, inference=True) as call:
            wanted = convert.classification_request(request.message, call, client_deadline(context), request.raw)
            name, results = await self.doors.classification.classify(wanted)
            return convert.classify_response(name, results)

    async def ListModels(
        self, request: pb.ListModelsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListModelsResponse:
        async with self.doors.rpc(context, "ListModels", "", metered=False):
            view, settings = self.doors.models, self.doors.settings
            entries = [view.get(n) for n in view.served()] + list(view.failed.values())
            models = [
                convert.model_info(m, settings, loaded=view.loaded(m.name), failure=view.load_failure(m.name))
                for m in entries
            ]
            routes = convert.language_routes(self.doors.translation.routes())
            return pb.ListModelsResponse(models=models, routes=routes)

    async def GetModel(self, request: pb.GetModelRequest, context: grpc.aio.ServicerContext) -> pb.ModelInfo:
        async with self.doors.rpc(context, "GetModel", request.name, metered=False):
            models = self.doors.models
            return convert.model_info(
                models.find(request.name),
                self.doors.settings,
                loaded=models.loaded(request.name),
                failure=models.load_failure(request.name),
            )


class AdminServicer(admin_grpc.AdminServiceServicer):
    """Admin RPCs: registered only with ``enable_admin``; behind the bearer tokens when they are set."""

    ACTIONS = {
        "unchanged": admin_pb2.RELOAD_ACTION_UNCHANGED,
        "reloaded": admin_pb2.RELOAD_ACTION_RELOADED,
        "added": admin_pb2.RELOAD_ACTION_ADDED,
        "failed": admin_pb2.RELOAD_ACTION_FAILED,
    }

    def __init__(self, doors: DoorContext) -> None:
        self.doors = doors

    async def Reload(self, request: admin_pb2.ReloadRequest, context: grpc.aio.ServicerContext):
        async with self.doors.rpc(context, "Reload", ""):
            outcomes = await self.doors.repository.reload(list(request.models))
            return admin_pb2.ReloadResponse(
                models=[
                    admin_pb2.ModelReload(
                        name=o.name,
                        action=self.ACTIONS[o.action],
                        version=o.version,
                        error=self.doors.calls.message(o.error),
                    )
                    for o in outcomes
                ]
            )
