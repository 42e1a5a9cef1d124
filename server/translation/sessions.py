"""A translation model directory as the engine sees it: onnxruntime sessions set up for
decoding speed, and the few facts about the model that decoding needs."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort

from attnserve.contract.graph_io import DecoderIO, EncoderIO
from attnserve.contract.kinds import TRANSLATION
from attnserve.contract.manifest import Manifest

from ..shared.onnx_sessions import ProviderError, create_session, session_provider

log = logging.getLogger(__name__)


def load_translation_sessions(
    model_dir: Path,
    manifest: Manifest,
    provider: str = "cpu",
    intra_op_threads: int = 0,
    spin: bool = True,
    disabled_optimizers: tuple[str, ...] | None = None,
    cuda_graph: bool = False,
) -> tuple[ort.InferenceSession, ort.InferenceSession]:
    """(encoder, decoder) sessions of a translation model directory on ``provider`` (cpu | auto |
    cuda), made as the server makes them (:func:`attnserve.server.shared.onnx_sessions.create_session`): a
    session that asked for CUDA and fell back to CPU is built again with the CPU options.
    ``spin`` and ``disabled_optimizers``: see :func:`attnserve.server.shared.onnx_sessions.session_options`.
    ``cuda_graph``: a CUDA decoder with CUDA graphs where onnxruntime can make one
    (:func:`cuda_graph_decoder`).
    """
    encoder, decoder = (
        create_session(
            Path(model_dir) / manifest.graphs[name].file, provider, intra_op_threads, spin, disabled_optimizers
        )
        for name in ("encoder", "decoder")
    )
    if cuda_graph and session_provider(decoder) == "cuda":
        decoder = cuda_graph_decoder(model_dir, manifest, intra_op_threads) or decoder
    return encoder, decoder


def keeps_step_attention(manifest: Manifest, provider: str) -> bool:
    """Whether a translation model's decoder gives alignments their attention on ``provider``
    (``cpu`` | ``cuda``): where it returns ``step_attention``, on the CPU. onnxruntime's CUDA
    MultiHeadAttention writes other numbers than the CPU's into the scores output the output is
    made of (on an H200, uncorrelated with them): on CUDA alignments run the aligner graph."""
    return manifest.kind == TRANSLATION and bool(manifest.decoder_io().attention) and provider == "cpu"


def uses_cuda_graphs(manifest: Manifest, step_buckets: str, sessions: dict) -> bool:
    """Whether a model's decoder runs with CUDA graphs: step buckets ``cuda-graphs``, a translation
    model whose decoder writes its cache in place (the buckets' layout), its session on CUDA."""
    if manifest.kind != TRANSLATION or step_buckets != "cuda-graphs":
        return False
    return manifest.decoder_io().in_place and session_provider(sessions["decoder"]) == "cuda"


def cuda_graph_decoder(model_dir: Path, manifest: Manifest, threads: int = 0) -> ort.InferenceSession | None:
    """The decoder of ``model_dir`` on CUDA with ``enable_cuda_graph``, for step buckets
    (:mod:`.buckets`), whose every run names its graph; None, logged, where onnxruntime refuses
    (a node it would place on the CPU, say). A session of its own: any other run of a session
    with graphs (a plain ``run``, the load-time reference check) would capture graph 0 on its
    transient inputs."""
    path = Path(model_dir) / manifest.graphs["decoder"].file
    try:
        return create_session(path, "cuda", threads, cuda_graph=True)
    except ProviderError as exc:
        log.warning("%s: no CUDA graphs, its steps run without them: %s", path, exc)
        return None


Run = Callable[[list[str], dict], list]


def direct_run(session) -> Run:
    """``session.run(output_names, feeds)``, minus onnxruntime's per-call Python checks when
    ``session`` is a plain ``InferenceSession`` on the CPU provider.

    ``InferenceSession.run`` checks in Python, on every call, that no required input is
    missing and that no fed ``OrtValue`` lives on another session's device, then calls the
    C++ session, which checks the feeds' names, types and shapes again. The engine feeds
    numpy arrays under the manifest's names, so the Python half only costs time: 9-12 us a
    call, 3% of mt-small's 0.3 ms decoder step at batch 1 (benchmarks/README.md). Anything
    else keeps its own ``run``: a wrapper, a session of another kind, and a session on
    another provider, where ``run`` also falls back to the CPU when the provider fails (and
    where this was not measured; the CUDA decoder steps use io binding anyway).
    """
    if type(session) is not ort.InferenceSession or session_provider(session) != "cpu":
        return session.run
    inner = session._sess  # the C++ session InferenceSession.run calls
    return lambda output_names, feeds: inner.run(output_names, feeds, None)


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
    start_id: int  # the decoder's first input (Marian: pad; M2M100 / NLLB: the end token)
    never_ids: tuple[int, ...]  # never chosen (default pad and bos; see contract TokenizerSpec.never_generate)
    # the decoder screens its vocabulary projection for these never_ids (export/screen_vocab.py)
    screen_vocab: bool = False
    vocab_size: int = 0  # config's: the logits' width where a screened decoder leaves it symbolic

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
        bos_id=tok.bos_id,
        eos_id=tok.eos_id,
        encoder_io=manifest.encoder_io(),
        decoder_io=manifest.decoder_io(),
        start_id=tok.start_id,
        never_ids=tuple(tok.never_generate),
        screen_vocab=screens_for(manifest.extra.get("screen_vocab"), tok.never_generate),
        vocab_size=int(cfg.get("vocab_size", 0)),
    )


def screens_for(record: object, never_ids: list[int]) -> bool:
    """Whether model.json's ``extra.screen_vocab`` says the decoder screens for exactly the ids the
    engine never picks (the screened logits are only right for the argmax over the others)."""
    if not isinstance(record, dict) or not isinstance(record.get("never_ids"), list):
        return False
    return sorted(record["never_ids"]) == sorted(never_ids)
