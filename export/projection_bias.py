"""The decoder's logits bias inside its vocabulary projection's matrix product.

The exporter writes ``logits = Gemm(h, W, transB=1) + bias`` (Marian's final logits bias).
The Add is a kernel of its own that reads and writes the whole (B, V) logits again: 5.8 ms
of a 121 ms decoder step at 128 rows of a 58k vocabulary (beam 4 at batch 32, one CPU
thread), where the product itself takes 57 ms. :func:`fold_projection_bias` appends the bias
to the weight as one more column and a column of ones to the hidden state:

    logits = Gemm(Concat(h, 1), [W | bias], transB=1)

so the bias is the product's last term, added in the same pass (the product is one column of
513 longer, which costs nothing measurable). Every other reader of ``W`` (the tied target
embedding, the screened projection's exact rescoring) gathers rows of ``[W | bias]`` and
slices the bias column off again; ``W`` is stored once.

The rewrite covers the projection wherever it is (the screened decoder's ``If`` branches
hold it twice) and gives up, leaving the graph as it was, on any shape it does not know:
another op reading ``W``, or a Gemm with other attributes.

Only for fp32 graphs: an int8 quantizer would give the bias column the weight's scale.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from attnserve.contract.manifest import Manifest

log = logging.getLogger(__name__)

MIN_OPSET = 15  # Shape's start/end attributes
ONE = "projection_bias_one"  # (1,) int64 initializer: the ones column's width, and its slice axis' end
WITH_BIAS = "{}.with_bias"  # the name of [W | bias]


@dataclass(frozen=True)
class _Fold:
    graph: onnx.GraphProto  # where the projection is (the main graph or a branch)
    gemm: onnx.NodeProto
    add: onnx.NodeProto
    bias: str


def fold_projection_bias(model: onnx.ModelProto) -> int:
    """Rewrite ``model`` in place (see the module docstring); the number of projections
    rewritten (0: unchanged)."""
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset < MIN_OPSET:
        return 0
    inits = {i.name: i for i in model.graph.initializer}
    graphs = list(_graphs(model.graph))
    uses: dict[str, list[tuple[onnx.GraphProto, onnx.NodeProto]]] = {}
    for g in graphs:
        for node in g.node:
            for name in node.input:
                uses.setdefault(name, []).append((g, node))
    folds: dict[str, list[_Fold]] = {}
    for g in graphs:
        for weight, fold in _projections(g, inits, uses):
            folds.setdefault(weight, []).append(fold)
    done, inputs = 0, {i.name for i in model.graph.input}
    for weight, found in folds.items():
        gathers = [node for _, node in uses[weight] if all(node is not f.gemm for f in found)]
        alone = len({f.bias for f in found}) == 1 and weight not in inputs  # not an overridable input
        if not alone or not all(_plain_gather(n, weight) for n in gathers):
            log.info("the projection of %s is read otherwise: its bias stays a separate Add", weight)
            continue
        _rewrite(model, weight, found, gathers, uses)
        done += len(found)
    return done


def fold_decoder_bias(directory: Path, manifest: Manifest) -> int:
    """:func:`fold_projection_bias` on ``directory``'s decoder, saved when rewritten."""
    path = directory / manifest.graphs["decoder"].file
    model = onnx.load(str(path))
    done = fold_projection_bias(model)
    if done:
        onnx.save(model, str(path))
    return done


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every subgraph in it, depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            for sub in attr.graphs:
                yield from _graphs(sub)


def _attr(node: onnx.NodeProto, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _projections(g: onnx.GraphProto, inits: dict, uses: dict) -> Iterator[tuple[str, _Fold]]:
    """(weight, fold) of every ``Add(Gemm(h, W, transB=1), bias)`` of ``g``, W (V, C) and
    bias (V,) float initializers of the main graph, the Gemm read by the Add alone."""
    producer = {o: n for n in g.node for o in n.output}
    outputs = {o.name for o in g.output}
    for add in g.node:
        if add.op_type != "Add" or add.domain not in ("", "ai.onnx") or len(add.input) != 2:
            continue
        for product, bias in (add.input, add.input[::-1]):
            gemm = producer.get(product)
            if gemm is None or not _plain_gemm(gemm, inits) or product in outputs:
                continue
            if [n for _, n in uses.get(product, [])] != [add]:
                continue
            w, b = inits[gemm.input[1]], inits.get(bias)
            if b is None or b.data_type != TensorProto.FLOAT or list(b.dims) != [w.dims[0]]:
                continue
            yield gemm.input[1], _Fold(g, gemm, add, bias)
            break


def _plain_gemm(node: onnx.NodeProto, inits: dict) -> bool:
    if node.op_type != "Gemm" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return False
    w = inits.get(node.input[1])
    return (
        w is not None
        and w.data_type == TensorProto.FLOAT
        and len(w.dims) == 2
        and _attr(node, "transB", 0) == 1
        and _attr(node, "transA", 0) == 0
        and _attr(node, "alpha", 1.0) == 1.0
    )


def _plain_gather(node: onnx.NodeProto, weight: str) -> bool:
    """A row lookup in ``weight``: what the rewrite can point at ``[W | bias]``."""
    return (
        node.op_type == "Gather"
        and node.domain in ("", "ai.onnx")
        and node.input[0] == weight
        and weight not in node.input[1:]
        and _attr(node, "axis", 0) == 0
    )


def _rewrite(model: onnx.ModelProto, weight: str, folds: list[_Fold], gathers: list, uses: dict) -> None:
    inits = {i.name: i for i in model.graph.initializer}
    w = numpy_helper.to_array(inits[weight])  # (V, C)
    bias = numpy_helper.to_array(inits[folds[0].bias])  # (V,)
    merged = WITH_BIAS.format(weight)
    model.graph.initializer.remove(inits[weight])
    stale = [v for v in model.graph.value_info if v.name == weight]
    for v in stale:
        model.graph.value_info.remove(v)
    model.graph.initializer.append(numpy_helper.from_array(np.concatenate([w, bias[:, None]], axis=1), merged))
    consts = {f"{merged}.width": [w.shape[1]], f"{merged}.zero": [0], f"{merged}.last_axis": [-1]}
    for name, value in consts.items():  # main-graph initializers: every branch sees them
        model.graph.initializer.append(numpy_helper.from_array(np.array(value, np.int64), name))
    if ONE not in inits:
        model.graph.initializer.append(numpy_helper.from_array(np.array([1], np.int64), ONE))
    for fold in folds:
        _fold_one(fold, merged)
    for node in gathers:
        _slice_after(node, merged, uses)
    if all(any(n is f.add for f in folds) for _, n in uses.get(folds[0].bias, [])):
        model.graph.initializer.remove(inits[folds[0].bias])


def _fold_one(fold: _Fold, merged: str) -> None:
    """``Gemm(Concat(h, ones (M, 1)), [W | bias], transB=1)`` in place of ``fold``'s Gemm + Add."""
    h, y = fold.gemm.input[0], fold.add.output[0]
    n = helper.make_node
    one = helper.make_tensor("value", TensorProto.FLOAT, [1], [1.0])
    nodes = [
        n("Shape", [h], [f"{y}.rows"], start=0, end=1),  # (1,) M
        n("Concat", [f"{y}.rows", ONE], [f"{y}.ones_shape"], axis=0),  # (2,) [M, 1]
        n("ConstantOfShape", [f"{y}.ones_shape"], [f"{y}.ones"], value=one),  # (M, 1)
        n("Concat", [h, f"{y}.ones"], [f"{y}.with_one"], axis=1),  # (M, C + 1)
        n("Gemm", [f"{y}.with_one", merged], [y], transB=1, name=fold.gemm.name or None),  # (M, V)
    ]
    graph = fold.graph
    at = list(graph.node).index(fold.gemm)
    graph.node.remove(fold.gemm)
    graph.node.remove(fold.add)
    for i, node in enumerate(nodes):
        graph.node.insert(at + i, node)


def _slice_after(node: onnx.NodeProto, merged: str, uses: dict) -> None:
    """Point the row lookup ``node`` at ``[W | bias]`` and slice its rows back to C columns."""
    graph = next(g for g, n in uses[node.input[0]] if n is node)
    out = node.output[0]
    node.input[0] = merged
    node.output[0] = f"{out}.with_bias"
    cut = helper.make_node("Slice", [node.output[0], f"{merged}.zero", f"{merged}.width", f"{merged}.last_axis"], [out])
    graph.node.insert(list(graph.node).index(node) + 1, cut)
