"""What an exported graph contains, read without torch: attention nodes, inputs and outputs.

``verify`` and ``inspect`` run on machines with only onnx and onnxruntime, so this
module repeats the op table of ``attnserve.models.attention.EXPORT_OP_TYPES`` (a test
keeps the two equal) instead of importing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx

DEFAULT_OPSET = 23  # the standard Attention op needs opset 23

# Export target -> the op that carries one attention call ("domain::op_type"); decomposed
# attention is plain MatMul/Softmax.
ATTENTION_OPS = {
    "fused": "com.microsoft::MultiHeadAttention",
    "onnx": "ai.onnx::Attention",
    "decomposed": None,
}
# The self-attention op of an in-place decoder (``kv_cache: in-place``, export/inplace.py).
IN_PLACE_OP = "com.microsoft::GroupQueryAttention"


def _key(node: onnx.NodeProto) -> str:
    return f"{node.domain or 'ai.onnx'}::{node.op_type}"


def _nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return list(model.graph.node) + [n for f in model.functions for n in f.node]


def count_attention_nodes(model: onnx.ModelProto) -> dict[str, int]:
    """Count attention nodes by ``domain::op_type`` (main graph and functions)."""
    kinds = {op for op in ATTENTION_OPS.values() if op} | {IN_PLACE_OP}
    counts: dict[str, int] = {}
    for node in _nodes(model):
        key = _key(node)
        if key in kinds:
            counts[key] = counts.get(key, 0) + 1
    return counts


def count_ops(model: onnx.ModelProto, *ops: str) -> dict[str, int]:
    """Count nodes of the given ``domain::op_type`` keys (0 for absent ones)."""
    counts = dict.fromkeys(ops, 0)
    for node in _nodes(model):
        key = _key(node)
        if key in counts:
            counts[key] += 1
    return counts


def expected_attention_nodes(
    kind: str, config: dict[str, Any], op: str, kv_cache: str, aligner: AlignerShape | None = None
) -> dict[str, dict[str, int]]:
    """Attention nodes by ``domain::op_type`` per graph: one ``op`` per call, except an in-place
    decoder's self-attention, one :data:`IN_PLACE_OP` per layer."""
    expected = {graph: {op: calls} for graph, calls in attention_calls(kind, config, aligner).items()}
    if kind == "translation" and kv_cache == "in-place":
        layers = int(config["decoder_layers"])
        expected["decoder"] = {op: layers, IN_PLACE_OP: layers}
    return expected


@dataclass(frozen=True)
class AlignerShape:
    """What an aligner graph computes: ``layers`` decoder layers (up to the one alignments read),
    and the encoder too where it ``encodes`` the source itself (directories exported before the
    aligner took the encoder's output)."""

    layers: int
    encodes: bool = False

    @classmethod
    def of(cls, proto: onnx.ModelProto, encodes: bool) -> AlignerShape | None:
        """From the graph's output, (B, N, H, T, L): N when it is a fixed size, else None."""
        dims = proto.graph.output[0].type.tensor_type.shape.dim
        return cls(dims[1].dim_value, encodes) if len(dims) > 1 and dims[1].dim_value > 0 else None


def attention_calls(kind: str, config: dict[str, Any], aligner: AlignerShape | None = None) -> dict[str, int]:
    """Attention calls per graph of a model directory, from its ``model.json`` config.

    translation: the encoder has one self-attention per layer; the decoder a causal
    self-attention and a cross-attention per layer; the aligner (of ``aligner``'s shape; None:
    every decoder layer, from the encoder's output) a causal self-attention per layer it
    computes and the cross-attention of each but the last (whose output it does not need; its
    probabilities are written out as MatMul and Softmax), and the encoder's where it encodes.
    image-classification: one per block.
    """
    if kind == "translation":
        enc, dec = int(config["encoder_layers"]), int(config["decoder_layers"])
        aligner = aligner or AlignerShape(dec)
        align = (enc if aligner.encodes else 0) + 2 * aligner.layers - 1
        return {"encoder": enc, "decoder": 2 * dec, "aligner": align}
    return {"model": int(config["depth"])}


_DTYPES = {v: k for k, v in onnx.TensorProto.DataType.items()}


def describe_value(value: onnx.ValueInfoProto) -> str:
    """``name: float32[batch, src_len, 256]``."""
    tensor = value.type.tensor_type
    dtype = _DTYPES.get(tensor.elem_type, str(tensor.elem_type)).lower()
    dtype = {"float": "float32", "double": "float64"}.get(dtype, dtype)
    dims = [d.dim_param or (str(d.dim_value) if d.HasField("dim_value") else "?") for d in tensor.shape.dim]
    return f"{value.name}: {dtype}[{', '.join(dims)}]"
