"""The model repository's side of the server: which models are served and loaded, hot reload
(SIGHUP, Reload), KServe's repository operations (index, load, unload), and the lazy loading of
``residency.py``. A part of :class:`~.app.AttnServer`, which holds the attributes used here."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from grpc_health.v1 import health_pb2
from grpc_health.v1.health import aio as health_aio

from attnserve.contract.manifest import MANIFEST_NAME

from ..runtime.registry import LoadedModel, ModelRegistry, name_of_dir
from ..runtime.reload import ADDED, FAILED, RELOADED, ReloadOutcome
from ..shared.errors import InvalidRequest, ShuttingDown, echo

log = logging.getLogger(__name__)


class ModelHealth(health_aio.HealthServicer):
    """grpc.health.v1, whose Check and Watch of a service first ask ``refresh`` whether its status
    changed unseen: a lazily served model whose failed load's files were fixed is SERVING when a
    probe asks, as KServe's ModelReady says, not only once a request has loaded it."""

    def __init__(self, refresh: Callable[[str], Awaitable[None]]) -> None:
        super().__init__()
        self._refresh = refresh

    async def Check(self, request, context):  # noqa: N802 - grpc's method name
        await self._refresh(request.service)
        return await super().Check(request, context)

    async def Watch(self, request, context):  # noqa: N802 - grpc's method name
        await self._refresh(request.service)
        return await super().Watch(request, context)


class RepositoryControl:
    """Mixed into AttnServer: ``registry``, ``settings``, ``metrics``, ``residency``, ``reloader``,
    ``translation``, ``health`` and ``draining`` are the server's."""

    def adopt(self, loaded: ModelRegistry) -> None:
        """Models indexed or loaded after the ports were bound, into the registry the services and
        the reloader hold; lazily served, the budget is checked and the pinned models loaded."""
        self.registry.index.update(loaded.index)
        self.registry.failed.update(loaded.failed)
        if self.residency is not None:
            self.residency.check_budget()
            self.residency.load_pinned()
            self.registry.warn_cpu_fallback(self.settings)
        self.registry.models.update(loaded.models)
        for model in self.registry.models.values():
            self._watch(model)
            if self.residency is not None:
                self.residency.adopt(model)
            else:
                self.metrics.model_loads.labels(model.name, "ok").inc()
        for name, failed in self.registry.failed.items():  # --skip-bad-models
            if not failed.unloaded:
                self.metrics.model_loads.labels(name, "failed").inc()
        log.info(
            "model repository: %d model(s) indexed, %d loaded (%s)",
            len(self.registry.index),
            len(self.registry.models),
            "lazy: a model loads on its first request" if self.residency is not None else "eager",
        )

    def model_state(self, name: str) -> tuple[str, str]:
        """(KServe repository index state, reason) of an indexed model."""
        if self.residency is not None:
            return self.residency.state(name)
        return ("READY", "") if name in self.registry.models else ("UNAVAILABLE", "not loaded")

    # ---------------------------------------------------------------- hot reload

    def _watch(self, model: LoadedModel) -> None:
        if model.classifier is not None:
            self.metrics.watch_classifier(model.name, model.classifier)
        else:
            self.metrics.watch_engine(model.name, model.engine)

    async def _loaded(self, model: LoadedModel) -> None:
        """A model loaded on demand (residency.py)."""
        self._watch(model)

    async def _model_health(self, name: str, serving: bool) -> None:
        """A model loaded on demand is SERVING; one whose load failed NOT_SERVING until it loads."""
        if not self.draining:
            status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
            await self.health.set(name, status)

    async def _refresh_health(self, name: str) -> None:
        """A model reported NOT_SERVING for a failed load whose files changed since (or a reload
        forgot it) is SERVING: its next request loads it."""
        if self.residency is not None and not self.draining and self.residency.recovered(name):
            await self._model_health(name, True)

    async def _swapped(self, model: LoadedModel) -> None:
        self._watch(model)
        if self.residency is not None:
            self.residency.adopt(model)
        if not self.draining:
            await self.health.set(model.name, health_pb2.HealthCheckResponse.SERVING)

    async def reload(self, names: list[str] | tuple[str, ...] = ()) -> list[ReloadOutcome]:
        """Load new versions of the model directories (all, or ``names``) and swap them in (SIGHUP, Reload)."""
        if self.draining:
            raise ShuttingDown("server is shutting down; nothing to reload")
        outcomes = await self.reloader.reload(names)
        for o in outcomes:
            if o.action == RELOADED:  # a new version: the old one's translations go
                self.translation.cache.forget(o.name)
            # a new version loaded is a load as at start (lazily served: it loads on demand, counted
            # there); a failed one is one whatever the mode: "any failed load" alerts on a bad deploy
            if o.action == FAILED:
                self.metrics.model_loads.labels(o.name, "failed").inc()
            elif o.action in (RELOADED, ADDED) and self.residency is None:
                self.metrics.model_loads.labels(o.name, "ok").inc()
            if o.action == FAILED and o.name not in self.registry.models and not self.draining:
                await self.health.set(o.name, health_pb2.HealthCheckResponse.NOT_SERVING)
            elif o.action == ADDED and o.name in self.registry.index and not self.draining:
                # lazily served: indexed is served (its first request loads it), as at start
                await self.health.set(o.name, health_pb2.HealthCheckResponse.SERVING)
        return outcomes

    async def watch_repository(self) -> None:
        """Every ``--repository-poll-seconds``: a model directory renamed into the repository (a new
        name, or a replaced one: its model.json is another file) is reloaded, so models that
        ``attnserve-export pull`` installs are served without a restart. Directories are compared by
        model.json's inode and mtime only; hidden ones (``.name.partial-*``, being written) are skipped."""
        interval = self.settings.repository_poll_seconds
        repo = Path(self.settings.model_repo)
        stamps = repository_stamps(repo)
        failed: dict[Path, tuple] = {}  # a directory whose reload failed -> its files' stamp then
        while not self.draining:
            await asyncio.sleep(interval)
            now = repository_stamps(repo)
            changed = {path for path, stamp in now.items() if stamps.get(path) != stamp}
            # a folder copied file by file failed while its model.json was there before the rest:
            # it is tried again once any of its files changes, and not at every poll while none does
            changed |= {path for path, files in failed.items() if path in now and files_stamp(path) != files}
            stamps = now
            if not changed or self.draining:
                continue
            names = {name_of_dir(path): path for path in sorted(changed)}
            log.info("model repository: %s appeared or changed; reloading", ", ".join(names))
            with contextlib.suppress(ShuttingDown):
                for outcome in await self.reload(list(names)):
                    path = names.get(outcome.name)
                    if path is not None and outcome.action == FAILED:
                        failed[path] = files_stamp(path)
                    elif path is not None:
                        failed.pop(path, None)

    async def load_model(self, name: str) -> None:
        """KServe's RepositoryModelLoad: load (or reload) one model directory of the repository."""
        (outcome,) = await self.reload([name])
        if outcome.action == FAILED:
            raise InvalidRequest(f"model {echo(name)} did not load: {outcome.error}")
        if name not in self.registry.models and self.residency is not None:  # indexed again: load it now
            async with self.registry.use(name, None):
                pass

    async def unload_model(self, name: str) -> None:
        """KServe's RepositoryModelUnload: new requests get NOT_FOUND; running ones finish first."""
        if self.draining:
            raise ShuttingDown("server is shutting down; nothing to unload")
        model = self.registry.unload(name)
        self.translation.cache.forget(name)
        if self.residency is not None:
            self.residency.unloaded(name)
        await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        if model is not None:
            await model.stop_when_unused(max(self.settings.grace_seconds, 1.0))


def repository_stamps(repo: Path) -> dict[Path, tuple[int, int]]:
    """model.json's (inode, mtime) of every visible model directory of ``repo``."""
    stamps = {}
    try:
        entries = list(os.scandir(repo))
    except OSError:  # a repository not there (yet): nothing to serve from it
        return stamps
    for entry in entries:
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        with contextlib.suppress(OSError):
            st = os.stat(Path(entry.path) / MANIFEST_NAME)
            stamps[Path(entry.path)] = (st.st_ino, st.st_mtime_ns)
    return stamps


def files_stamp(model_dir: Path) -> tuple:
    """Every file of ``model_dir`` by name, size and mtime: whether a copy into it went on."""
    try:
        return tuple(sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(model_dir)))
    except OSError:
        return ()
