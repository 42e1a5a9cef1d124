"""Loading one model directory: its files checked, a session per graph it serves with, each
graph's inputs compared with model.json, its reference outputs checked, and the classifier or
decode engine built and warmed up. The registry (``registry.py``) decides which directories are
served; this module makes one of them a :class:`LoadedModel`."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnxruntime as ort

from attnserve.contract.kinds import IMAGE_CLASSIFICATION
from attnserve.contract.manifest import (
    MANIFEST_NAME,
    GraphSpec,
    Manifest,
    ManifestError,
    load_manifest,
    verify_manifest_files,
)

from ..images.classifier import ImageClassifier
from ..shared.config import Settings
from ..shared.onnx_sessions import create_session, session_provider
from ..shared.remote_sessions import RemoteSession, host_address
from ..translation import EngineSettings, TranslationEngine
from ..translation.aligner import Aligner
from ..translation.sessions import cuda_graph_decoder, keeps_step_attention, uses_cuda_graphs
from .reference_check import check_references

log = logging.getLogger(__name__)


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
    references: str = ""  # what the load-time check of verification.npz found (server/runtime/reference_check.py)

    @property
    def version(self) -> str:
        return self.fingerprint[:12]

    @property
    def aligns(self) -> bool:
        """Translation: it can return word alignments (and place inline markup by them): its
        decoder returns its steps' attention, or its directory has the aligner graph."""
        return self.aligner is not None or (self.engine is not None and self.engine.step_attention)

    async def stop_when_unused(self, grace_s: float) -> None:
        """After a hot reload: let the handlers still on this version finish, then stop it."""
        while self.users > 0:
            await asyncio.sleep(0.02)
        await (self.classifier or self.engine).stop(grace_s)


def log_loaded(model: LoadedModel, waited_s: float | None = None) -> None:
    """The one log line of a loaded model (``waited_s``: how long its first request waited for it)."""
    files = ", ".join(f"{n} ({e.get('bytes', 0) / 1e6:.1f} MB)" for n, e in sorted(model.manifest.files.items()))
    on_demand = "" if waited_s is None else f"; on demand, its request waited {waited_s * 1e3:.0f} ms"
    log.info(
        "loaded model %s (%s) provider=%s files=[%s] warm-up %.1f ms; %s%s",
        model.name,
        model.kind,
        model.provider,
        files,
        model.warmup_s * 1e3,
        model.references,
        on_demand,
    )


def load_checked(model_dir: Path, settings: Settings, verified: dict[Path, tuple] | None = None) -> LoadedModel:
    """Validate (:func:`check_files`) and load one model directory, warmed up.
    Sync: the lazy loader and the hot reload run it in a thread."""
    return load_model(model_dir, check_files(model_dir, verified), settings)


def check_files(model_dir: Path, verified: dict[Path, tuple] | None = None) -> Manifest:
    """What a load finds wrong in ``model_dir`` before it opens a graph, so that the lazy loader
    refuses a broken directory before it unloads another model to make room for it: model.json
    parses, every file it lists is there and readable, at its size and sha256. Raises
    ManifestError naming the file.

    ``verified`` (the lazy loader's): directories whose files were hashed earlier in this process,
    with what identified them then (:func:`file_stamps`); a directory whose model.json and files
    are unchanged since (same bytes of model.json; each file's inode, size and modification time)
    is not hashed again, as when a model evicted from the budget comes back."""
    manifest = load_manifest(model_dir, verify_files=False)
    stamps = file_stamps(model_dir)
    for fname in manifest.files:
        path = model_dir / fname
        try:
            with path.open("rb") as f:
                f.read(1)
        except FileNotFoundError:
            raise ManifestError(path, f"files.{fname}", "listed in model.json but missing") from None
        except OSError as exc:
            raise ManifestError(path, f"files.{fname}", f"cannot be read: {exc.strerror or exc}") from None
    if verified is None or verified.get(model_dir) != stamps:
        verify_manifest_files(model_dir, manifest)
        if verified is not None:
            verified[model_dir] = stamps
    return manifest


def file_stamps(model_dir: Path) -> tuple:
    """model.json's bytes and (name, inode, size, mtime) of every other file of ``model_dir``, links followed."""
    stamps = []
    for path in sorted(model_dir.iterdir()):
        if path.name != MANIFEST_NAME and path.is_file():
            st = path.stat()
            stamps.append((path.name, st.st_ino, st.st_size, st.st_mtime_ns))
    return ((model_dir / MANIFEST_NAME).read_bytes(), tuple(stamps))


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


def served_graphs(manifest: Manifest, provider: str = "cpu") -> list[tuple[str, GraphSpec]]:
    """The graphs the server opens a session for on ``provider``: all, but on the CPU the aligner
    graph where the decoder returns its steps' attention (alignments then never run it: a session
    of the bundled translator's aligner.onnx holds about 7 MiB, per loaded model). On CUDA the
    aligner runs (:func:`~attnserve.server.translation.sessions.keeps_step_attention`)."""
    steps = keeps_step_attention(manifest, provider)
    return [(role, graph) for role, graph in manifest.graphs.items() if not (steps and role == "aligner")]


def load_model(model_dir: Path, manifest: Manifest, settings: Settings) -> LoadedModel:
    """Sessions (one per graph it serves with) + classifier or decode engine, warmed up."""
    graphs = served_graphs(manifest)
    provider, threads = settings.provider, settings.threads
    if manifest.kind == IMAGE_CLASSIFICATION and (host := host_address()) is not None:  # --shared-classifier
        sessions = {role: RemoteSession(host, model_dir / g.file, provider, threads) for role, g in graphs}
    else:
        sessions = {role: create_session(model_dir / graph.file, provider, threads) for role, graph in graphs}
    actual = session_provider(next(iter(sessions.values())))
    if actual != "cpu":  # ``auto`` is known now: the graphs CUDA serves with
        graphs = served_graphs(manifest, actual)
        sessions |= {r: create_session(model_dir / g.file, provider, threads) for r, g in graphs if r not in sessions}
    for role, graph in graphs:
        check_graph_inputs(model_dir, role, graph, sessions[role])
    # before the engine starts: a model that computes wrong numbers here is never served
    references = check_references(model_dir, manifest, sessions, actual)
    if uses_cuda_graphs(manifest, settings.decode_step_buckets, sessions):  # after the check: it would capture one
        sessions["decoder"] = cuda_graph_decoder(model_dir, manifest, threads) or sessions["decoder"]
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
    aligner = Aligner(sessions["aligner"], manifest, sessions["encoder"]) if "aligner" in sessions else None
    return LoadedModel(
        manifest.name, manifest.kind, model_dir, manifest, provider, warmup_s, engine=engine, aligner=aligner
    )


def engine_settings_kwargs(settings: Settings) -> dict[str, Any]:
    """The decode engine's ``EngineSettings`` fields, from the server settings."""
    return {
        "max_active_sequences": settings.max_active_sequences,
        "max_tokens_in_flight": settings.max_tokens_in_flight,
        "max_cache_bytes": settings.max_kv_cache_bytes,
        "max_queue_size": settings.max_translation_queue,
        "max_beam_size": settings.max_beam_size,
        "batching": settings.translation_batching,
        "stream_interval_ms": settings.stream_interval_ms,
        "step_buckets": settings.decode_step_buckets,
    }
