"""A translation model directory as the engine sees it: onnxruntime sessions set up for
decoding speed, and the few facts about the model that decoding needs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort

from attnserve.contract.graph_io import DecoderIO, EncoderIO
from attnserve.contract.manifest import Manifest
from attnserve.server.runtime import CPU_DISABLED_OPTIMIZERS, CUDA, disable_optimizers


def session_options(
    intra_op_threads: int = 0,
    spin: bool = True,
    provider: str = "cpu",
    disabled_optimizers: tuple[str, ...] | None = None,
) -> ort.SessionOptions:
    """Sequential execution, full graph optimisation, ``intra_op_threads`` (0 = onnxruntime's default).

    ``spin=False`` stops idle pool threads from spinning, which costs a little latency
    on a machine of one's own and saves a lot on one shared with other processes.
    ``disabled_optimizers`` (None = the default for ``provider``: CPU_DISABLED_OPTIMIZERS on
    cpu, none on cuda) are onnxruntime graph optimizers to leave out.
    """
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    if not spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if disabled_optimizers is None:
        disabled_optimizers = CPU_DISABLED_OPTIMIZERS if provider == "cpu" else ()
    return disable_optimizers(options, disabled_optimizers)


def load_translation_sessions(
    model_dir: Path,
    manifest: Manifest,
    providers: list[str] | None = None,
    intra_op_threads: int = 0,
    spin: bool = True,
    disabled_optimizers: tuple[str, ...] | None = None,
) -> tuple[ort.InferenceSession, ort.InferenceSession]:
    """(encoder, decoder) sessions of a translation model directory; CPU unless ``providers`` say otherwise.

    A session that asked for CUDA and fell back to CPU is built again with the CPU options.
    ``disabled_optimizers``: see :func:`session_options` (None = the provider's default).
    """
    providers = providers or ["CPUExecutionProvider"]
    on_cuda = providers[0] == CUDA or (isinstance(providers[0], tuple) and providers[0][0] == CUDA)
    sessions = []
    for name in ("encoder", "decoder"):
        path = str(Path(model_dir) / manifest.graphs[name].file)
        options = session_options(intra_op_threads, spin, "cuda" if on_cuda else "cpu", disabled_optimizers)
        session = ort.InferenceSession(path, options, providers=providers)
        if on_cuda and session.get_providers()[0] != CUDA:
            options = session_options(intra_op_threads, spin, "cpu", disabled_optimizers)
            session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        sessions.append(session)
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
    encoder_io: EncoderIO  # graph input/output names, as model.json lists them
    decoder_io: DecoderIO
    never_generate: tuple[int, ...] = ()  # ids never chosen (model.json tokenizer.never_generate_ids)

    @property
    def cache_bytes_per_token(self) -> int:
        """KV-cache bytes one token takes in one row: key and value, every layer, fp32."""
        return 2 * self.num_layers * self.num_heads * self.head_dim * 4


def model_spec(manifest: Manifest) -> ModelSpec:
    cfg, tok = manifest.config, manifest.tokenizer
    return ModelSpec(
        num_layers=int(cfg["decoder_layers"]),
        num_heads=int(cfg["num_heads"]),
        head_dim=int(cfg["d_model"]) // int(cfg["num_heads"]),
        pad_id=tok.pad_id,
        bos_id=tok.start_id,  # the decoder start token (M2M100 / NLLB: </s>)
        never_generate=tuple(tok.never_generate),
        eos_id=tok.eos_id,
        encoder_io=manifest.encoder_io(),
        decoder_io=manifest.decoder_io(),
    )
