"""The exported graphs: thin ``nn.Module`` wrappers whose ONNX inputs and outputs are the
contract's (:mod:`attnserve.contract.graph_io` names them and gives their shapes).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import onnx
import torch
from torch import nn

from attnserve.contract.graph_io import AlignerIO, ClassifierIO, DecoderIO, EncoderIO, alignment_layer
from attnserve.contract.kinds import IN_PLACE, LEFT_PADDED
from attnserve.models import TranslationTransformer, VisionTransformer, attention_backend

from .fold import fold_attention_bias
from .onnx_nodes import DEFAULT_OPSET, count_attention_nodes  # noqa: F401 - re-exported


class EncoderGraph(nn.Module):
    def __init__(self, model: TranslationTransformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, src_ids: torch.Tensor, src_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        memory = self.model.encode(src_ids, src_mask.bool())  # (B, L, C)
        flat = [t for kv in self.model.cross_kv(memory) for t in kv]  # 2 per layer, (B, H, L, D)
        return (memory, *flat)


class DecoderGraph(nn.Module):
    def __init__(self, model: TranslationTransformer) -> None:
        super().__init__()
        self.model = model
        self.num_layers = model.cfg.decoder_layers

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        self_mask: torch.Tensor,
        src_mask: torch.Tensor,
        *caches: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        n = self.num_layers
        past = [(caches[2 * i], caches[2 * i + 1]) for i in range(n)]  # (B, H, P, D)
        cross = [(caches[2 * n + 2 * i], caches[2 * n + 2 * i + 1]) for i in range(n)]  # (B, H, L, D)
        hidden, present = self.model.decode(
            input_ids, positions, self_mask.bool(), cross, src_mask.bool(), past, use_cache=True
        )  # (B, S, C)
        logits = self.model.logits(hidden[:, -1])  # (B, V): only the last position is ever sampled
        return (logits, *[t for kv in present for t in kv])


class AlignerGraph(nn.Module):
    """The encoder's output and a whole output -> every decoder layer's cross-attention (for word
    alignments): one teacher-forced pass of the decoder, run once per finished sentence that asks
    for alignments, so the step decoder stays as it is. It starts from the encoder's ``memory``,
    which the server keeps from decoding the sentence: the source is not encoded twice. It computes
    the decoder layers up to the one alignments read (``layers``), no further."""

    def __init__(self, model: TranslationTransformer, extra: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.model = model
        # the decoder layers computed: up to the one alignments read (model.json extra.alignment.layer)
        self.layers = alignment_layer(dataclasses.asdict(model.cfg), extra or {}) + 1

    def forward(
        self, memory: torch.Tensor, src_mask: torch.Tensor, tgt_ids: torch.Tensor, tgt_mask: torch.Tensor
    ) -> torch.Tensor:
        mask = src_mask.bool()
        return self.model.cross_attention_of(memory, mask, tgt_ids, tgt_mask.bool(), self.layers)  # (B, N, H, T, L)


def example_aligner_inputs(
    model: TranslationTransformer, batch: int = 2, src_len: int = 7, tgt_len: int = 5, seed: int = 0
):
    """Deterministic aligner inputs with right padding in row 1 of both sides; the memory is the
    encoder's output for random source ids."""
    cfg = model.cfg
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, cfg.vocab_size, (batch, src_len), generator=g)  # (B, L)
    tgt = torch.randint(4, cfg.vocab_size, (batch, tgt_len), generator=g)  # (B, T)
    tgt[:, 0] = cfg.bos_id
    src_mask = torch.ones(batch, src_len, dtype=torch.int32)  # (B, L)
    tgt_mask = torch.ones(batch, tgt_len, dtype=torch.int32)  # (B, T)
    src_mask[-1, src_len - 2 :] = 0
    tgt_mask[-1, tgt_len - 2 :] = 0
    src[-1, src_len - 2 :] = cfg.pad_id
    tgt[-1, tgt_len - 2 :] = cfg.pad_id
    with torch.no_grad():
        memory = model.encode(src, src_mask.bool())  # (B, L, C)
    return memory, src_mask, tgt, tgt_mask


def example_translation_inputs(
    model: TranslationTransformer,
    batch: int = 2,
    src_len: int = 7,
    past_len: int = 3,
    new_len: int = 2,
    seed: int = 0,
) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    """Deterministic example inputs (encoder args, decoder args) with padding in row 0."""
    cfg = model.cfg
    g = torch.Generator().manual_seed(seed)
    H, D = cfg.num_heads, cfg.d_model // cfg.num_heads
    src = torch.randint(4, cfg.vocab_size, (batch, src_len), generator=g)  # (B, L)
    src_mask = torch.ones(batch, src_len, dtype=torch.int32)  # (B, L)
    src_mask[0, src_len - 2 :] = 0
    src[0, src_len - 2 :] = cfg.pad_id
    enc_args = (src, src_mask)
    ids = torch.randint(4, cfg.vocab_size, (batch, new_len), generator=g)  # (B, S)
    positions = torch.arange(past_len, past_len + new_len).expand(batch, -1).contiguous()  # (B, S)
    self_mask = torch.ones(batch, past_len + new_len, dtype=torch.int32)  # (B, P + S)
    if past_len:
        self_mask[0, 0] = 0  # a left-padded cache slot (a row always sees its own new tokens)
    caches = [torch.randn(batch, H, past_len, D, generator=g) for _ in range(2 * cfg.decoder_layers)]
    caches += [torch.randn(batch, H, src_len, D, generator=g) for _ in range(2 * cfg.decoder_layers)]
    return enc_args, (ids, positions, self_mask, src_mask, *caches)


def _dynamic_shapes_for_decoder(num_layers: int) -> tuple:
    B, S, L = torch.export.Dim("batch"), torch.export.Dim("new"), torch.export.Dim("src_len")
    P, T = torch.export.Dim("past", min=0), torch.export.Dim("total")
    past = [{0: B, 2: P}] * (2 * num_layers)
    cross = [{0: B, 2: L}] * (2 * num_layers)
    return ({0: B, 1: S}, {0: B, 1: S}, {0: B, 1: T}, {0: B, 1: L}, (*past, *cross))  # *caches is one tuple


def export_onnx(
    module: nn.Module,
    args: tuple[torch.Tensor, ...],
    input_names: list[str],
    output_names: list[str],
    dynamic_shapes: tuple,
    path: Path,
    attention: str = "fused",
    opset: int = DEFAULT_OPSET,
) -> onnx.ModelProto:
    """Export ``module`` with the dynamo exporter, attention emitted as ``attention`` says.

    Writes one self-contained .onnx file (weights inline) and returns the model proto.
    The exporter's per-node debugging metadata (stack traces naming the files of the
    checkout it ran from) is dropped, so a graph's bytes and sha256 depend on the model
    alone, not on where it was exported. The q/k/v bias Adds in front of
    ``MultiHeadAttention`` are folded into its ``bias`` input (:mod:`.fold`).
    """
    module.eval()
    with attention_backend(attention), torch.no_grad():
        program = torch.onnx.export(
            module,
            args,
            dynamo=True,
            input_names=input_names,
            output_names=output_names,
            dynamic_shapes=dynamic_shapes,
            opset_version=opset,
            optimize=True,
            verbose=False,
        )
    program.save(str(path), external_data=False)
    proto = onnx.load(str(path))
    strip_node_metadata(proto.graph)
    for fn in proto.functions:
        for node in fn.node:
            del node.metadata_props[:]
    fold_attention_bias(proto)
    onnx.save(proto, str(path))
    return proto


def strip_node_metadata(graph: onnx.GraphProto) -> None:
    """Remove ``metadata_props`` from every node of ``graph`` and its subgraphs."""
    for node in graph.node:
        del node.metadata_props[:]
        for attr in node.attribute:
            if attr.HasField("g"):
                strip_node_metadata(attr.g)
            for sub in attr.graphs:
                strip_node_metadata(sub)


def export_encoder(model: TranslationTransformer, path: Path, attention: str = "fused", opset: int = DEFAULT_OPSET):
    enc_args, _ = example_translation_inputs(model)
    B, L = torch.export.Dim("batch"), torch.export.Dim("src_len")
    io = EncoderIO.standard(model.cfg.decoder_layers)
    return export_onnx(
        EncoderGraph(model), enc_args, io.inputs, io.outputs, ({0: B, 1: L}, {0: B, 1: L}), path, attention, opset
    )


def export_decoder(
    model: TranslationTransformer,
    path: Path,
    attention: str = "fused",
    opset: int = DEFAULT_OPSET,
    kv_cache: str = LEFT_PADDED,
    extra: dict[str, Any] | None = None,
    step_attention: bool = True,
):
    """The decoder graph; ``kv_cache`` "in-place" rewrites its self-attention for a cache written in
    place (:func:`attnserve.export.inplace.in_place_decoder`, fused attention only). A fused
    decoder also returns its step's attention at the layer alignments read (``extra``, the model
    directory's: :mod:`.step_attention`) unless ``step_attention`` is False."""
    _, dec_args = example_translation_inputs(model)
    n = model.cfg.decoder_layers
    io = DecoderIO.standard(n)
    proto = export_onnx(
        DecoderGraph(model), dec_args, io.inputs, io.outputs, _dynamic_shapes_for_decoder(n), path, attention, opset
    )
    if kv_cache == IN_PLACE:
        from .inplace import in_place_decoder

        proto = in_place_decoder(proto)
    step_attention = step_attention and attention == "fused"
    if step_attention:
        from .step_attention import add_step_attention

        proto = add_step_attention(proto, alignment_layer(dataclasses.asdict(model.cfg), extra or {}))
    if kv_cache == IN_PLACE or step_attention:
        onnx.save(proto, str(path))
    return proto


def export_aligner(
    model: TranslationTransformer,
    path: Path,
    attention: str = "fused",
    opset: int = DEFAULT_OPSET,
    extra: dict[str, Any] | None = None,
):
    """``extra``: the model directory's (``extra.alignment.layer`` names the layer alignments read)."""
    B, L, T = torch.export.Dim("batch"), torch.export.Dim("src_len"), torch.export.Dim("tgt_len")
    io = AlignerIO.standard()
    shapes = ({0: B, 1: L}, {0: B, 1: L}, {0: B, 1: T}, {0: B, 1: T})  # memory (B, L, C), masks and ids
    graph = AlignerGraph(model, extra)
    return export_onnx(graph, example_aligner_inputs(model), io.inputs, io.outputs, shapes, path, attention, opset)


def export_vit(model: VisionTransformer, path: Path, attention: str = "fused", opset: int = DEFAULT_OPSET):
    cfg = model.cfg
    pixels = torch.randn(2, cfg.in_channels, cfg.image_size, cfg.image_size, generator=torch.Generator().manual_seed(0))
    io = ClassifierIO.standard()
    return export_onnx(
        model, (pixels,), io.inputs, io.outputs, ({0: torch.export.Dim("batch")},), path, attention, opset
    )
