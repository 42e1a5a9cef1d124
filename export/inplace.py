"""The in-place decoder: self-attention over a cache buffer written in place, rows at their own lengths.

The exported decoder's self-attention is ``com.microsoft::MultiHeadAttention``: it takes
``past`` (B, H, P, D) and returns ``present = past + new`` as a new tensor, so every step copies
the whole cache, and in the engine's left-padded layout every row pays for the longest row's P
columns. :func:`in_place_decoder` replaces each self-attention node with
``com.microsoft::GroupQueryAttention`` (as many key/value heads as query heads): it reads a
(B, H, capacity, D) buffer and per-row lengths ``seqlens_k`` (B,) int32, writes each row's new
key/value at column ``seqlens_k[r]`` and attends over that row's ``seqlens_k[r] + 1`` columns only.
When ``past`` and ``present`` are bound to one ``OrtValue`` (io binding), nothing else is written
(``kv_cache: in-place`` in ``model.json``, :data:`attnserve.contract.kinds.IN_PLACE`).

The rewrite is graph surgery on the exported graph, not a second export: the node's folded q/k/v
bias becomes an ``Add`` in front (GroupQueryAttention has no bias input; one on the packed
projection, which the node then reads whole, its ``Split`` dropped), ``self_mask`` and the
nodes only it fed are dropped, ``seqlens_k`` and ``total_sequence_length`` are appended to the
inputs. Cross-attention keeps ``MultiHeadAttention``. onnxruntime's CUDA GroupQueryAttention has
fp16 and bf16 kernels only (``contrib_ops/cuda/bert/group_query_attention.cc`` registers
``MLFloat16`` and ``BFloat16``); fp32 runs it on the CPU.

:func:`attnserve.export.reference.in_place_reference` gives the fixed-seed inputs and PyTorch
outputs of the rewritten graph for ``verification.npz``: rows at different lengths, columns past
each row's length filled with noise (never read, never written), the PyTorch decoder run on the
same rows left-padded and masked.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from attnserve.contract.graph_io import DecoderIO
from attnserve.contract.kinds import IN_PLACE

CAPACITY_DIM = "capacity"


def _self_attention(node: onnx.NodeProto, pasts: set[str]) -> bool:
    return node.op_type == "MultiHeadAttention" and len(node.input) >= 8 and node.input[6] in pasts


def in_place_decoder(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (an exported left-padded decoder) with every self-attention node (the
    ``MultiHeadAttention`` nodes fed a ``past_key`` input) replaced by GroupQueryAttention over a
    cache buffer, in place; returns ``model``. Inputs and outputs become the contract's
    ``DecoderIO.standard(n, "in-place")``."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    pasts = {i.name for i in graph.input if i.name.startswith("past_")}
    io = DecoderIO.standard(len(pasts) // 2, IN_PLACE)
    producer = {out: n for n in graph.node for out in n.output}
    nodes = []
    for node in graph.node:
        if not _self_attention(node, pasts):
            nodes.append(node)
            continue
        q, k, v, bias = node.input[:4]
        heads = next(a.i for a in node.attribute if a.name == "num_heads")
        inputs = [q, k, v]
        split = producer.get(q)
        if _packed_split(split, inputs, graph.node, inits):
            # GroupQueryAttention reads the packed (B, S, 3C) projection itself: no Split, and the
            # folded q/k/v bias (it has no bias input) one Add on the packed projection
            packed = split.input[0]
            if bias:
                name = f"{node.name}_bias"
                nodes.append(helper.make_node("Add", [packed, bias], [f"{name}_out"], name=f"{name}_add"))
                packed = f"{name}_out"
            inputs = [packed, "", ""]
        elif bias:  # another layout: one Add per input
            for j, part in enumerate(np.split(numpy_helper.to_array(inits[bias]), 3)):
                name = f"{node.name}_bias_{j}"
                graph.initializer.append(numpy_helper.from_array(part, name))
                nodes.append(helper.make_node("Add", [inputs[j], name], [f"{name}_out"], name=f"{name}_add"))
                inputs[j] = f"{name}_out"
        nodes.append(
            helper.make_node(
                "GroupQueryAttention",
                [*inputs, node.input[6], node.input[7], io.seqlens, io.total_length],
                list(node.output),
                name=f"{node.name}_gqa",
                domain="com.microsoft",
                num_heads=heads,
                kv_num_heads=heads,
            )
        )
    _keep_what_is_used(graph, _live(nodes, {o.name for o in graph.output}), io)
    return model


def _packed_split(split: onnx.NodeProto | None, inputs: list[str], nodes, inits: dict) -> bool:
    """``split`` cuts the packed q/k/v projection (B, S, 3C) into ``inputs`` along its last axis,
    into equal parts that nothing else reads: GroupQueryAttention can take the projection whole."""
    if split is None or split.op_type != "Split" or list(split.output) != inputs:
        return False
    axis = next((a.i for a in split.attribute if a.name == "axis"), 0)
    sizes = split.input[1] if len(split.input) > 1 else ""
    equal = not sizes or (sizes in inits and len(set(numpy_helper.to_array(inits[sizes]).tolist())) == 1)
    readers = sum(name in inputs for n in nodes for name in n.input)
    return axis in (-1, 2) and equal and readers == 3


def _keep_what_is_used(graph: onnx.GraphProto, nodes: list, io: DecoderIO) -> None:
    """``graph`` with ``nodes``, the initializers, inputs and value infos they use, and the
    contract's in-place inputs (sequence lengths, total length, caches of ``capacity`` steps)."""
    used = {name for node in nodes for name in reads(node)}
    del graph.node[:]
    graph.node.extend(nodes)
    kept = [t for t in graph.initializer if t.name in used]  # the folded biases, now split
    del graph.initializer[:]
    graph.initializer.extend(kept)
    inputs = {i.name: i for i in graph.input if i.name in used}
    del graph.input[:]
    graph.input.extend(inputs[name] for name in io.inputs[:-2])
    graph.input.append(helper.make_tensor_value_info(io.seqlens, TensorProto.INT32, ["batch"]))
    graph.input.append(helper.make_tensor_value_info(io.total_length, TensorProto.INT32, []))
    for value in [*graph.input, *graph.output]:
        if value.name in io.past or value.name in io.present:  # (B, H, capacity, D)
            dim = value.type.tensor_type.shape.dim[2]
            dim.Clear()
            dim.dim_param = CAPACITY_DIM
    produced = {o for node in nodes for o in node.output}
    kept_info = [v for v in graph.value_info if v.name in produced]  # the types int8 quantization reads
    del graph.value_info[:]
    graph.value_info.extend(kept_info)


def _live(nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
    """``nodes`` without those whose outputs nobody reads (what only ``self_mask`` fed)."""
    while True:
        used = {name for node in nodes for name in reads(node)} | outputs
        live = [n for n in nodes if any(o in used for o in n.output)]
        if len(live) == len(nodes):
            return live
        nodes = live


def reads(node: onnx.NodeProto) -> set[str]:
    """The values ``node`` reads: its inputs and what its subgraphs (an ``If``'s branches, as in a
    screened vocabulary projection) take from the enclosing graph."""
    names = set(node.input)
    for attr in node.attribute:
        for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
            inner = {v.name for v in [*sub.input, *sub.initializer]} | {o for n in sub.node for o in n.output}
            names |= {name for n in sub.node for name in reads(n)} - inner
    return names
