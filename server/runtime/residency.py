"""Which models are loaded, when the repository is served lazily (``--load-models lazy``, or
auto with a budget): a model is loaded on its first request and unloaded when the memory
budget needs its room.

- One load per model: the first request starts it (a task on the event loop; the sessions
  are created and warmed up in a thread, which onnxruntime runs mostly without the GIL), and
  every request for the model meanwhile awaits the same task, each within its own deadline
  (a request that gives up does not cancel the load others wait for).
- The budget: at most ``--max-loaded-models`` models and ``--model-memory-bytes`` bytes
  (each model's :attr:`~.registry.IndexedModel.budget_bytes`: files plus KV-cache budget),
  counting loads under way. A load first checks the model's files (:func:`~.model_loader.check_files`:
  model.json, each file there, readable, its size and sha256), so a broken directory unloads
  nothing. Then it makes room by unloading the least recently used *idle* model; a model with
  requests in flight (``LoadedModel.users``), one that requests wait for, a pinned model, and one
  used (or loaded) less than ``--min-resident-seconds`` ago are never unloaded. With no room to
  make, the load waits until a model becomes idle and old enough (it is given up once no request
  waits for it any more); a request whose deadline passes before the models in the way are old
  enough is answered RESOURCE_EXHAUSTED at once. The minimum keeps one client's rotation among
  more models than the budget holds from evicting the models others keep using on every request
  (each of theirs then paid a load): the rotation waits for room instead, and loads at most
  (loaded models / the minimum) a second.
- Loads take room in the order they began to wait for it, and none waits on a model in steady use
  for ever: once the first in line has waited ``--min-resident-seconds``, the least recently used
  model in its way that has been loaded that long is *drained*: it takes no new request (those
  wait, within their deadlines, for its next load, in line behind) and is unloaded once its
  requests in flight finish. Two models in steady use under a budget of one so take turns, each
  loaded at least the minimum before the other's load drains it.
- A failed load answers UNAVAILABLE with its reason; what follows is ``load_failures.py``'s: the
  model is refused at once, unloading nothing, while its files are unchanged (a backoff, then only
  into free room), and tried at once when they change. The way EasyNMT, Ray Serve's model
  multiplexing and Triton's explicit model control keep many models within one process's memory.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from attnserve.contract.deadline import Deadline
from attnserve.contract.manifest import ManifestError

from ..shared.config import Settings
from ..shared.errors import DeadlineExceeded, ModelUnavailable, echo
from ..shared.metrics import Metrics
from .budget import Room
from .load_failures import LoadFailure, LoadFailures, files_now
from .model_loader import LoadedModel, check_files, load_checked, log_loaded
from .registry import IndexedModel, ModelRegistry

log = logging.getLogger(__name__)

ROOM_POLL_S = 0.01  # how often a load waiting for room looks for an idle model again
LOADING, READY, UNAVAILABLE = "LOADING", "READY", "UNAVAILABLE"


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None


_MALLOC_TRIM = _malloc_trim()


def release_memory() -> None:
    """Free an unloaded model's memory now and return it to the system: the engine's objects sit
    in reference cycles (a collection frees them), and glibc keeps the freed heap for reuse unless
    ``malloc_trim`` gives it back. Without both, 24 pairs served in turn under a budget of 4
    models held 480 MiB of RSS, as much as all 24 loaded (docs/operations.md)."""
    gc.collect()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


async def _no_health(name: str, serving: bool) -> None:
    return None


class _NoWaiters(Exception):
    """A load waiting for room that no request waits for any more."""


class Residency:
    """Loads and unloads the models of a lazily served registry (see the module docstring)."""

    def __init__(
        self,
        registry: ModelRegistry,
        settings: Settings,
        metrics: Metrics,
        on_loaded: Callable[[LoadedModel], Awaitable[None]],
        on_unloaded: Callable[[str], None],
    ) -> None:
        self.registry, self.settings, self.metrics = registry, settings, metrics
        self.on_loaded, self.on_unloaded = on_loaded, on_unloaded
        self.on_health: Callable[[str, bool], Awaitable[None]] = _no_health  # the model's health: SERVING or not
        self.room = Room(settings, registry)
        self.reserved = self.room.reserved  # loaded, loading or draining -> budget bytes
        self.failures = LoadFailures(settings, metrics)
        self._loads: dict[str, asyncio.Task] = {}
        self._stopping: set[asyncio.Task] = set()
        self._verified: dict[Path, tuple] = {}  # directories hashed by an earlier load (check_files)
        registry.loader = self.acquire

    # ------------------------------------------------------------------ at start

    def check_budget(self) -> None:
        """The budget can hold the largest model and the pinned ones; RepositoryError otherwise."""
        self.room.check()

    def load_pinned(self) -> None:
        """Load the pinned models now (sync, at start, like an eager server)."""
        for name in sorted(self.room.pinned):
            self.registry.load_indexed(self.registry.index[name], self.settings)
            if name in self.registry.models:
                self.reserved[name] = self.registry.index[name].budget_bytes

    def adopt(self, model: LoadedModel) -> None:
        """A model loaded at start (pinned) or by a hot reload: it counts against the budget."""
        entry = self.registry.index.get(model.name)
        self.reserved[model.name] = entry.budget_bytes if entry else 0
        self.room.loaded_at[model.name] = time.monotonic()
        self._record_loaded(model.name, 0.0)

    # ------------------------------------------------------------------ requests

    def state(self, name: str) -> tuple[str, str]:
        """(KServe index state, reason) of an indexed model."""
        if name in self.registry.models:
            return READY, ""
        if name in self.room.draining:
            return UNAVAILABLE, "draining: unloaded for another model's load once its requests finish"
        if name in self._loads:
            return LOADING, "loading"
        failure = self._failure(name)
        if failure is not None:
            return UNAVAILABLE, failure.message(name)
        return UNAVAILABLE, "not loaded: loads on its first request"

    def failing(self, name: str) -> bool:
        """Its last load failed and its files are unchanged since (UNAVAILABLE until a reload). Every
        readiness answer asks, so a model whose files were fixed reads ready before a request tries it."""
        return self._failure(name) is not None

    def _failure(self, name: str) -> LoadFailure | None:
        return self.failures.current(name, entry.model_dir if (entry := self.registry.index.get(name)) else None)

    def recovered(self, name: str) -> bool:
        """Reported NOT_SERVING for a failed load and failing no more: the caller reports it SERVING."""
        return name in self.registry.index and self.failures.recovered(name, self.registry.index[name].model_dir)

    async def acquire(self, name: str, deadline: Deadline | None) -> LoadedModel:
        """The model ``name`` loaded and held (``users`` counted) for the caller, which releases it.

        ``deadline``: None for none. Raises
        ModelUnavailable (a failed load), DeadlineExceeded (no load in time)."""
        entry = self.registry.index.get(name)
        failure = None if entry is None else self.failures.current(name, entry.model_dir)
        if failure is not None and name not in self._loads and (failure.waiting() or not self.room.free(entry)):
            raise ModelUnavailable(failure.message(name))
        if deadline is not None and name not in self.reserved and entry is not None:
            self.room.refuse_if_no_room_in_time(entry, deadline)
        task = self._loads.get(name)
        if task is None or task.done():  # a finished one is popped by its done callback, soon
            task = asyncio.ensure_future(self._load(name))
            self._loads[name] = task
            task.add_done_callback(lambda t: self._done(name, t))
        waiters = self.room.waiters
        waiters[name] = waiters.get(name, 0) + 1
        try:
            remaining = None if deadline is None else deadline.remaining()
            try:
                await asyncio.wait_for(asyncio.shield(task), remaining)
            except asyncio.TimeoutError:
                raise DeadlineExceeded(deadline.message if deadline is not None else "load timed out") from None
            model = self.registry.models.get(name)
            if model is None:  # unloaded by RepositoryModelUnload meanwhile
                raise ModelUnavailable(f"model {echo(name)} was unloaded while this request waited for it")
            model.users += 1  # before the waiter count drops: never a moment it could be chosen to unload
            return model
        finally:
            waiters[name] -= 1

    def _done(self, name: str, task: asyncio.Task) -> None:
        if self._loads.get(name) is task:  # not a newer load of the same model
            del self._loads[name]
        if not task.cancelled():
            task.exception()  # retrieved: the waiters got it, or none was left (_NoWaiters)

    # ------------------------------------------------------------------- loading

    async def _load(self, name: str) -> None:
        entry = self.registry.index[name]
        while name in self.room.draining:  # its previous load still finishes requests, in its room
            self._check_waited_for(name)
            await asyncio.sleep(ROOM_POLL_S)
        files = files_now(entry.model_dir)
        loop = asyncio.get_running_loop()
        try:  # before any model is unloaded for it
            await loop.run_in_executor(None, check_files, entry.model_dir, self._verified)
        except Exception as exc:  # noqa: BLE001 - the model's, answered UNAVAILABLE
            raise await self._failed(name, entry, exc, files) from None
        await self._make_room(entry)
        started = time.perf_counter()
        try:
            model = await loop.run_in_executor(None, load_checked, entry.model_dir, self.settings, self._verified)
            if model.name != name:
                raise ManifestError(entry.model_dir / "model.json", "name", f"changed from {name!r} to {model.name!r}")
            await (model.classifier or model.engine).start()
        except Exception as exc:  # noqa: BLE001 - any load failure is the model's, answered UNAVAILABLE
            self.reserved.pop(name, None)
            raise await self._failed(name, entry, exc, files) from None
        seconds = time.perf_counter() - started
        if name not in self.registry.index:  # unloaded by RepositoryModelUnload while it loaded
            self.reserved.pop(name, None)
            await (model.classifier or model.engine).stop(0.0)
            raise ModelUnavailable(f"model {echo(name)} was unloaded while it loaded")
        self.failures.forget(name, reported=True)
        self.registry.models[name] = model
        self.registry.last_used[name] = self.room.loaded_at[name] = time.monotonic()
        self._record_loaded(name, seconds)
        log_loaded(model, seconds)
        await self.on_loaded(model)
        await self.on_health(name, True)

    async def _failed(self, name: str, entry: IndexedModel, exc: Exception, files: tuple | None) -> Exception:
        failed = self.failures.record(name, entry.model_dir, exc, files)
        await self.on_health(name, False)
        return failed

    def _record_loaded(self, name: str, seconds: float) -> None:
        self.metrics.model_loads.labels(name, "ok").inc()
        self.metrics.model_load_seconds.labels(name).observe(seconds)
        self.metrics.loaded_model_bytes.labels(name).set(self.reserved.get(name, 0))

    def forget_failure(self, name: str) -> None:
        """After a reload of ``name``'s directory: its next request tries to load it at once."""
        self.failures.forget(name)

    def _check_waited_for(self, name: str) -> None:
        if not self.room.waiters.get(name):
            raise _NoWaiters(name)

    async def _make_room(self, entry: IndexedModel) -> None:
        """Reserve ``entry``'s room in line behind the loads that began to wait before it: unload the
        least recently used idle model, or drain one in steady use once this load has waited
        ``--min-resident-seconds`` first in line. A retry of the files a load failed with takes only
        free room (``load_failures.py``)."""
        name, room = entry.name, self.room
        failure = self.failures.get(name)
        if failure is not None and not room.free(entry):
            raise ModelUnavailable(failure.message(name))
        room.queue.append(name)
        first = time.monotonic()  # when it came first in line
        try:
            while room.queue[0] != name or not room.fits(entry):
                if room.queue[0] != name:
                    first = time.monotonic()
                elif (victim := room.idlest()) is not None:
                    self.unload(victim, evicted=True)
                    continue
                elif not room.draining and time.monotonic() - first >= self.settings.min_resident_seconds:
                    self._drain(room.to_drain(), name, time.monotonic() - first)
                self._check_waited_for(name)
                await asyncio.sleep(ROOM_POLL_S)
        finally:
            room.queue.remove(name)
        self.reserved[name] = entry.budget_bytes

    def _drain(self, name: str | None, waiting: str, waited: float) -> None:
        """``name`` takes no new request (they wait for its next load) and leaves the budget once
        its requests in flight finish (:meth:`_retire`), for ``waiting``'s load."""
        if name is None:  # none loaded long enough yet
            return
        model = self.registry.models.pop(name)
        self.room.draining.add(name)
        self.metrics.model_evictions.labels(name).inc()
        log.info(
            "model %s drains to make room for model %s, whose load has waited %.1f s: it is unloaded once its "
            "%d request(s) in flight finish; its new requests wait for their turn",
            name,
            waiting,
            waited,
            model.users,
        )
        self._retire_later(model)

    def unload(self, name: str, evicted: bool = False) -> None:
        """Drop a loaded model from the registry and the budget; it stops once its requests are done."""
        model = self.registry.models.pop(name, None)
        self.reserved.pop(name, None)
        if model is None:
            return
        if evicted:
            self.metrics.model_evictions.labels(name).inc()
            log.info("model %s unloaded to make room (idle, least recently used)", name)
        self.metrics.loaded_model_bytes.labels(name).set(0)
        self.on_unloaded(name)
        self._retire_later(model)

    def _retire_later(self, model: LoadedModel) -> None:
        task = asyncio.ensure_future(self._retire(model.name, model))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def _retire(self, name: str, model: LoadedModel) -> None:
        """Stop ``model`` once its requests are done, then give its memory back to the system; a
        drained model leaves the budget only then."""
        try:
            await model.stop_when_unused(max(self.settings.grace_seconds, 1.0))
            del model
            await asyncio.get_running_loop().run_in_executor(None, release_memory)
        finally:
            if name in self.room.draining:
                self.reserved.pop(name, None)
                self.room.draining.discard(name)
                self.metrics.loaded_model_bytes.labels(name).set(0)
                self.on_unloaded(name)

    def unloaded(self, name: str) -> None:
        """``name`` was unloaded by RepositoryModelUnload (the registry dropped it): free its room."""
        self.reserved.pop(name, None)
        self.failures.forget(name, reported=True)
        self.metrics.loaded_model_bytes.labels(name).set(0)
        self.on_unloaded(name)

    async def wait_stopped(self) -> None:
        """Until every unloaded model's engine has stopped (shutdown, tests)."""
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)
        for task in list(self._loads.values()):
            task.cancel()
