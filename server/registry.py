"""The model repository: one directory per model, each validated (``model.json`` and the
sha256 of every file), its sessions created and warmed up, one log line per model."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import onnxruntime as ort

from attnserve.contract.kinds import IMAGE_CLASSIFICATION
from attnserve.contract.manifest import MANIFEST_NAME, GraphSpec, Manifest, ManifestError, load_manifest

from .classification import ImageClassifier
from .config import Settings, engine_settings_kwargs
from .errors import InvalidRequest, ModelNotFound, client_message, echo
from .references import ReferenceMismatch, check_references
from .runtime import ProviderError, create_session, cuda_listed, session_provider
from .translation import EngineSettings, TranslationEngine
from .translation.aligner import Aligner

log = logging.getLogger(__name__)

BUILD_HINT = (
    "serve the bundled models with --model-repo models/repo (in a checkout), build them with "
    "`python -m attnserve.export.zoo --out model-repo`, or pass --model-repo DIR"
)


class RepositoryError(RuntimeError):
    """The repository cannot be served (missing, empty, or a bad model without --skip-bad-models)."""


@dataclass
class LoadedModel:
    name: str
    kind: str
    model_dir: Path
    manifest: Manifest
    provider: str  # "cpu" | "cuda": what the sessions really run on
    warmup_s: float
    classifier: ImageClassifier | None = None
    engine: TranslationEngine | None = None
    aligner: Aligner | None = None  # translation: word alignments, when the directory has aligner.onnx
    fingerprint: str = ""  # sha256 of model.json (it holds the sha256 of every file): the version
    users: int = 0  # handlers holding this version (see ModelRegistry.use); a replaced version waits for 0
    references: str = ""  # what the load-time check of verification.npz found (server/references.py)

    @property
    def version(self) -> str:
        return self.fingerprint[:12]

    async def stop_when_unused(self, grace_s: float) -> None:
        """After a hot reload: let the handlers still on this version finish, then stop it."""
        while self.users > 0:
            await asyncio.sleep(0.02)
        await (self.classifier or self.engine).stop(grace_s)


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
    models: dict[str, LoadedModel] = field(default_factory=dict)
    failed: dict[str, FailedModel] = field(default_factory=dict)

    @classmethod
    def load(cls, repo: Path | str, settings: Settings) -> ModelRegistry:
        """Load every model directory of ``repo`` (hidden folders are skipped).

        Raises :class:`RepositoryError` when the repo is missing or holds no servable
        model, and on the first bad model unless ``settings.skip_bad_models``.
        """
        repo = Path(repo)
        if not repo.is_dir():
            raise RepositoryError(f"model repository {repo} does not exist; {BUILD_HINT}")
        registry = cls()
        for model_dir in sorted(p for p in repo.iterdir() if p.is_dir() and not p.name.startswith(".")):
            registry._load_one(model_dir, settings)
        if not registry.models:
            reasons = "; ".join(f.reason for f in registry.failed.values()) or "no model directories"
            raise RepositoryError(f"model repository {repo} has no servable model ({reasons}); {BUILD_HINT}")
        if settings.provider == "auto" and cuda_listed() and any(m.provider == "cpu" for m in registry.models.values()):
            log.warning(
                "provider auto: CUDA is not usable here (no GPU, or its libraries did not load): running on CPU"
            )
        return registry

    def _load_one(self, model_dir: Path, settings: Settings) -> None:
        try:
            manifest = load_manifest(model_dir)
            if manifest.name in self.models:
                raise ManifestError(
                    model_dir / MANIFEST_NAME,
                    "name",
                    f"{manifest.name!r} is already served from {self.models[manifest.name].model_dir}",
                )
            model = load_model(model_dir, manifest, settings)
        except (ManifestError, ProviderError, RepositoryError, ReferenceMismatch) as exc:
            self._fail(model_dir, str(exc), settings)
            return
        except Exception as exc:  # noqa: BLE001 - an engine or session that cannot start: name the model
            self._fail(model_dir, f"{model_dir}: {type(exc).__name__}: {exc}", settings)
            return
        self.models[model.name] = model
        files = ", ".join(f"{n} ({e.get('bytes', 0) / 1e6:.1f} MB)" for n, e in sorted(manifest.files.items()))
        log.info(
            "loaded model %s (%s) provider=%s files=[%s] warm-up %.1f ms; %s",
            model.name,
            model.kind,
            model.provider,
            files,
            model.warmup_s * 1e3,
            model.references,
        )

    @contextlib.contextmanager
    def use(self, name: str, kind: str | None) -> Iterator[LoadedModel]:
        """:meth:`get`, holding the version for the block: a hot reload stops it only after the block."""
        model = self.get(name, kind)
        model.users += 1
        try:
            yield model
        finally:
            model.users -= 1

    def _fail(self, model_dir: Path, reason: str, settings: Settings) -> None:
        if not settings.skip_bad_models:
            raise RepositoryError(f"cannot load model: {reason} (--skip-bad-models serves the others)")
        name = name_of_dir(model_dir)
        self.failed[name] = FailedModel(name, model_dir, reason)
        log.error("model %s NOT_SERVING: %s", name, reason)

    def get(self, name: str, kind: str | None) -> LoadedModel:
        """The model ``name`` of ``kind`` (None: any kind); an empty name picks the only model of that kind."""
        if not name:
            of_kind = [m for m in self.models.values() if kind is None or m.kind == kind]
            what = f"{kind} model" if kind else "model"
            if len(of_kind) == 1:
                return of_kind[0]
            if not of_kind:
                raise ModelNotFound(f"no {what} is served")
            raise InvalidRequest(f"model is required: {what}s served: {', '.join(m.name for m in of_kind)}")
        model = self.models.get(name)
        if model is None:
            if name in self.failed and self.failed[name].unloaded:
                raise ModelNotFound(f"model {echo(name)} is unloaded; load it again with RepositoryModelLoad")
            if name in self.failed:
                raise ModelNotFound(f"model {echo(name)} failed to load: {self.failed[name].public_reason}")
            raise ModelNotFound(f"unknown model {echo(name)}; served: {', '.join(sorted(self.models)) or 'none'}")
        if kind is not None and model.kind != kind:
            article = "an" if model.kind.startswith(tuple("aeiou")) else "a"  # "an image-classification"
            raise InvalidRequest(f"model {echo(name)} is {article} {model.kind} model, not {kind}")
        return model

    def unload(self, name: str) -> LoadedModel:
        """Stop serving ``name`` (KServe's RepositoryModelUnload): new requests get NOT_FOUND; the
        caller stops the returned version once its requests are done (``stop_when_unused``)."""
        model = self.models.pop(name, None)
        if model is None:
            raise ModelNotFound(f"unknown model {echo(name)}; served: {', '.join(sorted(self.models)) or 'none'}")
        self.failed[name] = FailedModel(name, model.model_dir, "unloaded", model.kind, unloaded=True)
        return model

    async def start(self) -> None:
        for model in self.models.values():
            await (model.classifier or model.engine).start()

    async def stop(self, grace_s: float) -> None:
        await asyncio.gather(*((m.classifier or m.engine).stop(grace_s) for m in self.models.values()))


def name_of_dir(model_dir: Path) -> str:
    try:
        return load_manifest(model_dir, verify_files=False).name
    except ManifestError:
        return model_dir.name


def manifest_fingerprint(model_dir: Path) -> str:
    return hashlib.sha256((Path(model_dir) / MANIFEST_NAME).read_bytes()).hexdigest()


def check_graph_inputs(model_dir: Path, role: str, graph: GraphSpec, session: ort.InferenceSession) -> None:
    """The graph's inputs are the ones model.json lists (a swapped or mismatched graph is refused)."""
    actual = [i.name for i in session.get_inputs()]
    if sorted(actual) != sorted(graph.inputs):
        raise ManifestError(
            model_dir / MANIFEST_NAME,
            f"graphs.{role}.inputs",
            f"lists {graph.inputs} but {graph.file} has inputs {actual}",
        )


def load_model(model_dir: Path, manifest: Manifest, settings: Settings) -> LoadedModel:
    """Sessions (one per graph) + classifier or decode engine, warmed up."""
    sessions = {
        role: create_session(model_dir / graph.file, settings.provider, settings.threads)
        for role, graph in manifest.graphs.items()
    }
    for role, graph in manifest.graphs.items():
        check_graph_inputs(model_dir, role, graph, sessions[role])
    # before the engine starts: a model that computes wrong numbers here is never served
    references = check_references(model_dir, manifest, sessions, session_provider(next(iter(sessions.values()))))
    model = _build_model(model_dir, manifest, settings, sessions)
    model.fingerprint = manifest_fingerprint(model_dir)
    model.references = references.summary()
    return model


def _build_model(
    model_dir: Path, manifest: Manifest, settings: Settings, sessions: dict[str, ort.InferenceSession]
) -> LoadedModel:
    provider = session_provider(next(iter(sessions.values())))
    if manifest.kind == IMAGE_CLASSIFICATION:
        classifier = ImageClassifier(manifest, sessions["model"], settings)
        return LoadedModel(manifest.name, manifest.kind, model_dir, manifest, provider, classifier.warmup(), classifier)
    engine_settings = EngineSettings(**engine_settings_kwargs(settings))
    engine = TranslationEngine(model_dir, manifest, sessions["encoder"], sessions["decoder"], engine_settings)
    warmup_s = engine.warmup()
    aligner = Aligner(sessions["aligner"], manifest) if "aligner" in sessions else None
    return LoadedModel(
        manifest.name, manifest.kind, model_dir, manifest, provider, warmup_s, engine=engine, aligner=aligner
    )
