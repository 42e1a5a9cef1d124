"""The step decoder's ``step_attention`` output: the cross-attention probabilities of the layer
word alignments read, heads averaged, for every new position (``contract.graph_io``).

The fused cross-attention node of that layer (``com.microsoft::MultiHeadAttention``, its key
the graph input ``cross_key_{layer}``) also writes its optional ``qk`` output: the scaled
scores with the source padding already masked, (B, H, S, L). A ``Softmax`` over the source
and a ``ReduceMean`` over the heads make them what ``aligner.onnx`` returns for that layer,
so a sentence brings its alignment rows with it from decoding (every hypothesis, beam search's
too: ``server/translation/step_attention.py``) and no aligner pass runs for it. The attention call
stays one node; the two added nodes cost a few microseconds a step at batch 32.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from attnserve.contract.graph_io import STEP_ATTENTION, per_layer

from .onnx_nodes import ATTENTION_OPS

QK_OUTPUT = 3  # MultiHeadAttention's outputs: output, present_key, present_value, qk


def add_step_attention(proto: onnx.ModelProto, layer: int) -> onnx.ModelProto:
    """``proto`` (a fused decoder, either cache layout) with ``step_attention`` (B, S, L) as its
    last output, read from layer ``layer``'s cross-attention node. Raises ValueError when the
    graph has no such node (an export with decomposed attention has none)."""
    key = per_layer("cross", layer + 1)[2 * layer]  # cross_key_{layer}
    op = ATTENTION_OPS["fused"]
    nodes = [n for n in proto.graph.node if f"{n.domain}::{n.op_type}" == op and len(n.input) > 1 and n.input[1] == key]
    if len(nodes) != 1:
        raise ValueError(f"the decoder has {len(nodes)} fused cross-attention nodes reading {key!r}, expected 1")
    node = nodes[0]
    outputs = list(node.output) + [""] * (QK_OUTPUT + 1 - len(node.output))
    if outputs[QK_OUTPUT]:
        raise ValueError(f"the cross-attention node of layer {layer} already writes its scores")
    scores, probabilities, axes = f"{STEP_ATTENTION}_scores", f"{STEP_ATTENTION}_heads", f"{STEP_ATTENTION}_axes"
    outputs[QK_OUTPUT] = scores  # (B, H, S, L), padding at -10000 + score
    del node.output[:]
    node.output.extend(outputs)
    proto.graph.initializer.append(helper.make_tensor(axes, TensorProto.INT64, [1], [1]))
    proto.graph.node.extend(
        [
            helper.make_node("Softmax", [scores], [probabilities], axis=-1, name=f"{STEP_ATTENTION}_softmax"),
            helper.make_node(
                "ReduceMean", [probabilities, axes], [STEP_ATTENTION], keepdims=0, name=f"{STEP_ATTENTION}_mean"
            ),
        ]
    )
    # the op's scores type is its own type parameter, not bound by the inputs: declared here
    proto.graph.value_info.append(helper.make_tensor_value_info(scores, TensorProto.FLOAT, None))
    proto.graph.output.append(
        helper.make_tensor_value_info(STEP_ATTENTION, TensorProto.FLOAT, ["batch", "new", "src_len"])
    )
    return proto


def without_step_attention(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` (a decoder with ``step_attention``) as it was exported before the output: the
    cross-attention node without its scores, the two nodes after it gone. The benchmarks serve it
    beside the decoder with the output, to measure what the output costs and what it saves."""
    scores = f"{STEP_ATTENTION}_scores"
    added = {f"{STEP_ATTENTION}_softmax", f"{STEP_ATTENTION}_mean"}
    nodes = [n for n in proto.graph.node if n.name not in added]
    for node in nodes:
        if scores in node.output:
            outputs = [name if name != scores else "" for name in node.output]
            while outputs and not outputs[-1]:
                outputs.pop()
            del node.output[:]
            node.output.extend(outputs)
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    for field, keep in (
        (proto.graph.output, lambda v: v.name != STEP_ATTENTION),
        (proto.graph.value_info, lambda v: v.name != scores),
        (proto.graph.initializer, lambda t: t.name != f"{STEP_ATTENTION}_axes"),
    ):
        kept = [v for v in field if keep(v)]
        del field[:]
        field.extend(kept)
    return proto
