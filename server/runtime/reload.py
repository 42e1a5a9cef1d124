"""Hot reload: load a new version of model directories beside the old one and swap atomically.

A version is the sha256 of ``model.json``, which holds the sha256 of every file of the
directory, so a new export is a new version and an untouched directory is skipped.
The new version is loaded and warmed up off the event loop while the old one keeps
serving; the swap is one dict assignment on the event loop, so every request sees
either the old or the new version, never neither. Handlers hold the version they
started on (:meth:`ModelRegistry.use`), so requests in flight finish on it; it is
stopped once the last of them is done. A version that fails to load changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from attnserve.contract.manifest import ManifestError

from ..shared.config import Settings
from ..shared.errors import echo
from .model_loader import LoadedModel, load_checked, manifest_fingerprint, name_of_dir
from .reference_check import ReferenceMismatch
from .registry import FailedModel, ModelRegistry, index_model

log = logging.getLogger(__name__)

UNCHANGED, RELOADED, ADDED, FAILED = "unchanged", "reloaded", "added", "failed"


@dataclass(frozen=True)
class ReloadOutcome:
    name: str
    action: str  # UNCHANGED | RELOADED | ADDED | FAILED
    version: str = ""
    error: str = ""


class Reloader:
    """Serialises reloads of one registry; ``on_swap`` runs after each new version is in place."""

    def __init__(
        self, registry: ModelRegistry, settings: Settings, on_swap: Callable[[LoadedModel], Awaitable[None]]
    ) -> None:
        self.registry = registry
        self.settings = settings
        self.on_swap = on_swap
        self.on_indexed: Callable[[str], None] | None = None  # lazily served: a directory indexed again
        self._lock = asyncio.Lock()
        self._retiring: set[asyncio.Task] = set()

    async def reload(self, names: Sequence[str] = ()) -> list[ReloadOutcome]:
        async with self._lock:
            return await self._reload(set(names))

    async def _reload(self, wanted: set[str]) -> list[ReloadOutcome]:
        repo = Path(self.settings.model_repo)
        dirs = sorted(p for p in repo.iterdir() if p.is_dir() and not p.name.startswith(".")) if repo.is_dir() else []
        outcomes, found = [], set()
        by_name: dict[str, list[Path]] = {}
        for model_dir in dirs:
            by_name.setdefault(name_of_dir(model_dir), []).append(model_dir)
        for name, named in by_name.items():
            if wanted and name not in wanted:
                continue
            found.add(name)
            model_dir, *others = self._one_of(name, named)
            outcomes.append(await self._reload_one(name, model_dir))
            outcomes += [self._duplicate(name, other, model_dir) for other in others]
        for name in sorted(wanted - found):
            outcomes.append(ReloadOutcome(name, FAILED, error=f"no model directory named {echo(name)} in {repo}"))
        log.info("reload: %s", ", ".join(f"{o.name} {o.action}" for o in outcomes) or "no model directories")
        return outcomes

    def _one_of(self, name: str, named: list[Path]) -> list[Path]:
        """The directories whose model.json names ``name``, the one served first (a second copy
        beside it would otherwise swap in and out at every reload), else the first by name."""
        served = self.registry.index.get(name)
        return sorted(named, key=lambda d: (served is None or d != served.model_dir, d.name))

    def _duplicate(self, name: str, model_dir: Path, served: Path) -> ReloadOutcome:
        error = f"{model_dir / 'model.json'}: name {name!r} is already served from {served}; give it another name"
        log.error("reload of model %s from %s refused: %s", name, model_dir, error)
        return ReloadOutcome(name, FAILED, error=error)

    async def _reload_one(self, name: str, model_dir: Path) -> ReloadOutcome:
        current = self.registry.models.get(name)
        try:
            fingerprint = manifest_fingerprint(model_dir)
        except OSError as exc:
            return ReloadOutcome(name, FAILED, error=f"{model_dir}: {exc.strerror or exc}")
        if current is not None and current.fingerprint == fingerprint:
            return ReloadOutcome(name, UNCHANGED, current.version)
        if current is None and self.registry.loader is not None:  # lazily served: index it, load on use
            return self._index_one(name, model_dir, fingerprint)
        loop = asyncio.get_running_loop()
        try:
            new = await loop.run_in_executor(None, load_checked, model_dir, self.settings)
            if new.name != name:
                raise ManifestError(model_dir / "model.json", "name", f"changed from {name!r} to {new.name!r}")
            await (new.classifier or new.engine).start()
        except Exception as exc:  # noqa: BLE001 - a bad new version leaves the old one serving
            named = isinstance(exc, (ManifestError, ReferenceMismatch))  # their messages name the directory
            reason = str(exc) if named else f"{model_dir}: {type(exc).__name__}: {exc}"
            kept = "old version still served" if current else "not served"
            log.error("reload of model %s failed, %s: %s", name, kept, reason)
            if current is None:
                self.registry.failed[name] = FailedModel(name, model_dir, reason)
            return ReloadOutcome(name, FAILED, current.version if current else "", reason)
        self.registry.models[name] = new  # the swap: one assignment on the event loop
        self.registry.failed.pop(name, None)
        with contextlib.suppress(ManifestError, OSError):  # loaded just now: its index entry follows
            self.registry.index[name] = index_model(model_dir, self.settings)
        await self.on_swap(new)
        log.info("model %s: version %s now served (warm-up %.1f ms)", name, new.version, new.warmup_s * 1e3)
        if current is None:
            return ReloadOutcome(name, ADDED, new.version)
        task = asyncio.ensure_future(current.stop_when_unused(max(self.settings.grace_seconds, 1.0)))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
        return ReloadOutcome(name, RELOADED, new.version)

    def _index_one(self, name: str, model_dir: Path, fingerprint: str) -> ReloadOutcome:
        """A directory not loaded now, lazily served: checked and indexed again; its next request loads it."""
        previous = self.registry.index.get(name)
        if self.on_indexed is not None:  # a reload asks for a new try: a failed load is retried at once
            self.on_indexed(name)
        if previous is not None and previous.fingerprint == fingerprint and name not in self.registry.failed:
            return ReloadOutcome(name, UNCHANGED, previous.version)
        try:
            entry = index_model(model_dir, self.settings)
            if entry.name != name:
                raise ManifestError(model_dir / "model.json", "name", f"changed from {name!r} to {entry.name!r}")
        except (ManifestError, OSError) as exc:
            log.error("reload of model %s failed: %s", name, exc)
            self.registry.index.pop(name, None)
            self.registry.failed[name] = FailedModel(name, model_dir, str(exc))
            return ReloadOutcome(name, FAILED, error=str(exc))
        self.registry.index[name] = entry
        self.registry.failed.pop(name, None)
        log.info("model %s: version %s indexed; it loads on its next request", name, entry.version)
        return ReloadOutcome(name, RELOADED if previous is not None else ADDED, entry.version)

    async def wait_retired(self) -> None:
        """Until every replaced version has stopped (tests, shutdown)."""
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)
