"""The model repository: one directory per model.

At start every directory is *indexed* (:class:`IndexedModel`: ``model.json`` read and checked,
every listed file present at its listed size; no weights read). A model is *loaded* (the
sha256 of every file checked, its sessions created and warmed up, one log line) either at
start (``--load-models eager``, every model) or on its first request (lazy: ``residency.py``
decides when, within the memory budget, and sets :attr:`ModelRegistry.loader`).
``models`` holds the loaded ones, ``index`` every servable directory, ``failed`` the
directories that cannot be served (and the ones unloaded by RepositoryModelUnload)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from attnserve.contract.deadline import Deadline
from attnserve.contract.kinds import IMAGE_CLASSIFICATION
from attnserve.contract.manifest import MANIFEST_NAME, Manifest, ManifestError, load_manifest

from ..shared.config import Settings
from ..shared.errors import InvalidRequest, ModelNotFound, client_message, echo
from ..shared.onnx_sessions import ProviderError, cuda_listed
from ..translation.sessions import model_spec
from .model_loader import LoadedModel, load_checked, log_loaded, manifest_fingerprint, name_of_dir, served_graphs
from .reference_check import ReferenceMismatch

log = logging.getLogger(__name__)

BUILD_HINT = (
    "serve the bundled models with --model-repo models/repo (in a checkout), build them with "
    "`python -m attnserve.export.zoo --out model-repo`, or pass --model-repo DIR"
)


class RepositoryError(RuntimeError):
    """The repository cannot be served (missing, empty, or a bad model without --skip-bad-models)."""


@dataclass(frozen=True)
class IndexedModel:
    """A servable model directory, read and checked at start; its weights are not loaded.

    ``budget_bytes``: what loading it costs in ``--model-memory-bytes``: its files' sizes and,
    for a translation model, the KV cache its engine may reserve (``--max-kv-cache-bytes``,
    else ``--max-tokens-in-flight`` tokens of its cache)."""

    name: str
    kind: str
    model_dir: Path
    manifest: Manifest
    fingerprint: str
    budget_bytes: int

    @property
    def weight_bytes(self) -> int:
        """Bytes of its files, but those of graphs a load opens no session for (:func:`served_graphs`)."""
        served = {graph.file for _, graph in served_graphs(self.manifest)}
        unused = {graph.file for graph in self.manifest.graphs.values()} - served
        return sum(int(e.get("bytes", 0)) for name, e in self.manifest.files.items() if name not in unused)

    @property
    def provider(self) -> str:
        return ""  # known once loaded

    @property
    def version(self) -> str:
        return self.fingerprint[:12]


def index_model(model_dir: Path, settings: Settings) -> IndexedModel:
    """Read and check ``model_dir`` (model.json, every listed file present at its size); no weights
    are read, no sha256 computed (that is the load's). Raises ManifestError naming the file."""
    manifest = load_manifest(model_dir, verify_files=False)
    for fname, entry in manifest.files.items():
        path = model_dir / fname
        if not path.is_file():
            raise ManifestError(path, f"files.{fname}", "listed in model.json but missing")
        size = entry.get("bytes")
        if size is not None and path.stat().st_size != size:
            found = path.stat().st_size
            raise ManifestError(path, f"files.{fname}.bytes", f"expected {size} bytes, found {found} (truncated?)")
    weights = sum(int(e.get("bytes", 0)) for e in manifest.files.values())
    cache = 0
    if manifest.kind != IMAGE_CLASSIFICATION:
        per_token = model_spec(manifest).cache_bytes_per_token
        cache = settings.max_kv_cache_bytes or settings.max_tokens_in_flight * per_token
    fingerprint = manifest_fingerprint(model_dir)
    return IndexedModel(manifest.name, manifest.kind, model_dir, manifest, fingerprint, weights + cache)


@dataclass(frozen=True)
class FailedModel:
    name: str
    model_dir: Path
    reason: str
    kind: str = ""
    unloaded: bool = False  # by RepositoryModelUnload, not a load failure

    @property
    def public_reason(self) -> str:
        """``reason`` as clients see it: paths relative to the model repository, never absolute."""
        repo = self.model_dir.parent
        return client_message(self.reason, (str(repo.resolve()), str(repo.absolute())))


@dataclass
class ModelRegistry:
    models: dict[str, LoadedModel] = field(default_factory=dict)  # loaded
    failed: dict[str, FailedModel] = field(default_factory=dict)
    index: dict[str, IndexedModel] = field(default_factory=dict)  # every servable directory
    # lazy loading (residency.py): load ``name`` within the deadline, or raise a typed error
    loader: Callable[[str, Deadline | None], Awaitable[LoadedModel]] | None = None
    last_used: dict[str, float] = field(default_factory=dict)  # name -> time.monotonic() of its last use

    @classmethod
    def scan(cls, repo: Path | str, settings: Settings) -> ModelRegistry:
        """Index every model directory of ``repo`` (hidden folders are skipped); nothing is loaded.

        Raises :class:`RepositoryError` when the repo is missing or holds no servable
        model, and on the first bad model unless ``settings.skip_bad_models``.
        """
        repo = Path(repo)
        if not repo.is_dir():
            raise RepositoryError(f"model repository {repo} does not exist; {BUILD_HINT}")
        registry = cls()
        for model_dir in sorted(p for p in repo.iterdir() if p.is_dir() and not p.name.startswith(".")):
            registry._index_one(model_dir, settings)
        if not registry.index:
            reasons = "; ".join(f.reason for f in registry.failed.values()) or "no model directories"
            raise RepositoryError(f"model repository {repo} has no servable model ({reasons}); {BUILD_HINT}")
        return registry

    @classmethod
    def load(cls, repo: Path | str, settings: Settings) -> ModelRegistry:
        """:meth:`scan` ``repo``, then load every indexed model (``--load-models eager``)."""
        registry = cls.scan(repo, settings)
        for entry in list(registry.index.values()):
            registry.load_indexed(entry, settings)
        if not registry.models:
            reasons = "; ".join(f.reason for f in registry.failed.values())
            raise RepositoryError(f"model repository {repo} has no servable model ({reasons}); {BUILD_HINT}")
        registry.warn_cpu_fallback(settings)
        return registry

    def warn_cpu_fallback(self, settings: Settings) -> None:
        if settings.provider == "auto" and cuda_listed() and any(m.provider == "cpu" for m in self.models.values()):
            log.warning(
                "provider auto: CUDA is not usable here (no GPU, or its libraries did not load): running on CPU"
            )

    def _index_one(self, model_dir: Path, settings: Settings) -> None:
        try:
            entry = index_model(model_dir, settings)
            if entry.name in self.index:
                raise ManifestError(
                    model_dir / MANIFEST_NAME,
                    "name",
                    f"{entry.name!r} is already served from {self.index[entry.name].model_dir}",
                )
        except ManifestError as exc:
            self._fail(model_dir, str(exc), settings)
            return
        self.index[entry.name] = entry

    def load_indexed(self, entry: IndexedModel, settings: Settings) -> None:
        """Load an indexed model at start (eager, pinned); a failure is the repository's (see _fail)."""
        try:
            model = load_checked(entry.model_dir, settings)
        except (ManifestError, ProviderError, RepositoryError, ReferenceMismatch) as exc:
            self.index.pop(entry.name, None)
            self._fail(entry.model_dir, str(exc), settings)
            return
        except Exception as exc:  # noqa: BLE001 - an engine or session that cannot start: name the model
            self.index.pop(entry.name, None)
            self._fail(entry.model_dir, f"{entry.model_dir}: {type(exc).__name__}: {exc}", settings)
            return
        self.models[model.name] = model
        log_loaded(model)

    @contextlib.asynccontextmanager
    async def use(
        self,
        name: str,
        kind: str | None,
        deadline: Deadline | None = None,
        waited: Callable[[float], None] | None = None,
    ) -> AsyncIterator[LoadedModel]:
        """The model ``name`` of ``kind`` (:meth:`resolve`), held for the block: a hot reload stops
        it, and the memory budget unloads it, only after the block. A model indexed but not loaded
        is loaded first (:attr:`loader`) within ``deadline`` (None: none), and
        ``waited`` is called with the seconds that took."""
        name = self.resolve(name, kind)
        model = self.models.get(name)
        if model is not None:
            model.users += 1
        elif self.loader is None:
            raise ModelNotFound(f"model {echo(name)} is not loaded")
        else:
            started = time.perf_counter()
            model = await self.loader(name, deadline)  # held for us already
            if waited is not None:
                waited(time.perf_counter() - started)
        self.last_used[name] = time.monotonic()
        try:
            yield model
        finally:
            model.users -= 1
            self.last_used[name] = time.monotonic()

    def _fail(self, model_dir: Path, reason: str, settings: Settings) -> None:
        if not settings.skip_bad_models:
            raise RepositoryError(f"cannot load model: {reason} (--skip-bad-models serves the others)")
        name = name_of_dir(model_dir)
        self.failed[name] = FailedModel(name, model_dir, reason)
        log.error("model %s NOT_SERVING: %s", name, reason)

    def kind_of(self, name: str) -> str:
        model = self.models.get(name) or self.index.get(name)
        return model.kind if model is not None else ""

    def served(self) -> list[str]:
        """Names of every model a request may name: loaded or indexed."""
        return sorted({*self.models, *self.index})

    def resolve(self, name: str, kind: str | None) -> str:
        """The served model ``name`` of ``kind`` (None: any kind), loaded or not; an empty name picks
        the only model of that kind. NOT_FOUND (unknown, unloaded, failed) or INVALID_ARGUMENT."""
        if not name:
            of_kind = [n for n in self.served() if kind is None or self.kind_of(n) == kind]
            what = f"{kind} model" if kind else "model"
            if len(of_kind) == 1:
                return of_kind[0]
            if not of_kind:
                raise ModelNotFound(f"no {what} is served")
            raise InvalidRequest(f"model is required: {what}s served: {', '.join(of_kind)}")
        if name not in self.models and name not in self.index:
            if name in self.failed and self.failed[name].unloaded:
                raise ModelNotFound(f"model {echo(name)} is unloaded; load it again with RepositoryModelLoad")
            if name in self.failed:
                raise ModelNotFound(f"model {echo(name)} failed to load: {self.failed[name].public_reason}")
            raise ModelNotFound(f"unknown model {echo(name)}; served: {', '.join(self.served()) or 'none'}")
        found = self.kind_of(name)
        if kind is not None and found != kind:
            article = "an" if found.startswith(tuple("aeiou")) else "a"  # "an image-classification"
            raise InvalidRequest(f"model {echo(name)} is {article} {found} model, not {kind}")
        return name

    def get(self, name: str, kind: str | None) -> LoadedModel | IndexedModel:
        """The model ``name`` of ``kind``: loaded, else its index entry (what describes it without loading)."""
        name = self.resolve(name, kind)
        return self.models.get(name) or self.index[name]

    def unload(self, name: str) -> LoadedModel | None:
        """Stop serving ``name`` (KServe's RepositoryModelUnload): new requests get NOT_FOUND until
        it is loaded again; the caller stops the returned version (None: it was not loaded) once
        its requests are done (``stop_when_unused``)."""
        if name not in self.models and name not in self.index:
            raise ModelNotFound(f"unknown model {echo(name)}; served: {', '.join(self.served()) or 'none'}")
        entry = self.index.pop(name, None)
        model = self.models.pop(name, None)
        where = (model or entry).model_dir
        self.failed[name] = FailedModel(name, where, "unloaded", (model or entry).kind, unloaded=True)
        return model

    async def start(self) -> None:
        for model in self.models.values():
            await (model.classifier or model.engine).start()

    async def stop(self, grace_s: float) -> None:
        await asyncio.gather(*((m.classifier or m.engine).stop(grace_s) for m in self.models.values()))
