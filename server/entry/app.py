"""The application object: the gRPC server (the doors attnserve.v1 and KServe v2 / Triton's
``inference.GRPCInferenceService``, health, reflection), the HTTP server (KServe v2 REST,
Triton's generate, LibreTranslate), the two services, metrics and the lifecycle (start,
drain, hot reload).

Every inference handler is a codec (``doors``): decode the wire request -> await the
translation or classification service (``service``) -> encode the reply, inside the tracked call
of ``doors.context`` (gRPC) or the HTTP server's route wrapper, both built on ``CallTracker``
(``shared.calls``), which maps the typed errors to one status and counts the call, whatever the
protocol. A door gets a ``DoorContext`` (the services, a read-only view of the models and the
auth hook), never this object.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from attnserve.protos.attnserve.triton import grpc_service_pb2 as triton_pb
from attnserve.protos.attnserve.v1 import admin_pb2
from attnserve.protos.attnserve.v1 import admin_pb2_grpc as admin_grpc
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

from ..doors import v1, v1_wire
from ..doors.access_log import AccessLogInterceptor
from ..doors.context import Auth, DoorContext, RepositoryActions
from ..doors.kserve import grpc_service as kserve_grpc
from ..doors.kserve import grpc_wire as kserve_wire
from ..files.job_store import SqlJobStore
from ..runtime.registry import ModelRegistry
from ..runtime.reload import Reloader
from ..runtime.residency import Residency
from ..service.classification import ClassificationService
from ..service.downloads import Downloads
from ..service.file_jobs import FileJobs, state_folder
from ..service.files import FileTranslation
from ..service.models import ModelView
from ..service.stored_glossaries import StoredGlossaries
from ..service.translation import TranslationService
from ..shared import security
from ..shared.calls import Call, CallTracker
from ..shared.config import Settings
from ..shared.metrics import Metrics
from ..state import GlossaryStore, open_database
from ..state.usage import UsageStore
from . import descriptors
from .repository import ModelHealth, RepositoryControl

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["InferenceService"].full_name  # "attnserve.v1.InferenceService"
ADMIN_SERVICE_NAME = admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name
HEALTH_SERVICE_NAME = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
__all__ = ["AttnServer", "Call", "create_server"]


class AttnServer(RepositoryControl):
    """Owns the grpc.aio and HTTP servers, the models, health and metrics; ``stop`` drains gracefully."""

    def __init__(self, settings: Settings, registry: ModelRegistry) -> None:
        self.settings = settings
        self.registry = registry
        self.metrics = Metrics()
        repo = Path(settings.model_repo)
        self.calls = CallTracker(
            self.metrics,
            settings.max_concurrent_rpcs,
            self._labelled,
            hidden=(str(repo.resolve()), str(repo.absolute())),
            rates=security.rate_limiter(settings),
        )
        self.health = ModelHealth(self._refresh_health)
        # The bounded off-loop work pool of both services: image decoding, large documents'
        # splitting, language detection (--preprocess-threads threads).
        self.preprocess_pool = ThreadPoolExecutor(settings.preprocess_threads, thread_name_prefix="preprocess")
        self.translation = TranslationService(registry, settings, self.metrics, self.preprocess_pool)
        self.files = FileTranslation(self.translation)
        self.state = open_database(settings.state_url, state_folder(settings))
        self.jobs = FileJobs(self.files, settings, SqlJobStore(self.state))
        self.downloads = Downloads(settings, self.preprocess_pool)
        self.glossaries = StoredGlossaries.serving(self.translation, GlossaryStore(self.state), settings)
        if settings.state_dir or settings.state_url:  # the clients' monthly characters survive a restart
            self.translation.usage.keep_in(UsageStore(self.state))
        self.classification = ClassificationService(registry, settings, self.preprocess_pool)
        self.residency = (
            Residency(registry, settings, self.metrics, self._loaded, self.metrics.unwatch) if settings.lazy else None
        )
        self.reloader = Reloader(registry, settings, self._swapped)
        if self.residency is not None:
            self.reloader.on_indexed = self.residency.forget_failure
            self.residency.on_health = self._model_health
        for model in registry.models.values():
            self._watch(model)
        tokens = security.load_tokens(settings)
        self.doors = self._door_context(security.TokenChecker(tokens) if tokens else None)
        self.server = self._grpc_server(self.doors)
        self.metrics_port: int | None = None
        self.http = None
        if settings.http_port >= 0:
            from ..doors.http.server import HttpServer  # aiohttp: imported only when HTTP is on

            self.http = HttpServer(self.doors)
        self.http_port: int | None = None
        self._started = False
        self._stopped = asyncio.Event()
        self._stop_task: asyncio.Task | None = None
        self._watcher: asyncio.Task | None = None  # repository.py: new model directories, picked up

    def _door_context(self, checker: security.TokenChecker | None) -> DoorContext:
        """What every door gets: the services, a read-only view of the models, the auth hook."""
        return DoorContext(
            settings=self.settings,
            calls=self.calls,
            translation=self.translation,
            classification=self.classification,
            files=self.files,
            jobs=self.jobs,
            downloads=self.downloads,
            glossaries=self.glossaries,
            models=ModelView(self.registry, self.residency, lambda: self.ready),
            auth=Auth(checker, self.metrics),
            repository=RepositoryActions(self.load_model, self.unload_model, self.reload),
            preprocess_pool=self.preprocess_pool,
        )

    def _grpc_server(self, doors: DoorContext) -> grpc.aio.Server:
        """The gRPC server with its doors, health and reflection; its interceptors check the
        bearer tokens, parse the large messages in place and write the access log."""
        settings = self.settings
        options = [
            ("grpc.max_receive_message_length", settings.max_message_bytes),
            ("grpc.max_send_message_length", settings.max_message_bytes),
            # gRPC turns SO_REUSEPORT on by default on Linux: two servers on one port would both
            # listen and the kernel would split clients between them. Only --workers N shares the
            # port on purpose (server/entry/workers.py); a single server must fail to bind instead.
            ("grpc.so_reuseport", 1 if settings.workers > 1 else 0),
        ]
        parsers = {
            v1_wire.CLASSIFY_METHOD: v1_wire.parse_classify,
            kserve_wire.MODEL_INFER_METHOD: kserve_wire.parse_model_infer,
        }
        interceptors: list[grpc.aio.ServerInterceptor] = [security.ParseGuardInterceptor(parsers)]
        if doors.auth.checker is not None:
            open_methods = security.OPEN_PREFIXES + kserve_grpc.OPEN_METHODS
            interceptors.insert(0, security.TokenAuthInterceptor(doors.auth.checker, doors.auth.refused, open_methods))
        if settings.access_log:  # outermost: refused calls are logged too
            interceptors.insert(0, AccessLogInterceptor())
        server = grpc.aio.server(
            options=options, interceptors=interceptors, maximum_concurrent_rpcs=settings.max_concurrent_rpcs
        )
        pb_grpc.add_InferenceServiceServicer_to_server(v1.InferenceServicer(doors), server)
        kserve_grpc.add_to_server(kserve_grpc.KServeServicer(doors), server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        # Reflection lists every served service and answers from a pool that describes each one
        # under the name it is served by (KServe's: inference.GRPCInferenceService; descriptors.py).
        names = [SERVICE_NAME, kserve_grpc.SERVICE, HEALTH_SERVICE_NAME, reflection.SERVICE_NAME]
        files = [pb.DESCRIPTOR, triton_pb.DESCRIPTOR, health_pb2.DESCRIPTOR, reflection_pb2.DESCRIPTOR]
        if settings.enable_admin:
            admin_grpc.add_AdminServiceServicer_to_server(v1.AdminServicer(doors), server)
            names.append(ADMIN_SERVICE_NAME)
            files.append(admin_pb2.DESCRIPTOR)
        reflection.enable_server_reflection(names, server, pool=descriptors.reflection_pool(files))
        return server

    # ----------------------------------------------------------------- lifecycle

    def bind(self, address: str) -> int:
        """Take the ports (gRPC at ``address``, HTTP and metrics from the settings) before any
        model loads (``create_server``); returns the gRPC port. OSError names the port in use."""
        port = _bind_grpc(self.server, address, self.settings)
        if self.http is not None:
            self.http_port = self.http.bind(self.settings.host, self.settings.http_port)
        if self.settings.metrics_port >= 0:
            self.metrics_port = self.metrics.start_http(self.settings.host, self.settings.metrics_port)
        return port

    async def abandon(self) -> None:
        """Give back what :meth:`bind` took, for a server whose start-up failed."""
        await self.server.stop(None)
        if self.http is not None:
            await self.http.stop()
        self.metrics.stop_http()
        self.preprocess_pool.shutdown(wait=False)
        self.files.close()
        self.jobs.close()
        self.glossaries.close()
        self.translation.usage.close()

    async def start(self) -> None:
        await self.registry.start()
        if self.metrics_port is not None:
            log.info("metrics on http://%s:%d/metrics", self.settings.host, self.metrics_port)
        await self.server.start()
        if self.http is not None:
            await self.http.start()
        for name in self.registry.served():  # loaded, or loaded on its first request
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        for name in self.registry.failed:
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        if self.settings.repository_poll_seconds > 0:
            self._watcher = asyncio.ensure_future(self.watch_repository())
        self.files.start()  # after health: the worker's imports do not delay start-up
        await self.translation.usage.start()
        await self.jobs.start()
        self._started = True

    async def stop(self, grace: float | None = None) -> None:
        """Health NOT_SERVING, new requests UNAVAILABLE, in-flight ones get ``grace`` seconds."""
        if self._stop_task is None:
            self._stop_task = asyncio.ensure_future(
                self._drain(self.settings.grace_seconds if grace is None else grace)
            )
        await asyncio.shield(self._stop_task)

    @property
    def draining(self) -> bool:
        return self.calls.draining

    @property
    def ready(self) -> bool:
        """Taking work (KServe's server readiness; health ``""`` says the same)."""
        return self._started and not self.draining

    async def _drain(self, grace: float) -> None:
        deadline = time.monotonic() + grace
        self.calls.draining = True
        if self._watcher is not None:
            self._watcher.cancel()
        log.info("shutting down: draining %d in-flight request(s), grace %.1f s", self.calls.inflight, grace)
        try:
            await self.health.enter_graceful_shutdown()  # every service NOT_SERVING, and it stays so
            await self._finish_work(deadline)
        except Exception as exc:  # noqa: BLE001 - whatever failed, the process must still stop
            log.error("shutting down: %s: %s", type(exc).__name__, exc)
        finally:
            try:
                await self._close(deadline)
            finally:
                log.info("stopped")
                self._stopped.set()

    async def _finish_work(self, deadline: float) -> None:
        """Requests already in the handlers finish normally (a request still being preprocessed
        must still find its batcher open), within the grace."""
        # running jobs back in the queue, for the next start on the state folder
        await self.jobs.stop(max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.calls.wait_idle(), max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(asyncio.TimeoutError):  # versions replaced by a hot reload
            await asyncio.wait_for(self.reloader.wait_retired(), max(0.0, deadline - time.monotonic()))
        if self.residency is not None:  # models unloaded to make room
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.residency.wait_stopped(), max(0.0, deadline - time.monotonic()))

    async def _close(self, deadline: float) -> None:
        """Batchers and engines stop, and whatever is left when the grace runs out fails with UNAVAILABLE."""
        await self.registry.stop(max(0.0, deadline - time.monotonic()))
        await self.server.stop(max(0.5, deadline - time.monotonic()))  # replies being sent get to finish
        if self.http is not None:
            await self.http.stop()
        await self.translation.usage.stop()  # after the last request: its characters are written
        self.preprocess_pool.shutdown(wait=False)
        self.files.close()
        self.jobs.close()
        self.glossaries.close()
        self.translation.usage.close()
        self.metrics.stop_http()

    async def wait_for_termination(self) -> None:
        await self._stopped.wait()

    # --------------------------------------------------------------------- calls

    def _labelled(self, name: str) -> bool:
        """Whether ``name`` labels the metrics: a model of the repository (served or failed), never a client's guess."""
        return name in self.registry.models or name in self.registry.index or name in self.registry.failed


async def create_server(
    address: str = "127.0.0.1:0", settings: Settings | None = None, registry: ModelRegistry | None = None
) -> tuple[AttnServer, int]:
    """Bind the ports (gRPC at ``address``, HTTP and metrics from ``settings``), then load the
    models (unless ``registry`` is given); returns (server, gRPC port). A port in use fails at
    once with an OSError naming it, before any model loads; whatever was bound is given back.

    Call ``await server.start()`` next, then ``await server.stop(grace)`` to drain.
    """
    settings = settings or Settings()
    if registry is None and not Path(settings.model_repo).is_dir():
        ModelRegistry.scan(settings.model_repo, settings)  # a repository that is not there: its error first
    server = AttnServer(settings, ModelRegistry() if registry is None else registry)
    try:
        port = server.bind(address)
        if registry is None:
            load = ModelRegistry.scan if settings.lazy else ModelRegistry.load
            server.adopt(load(settings.model_repo, settings))
    except BaseException:
        await server.abandon()
        raise
    return server, port


def _bind_grpc(server: grpc.aio.Server, address: str, settings: Settings) -> int:
    credentials = security.server_credentials(settings)
    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError:  # a failed bind raises (recent grpcio) or returns port 0 (older)
        port = 0
    if port == 0:
        raise OSError(f"cannot serve gRPC on {address}: {_bind_error(address)} (see --host, --port)")
    return port


def _bind_error(address: str) -> str:
    """Why ``address`` ("host:port") cannot be bound, in the OS's words: gRPC's own error only
    says "Failed to bind", so a plain socket (SO_REUSEADDR, as gRPC sets it) tries it again."""
    host, _, port = address.rpartition(":")
    try:
        infos = socket.getaddrinfo(host.strip("[]") or None, int(port), type=socket.SOCK_STREAM)
    except (OSError, ValueError) as exc:
        return f"cannot resolve the address: {exc}"
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(sockaddr)
                sock.listen()
            except OSError as exc:
                return (exc.strerror or str(exc)).lower()
    return "address in use or not available"
