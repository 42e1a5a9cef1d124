"""The layers' biases inside their matrix products, for fp32 graphs run on the CPU.

The exporter writes a layer's product with a bias as ``Add(MatMul(h, W), b)``, h (B, S, C).
onnxruntime's CPU MatMul has no bias term, so the Add is a kernel of its own that reads and
writes the whole product again: 2.2 ms of a 117 ms decoder run at 128 rows (beam 4 at batch 32
of opus-mt's shape, one thread). :func:`fold_layer_biases` appends the bias to the weight as one
more row and a column of ones to the product's input:

    MatMul(Concat(h, ones), [W; b])

so the bias is the product's last term, added in the same pass (a product one input longer
costs nothing measurable: benchmarks/README.md). The ones (B, S, 1) are built once per graph
from the token ids, whose (B, S) every rewritten input shares (checked on the graph's shapes),
so the Concat replaces the Add one for one and reads C columns where the Add read N.

Left as they are: products whose sum goes on into another ``Add`` (a residual: onnxruntime's
SkipLayerNormalization takes that bias in its own kernel), weights read elsewhere, and any
input whose leading dimensions are not the ids' by name. Only for fp32: an int8 quantizer would
give the bias row the weight's scale.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

log = logging.getLogger(__name__)

ONES = "layer_bias.ones"  # (B, S, 1) float32 ones, built from the ids
ONE = "layer_bias.one"  # (1,) int64: the ones' last dimension
WITH_BIAS = "{}.with_bias"  # the name of [W; b]


@dataclass(frozen=True)
class _Fold:
    matmul: onnx.NodeProto
    add: onnx.NodeProto
    weight: str
    bias: str


def fold_layer_biases(model: onnx.ModelProto, ids: str) -> int:
    """Rewrite ``model`` in place (see the module docstring); ``ids`` names the (B, S) token-id
    input whose leading dimensions the products' inputs share. The number of products rewritten."""
    graph = model.graph
    dims = _dims(graph, ids)
    if dims is None or len(dims) != 2 or not all(isinstance(d, str) for d in dims):
        return 0
    folds = list(_folds(graph, dims))
    if not folds:
        return 0
    inits = {i.name: i for i in graph.initializer}
    n = helper.make_node
    one = helper.make_tensor("value", TensorProto.FLOAT, [1], [1.0])
    graph.initializer.append(numpy_helper.from_array(np.array([1], np.int64), ONE))
    ones = [
        n("Shape", [ids], [f"{ONES}.lead"]),  # (2,) [B, S]
        n("Concat", [f"{ONES}.lead", ONE], [f"{ONES}.shape"], axis=0),  # (3,) [B, S, 1]
        n("ConstantOfShape", [f"{ONES}.shape"], [ONES], value=one),  # (B, S, 1)
    ]
    for fold in folds:
        w = numpy_helper.to_array(inits[fold.weight])  # (C, N)
        b = numpy_helper.to_array(inits[fold.bias])  # (N,)
        merged = WITH_BIAS.format(fold.weight)
        graph.initializer.remove(inits[fold.weight])
        graph.initializer.append(numpy_helper.from_array(np.concatenate([w, b[None, :]], axis=0), merged))
        h, y = fold.matmul.input[0], fold.add.output[0]
        at = list(graph.node).index(fold.matmul)
        graph.node.remove(fold.matmul)
        graph.node.remove(fold.add)
        graph.node.insert(at, n("MatMul", [f"{y}.with_one", merged], [y], name=fold.matmul.name or None))
        graph.node.insert(at, n("Concat", [h, ONES], [f"{y}.with_one"], axis=-1))  # (B, S, C + 1)
    for node in reversed(ones):  # first in the graph: the ids are an input
        graph.node.insert(0, node)
    stale = {f.weight for f in folds} | {f.matmul.output[0] for f in folds}
    for v in [v for v in graph.value_info if v.name in stale]:
        graph.value_info.remove(v)
    used = {name for node in graph.node for name in node.input}
    for bias in {f.bias for f in folds} - used:
        graph.initializer.remove(next(i for i in graph.initializer if i.name == bias))
    return len(folds)


def fold_graph_biases(path: Path, ids: str) -> int:
    """:func:`fold_layer_biases` on the graph at ``path``, saved when rewritten."""
    model = onnx.load(str(path))
    done = fold_layer_biases(model, ids)
    if done:
        onnx.save(model, str(path))
    log.debug("%s: %d layer biases folded into their products", path.name, done)
    return done


def _dims(graph: onnx.GraphProto, name: str) -> list | None:
    for v in [*graph.input, *graph.value_info, *graph.output]:
        if v.name == name and v.type.HasField("tensor_type"):
            return [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
    return None


def _folds(graph: onnx.GraphProto, lead: list) -> list[_Fold]:
    """Every ``Add(MatMul(h, W), b)`` of ``graph`` that can be folded (see the module docstring)."""
    inits = {i.name: i for i in graph.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    found = []
    for mm in graph.node:
        if mm.op_type != "MatMul" or mm.domain not in ("", "ai.onnx"):
            continue
        w = inits.get(mm.input[1])
        dims = _dims(graph, mm.input[0])
        after = readers.get(mm.output[0], [])
        if w is None or w.data_type != TensorProto.FLOAT or len(w.dims) != 2 or len(readers[mm.input[1]]) != 1:
            continue
        if dims is None or dims[:-1] != lead or len(after) != 1 or mm.output[0] in outputs:
            continue
        add = after[0]
        if add.op_type != "Add" or add.domain not in ("", "ai.onnx") or len(add.input) != 2:
            continue
        bias = add.input[1] if add.input[0] == mm.output[0] else add.input[0]
        b = inits.get(bias)
        if b is None or b.data_type != TensorProto.FLOAT or list(b.dims) != [w.dims[1]]:
            continue
        if any(r.op_type == "Add" for r in readers.get(add.output[0], [])):
            continue  # a residual sum: SkipLayerNormalization adds this bias in its own kernel
        found.append(_Fold(mm, add, mm.input[1], bias))
    return found
