"""Export-time graph rewrites that remove nodes without changing what a graph computes.

``fold_attention_bias``: the exporter writes a packed self-attention projection as
``MatMul -> Add(bias) -> Split(3) -> MultiHeadAttention(q, k, v)``. The bias Add is a
separate kernel over the whole (B, S, 3C) projection; ``com.microsoft::MultiHeadAttention``
takes the same 3C bias as its ``bias`` input and adds it while it lays out q, k and v, so
the Add is dropped and its bias handed to the attention node: one kernel (and one
activation-sized write) less per attention layer. Only this exact shape is rewritten; any
other consumer of the Add or the Split leaves the graph as it was.
"""

from __future__ import annotations

import onnx

MHA = ("com.microsoft", "MultiHeadAttention")
BIAS_INPUT = 3  # MultiHeadAttention(query, key, value, bias, ...)


def fold_attention_bias(model: onnx.ModelProto) -> int:
    """Fold q/k/v bias Adds into MultiHeadAttention's ``bias`` input in place; returns how many."""
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    producer = {out: n for n in graph.node for out in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    graph_outputs = {o.name for o in graph.output}
    dropped: list[onnx.NodeProto] = []
    for mha in graph.node:
        if (mha.domain, mha.op_type) != MHA or len(mha.input) < 3:
            continue
        if len(mha.input) > BIAS_INPUT and mha.input[BIAS_INPUT]:
            continue  # already has a bias
        split = producer.get(mha.input[0])
        if split is None or split.op_type != "Split" or list(split.output) != list(mha.input[:3]):
            continue
        if any(consumers.get(o, []) != [mha] or o in graph_outputs for o in split.output):
            continue
        add = producer.get(split.input[0])
        if add is None or add.op_type != "Add" or add.domain not in ("", "ai.onnx"):
            continue
        if consumers.get(add.output[0], []) != [split] or add.output[0] in graph_outputs:
            continue
        product, bias = _matmul_and_bias(add, producer, inits)
        if product is None:
            continue
        split.input[0] = product
        inputs = list(mha.input) + [""] * (BIAS_INPUT + 1 - len(mha.input))
        inputs[BIAS_INPUT] = bias
        del mha.input[:]
        mha.input.extend(inputs)
        dropped.append(add)
    for add in dropped:
        graph.node.remove(add)
    return len(dropped)


def _matmul_and_bias(add: onnx.NodeProto, producer: dict, inits: dict) -> tuple[str | None, str]:
    """(the MatMul output, the 1-D bias initializer) of ``MatMul + bias``, else (None, "")."""
    for i in (0, 1):
        product, bias = add.input[i], add.input[1 - i]
        node = producer.get(product)
        if node is not None and node.op_type == "MatMul" and bias in inits and len(inits[bias].dims) == 1:
            return product, bias
    return None, ""
