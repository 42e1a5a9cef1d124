"""A translation model directory as the engine sees it: onnxruntime sessions set up for
decoding speed, and the few facts about the model that decoding needs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort

from attnserve.server.manifest import Manifest


def session_options(intra_op_threads: int = 0, spin: bool = True) -> ort.SessionOptions:
    """Sequential execution, full graph optimisation, ``intra_op_threads`` (0 = onnxruntime's default).

    ``spin=False`` stops idle pool threads from spinning, which costs a little latency
    on a machine of one's own and saves a lot on one shared with other processes.
    """
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    if not spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def load_translation_sessions(
    model_dir: Path,
    manifest: Manifest,
    providers: list[str] | None = None,
    intra_op_threads: int = 0,
    spin: bool = True,
) -> tuple[ort.InferenceSession, ort.InferenceSession]:
    """(encoder, decoder) sessions of a translation model directory; CPU unless ``providers`` say otherwise."""
    providers = providers or ["CPUExecutionProvider"]
    options = session_options(intra_op_threads, spin)
    sessions = [
        ort.InferenceSession(str(Path(model_dir) / manifest.graphs[name].file), options, providers=providers)
        for name in ("encoder", "decoder")
    ]
    return sessions[0], sessions[1]


@dataclass(frozen=True)
class ModelSpec:
    """What the scheduler needs to know about the model (from model.json)."""

    num_layers: int
    num_heads: int
    head_dim: int
    pad_id: int
    bos_id: int
    eos_id: int


def model_spec(manifest: Manifest) -> ModelSpec:
    cfg, tok = manifest.config, manifest.tokenizer
    return ModelSpec(
        num_layers=int(cfg["decoder_layers"]),
        num_heads=int(cfg["num_heads"]),
        head_dim=int(cfg["d_model"]) // int(cfg["num_heads"]),
        pad_id=tok.pad_id,
        bos_id=tok.bos_id,
        eos_id=tok.eos_id,
    )
