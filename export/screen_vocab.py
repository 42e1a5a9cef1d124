"""An exact int8-screened vocabulary projection for decoder steps that read only the argmax.

A greedy step of an fp32 decoder at opus-mt's shape spends about half its time reading the
output projection (58,101 x 512 fp32, 119 MB). When nothing but each row's argmax is read, most
of that is wasted: :func:`add_screen` rewrites the decoder so that, when its bool input
``screen_argmax`` is true, it

1. computes approximate logits with 7-bit int8 weights (one scale per vocabulary row) and uint8
   activations (``DynamicQuantizeLinear``) in one ``MatMulIntegerToFloat``: a quarter of the
   bytes. The bias it adds is the logits bias with -inf on the ids the engine never picks
   (``never_ids``: pad, start), so they are out of the race from here on;
2. bounds the approximation's error on every row by Cauchy-Schwarz,
   ``|exact_j - approx_j| <= ||h - h_hat|| max||w|| + ||h_hat|| max||w - w_hat|| + margin``
   (the weight norms are computed here, at export; the margin, 1e-4 of ``||h|| max||w||`` and of
   the best approximate logit, covers fp32 rounding on both sides);
3. keeps as candidates the words whose approximate logit is within twice the bound of the row's
   best: no other word can beat all of them exactly. They are found block by block (:data:`BLOCK`
   words): the blocks whose best approximate logit reaches the cut, then those blocks' words, so
   no (B, V) mask is written or searched. Only the candidates' logits are computed in
   fp32 (their rows gathered from the same weight), and each row's best of them is its argmax
   (ties: the lowest id): nothing of size (B, V) is written. When the batch has more than ``cap``
   candidates a row on average (flat rows), the full fp32 projection runs and its argmax is taken.

Fed true, the decoder's second output ``screen_ids`` (B,) int64 is each row's argmax over the
ids but ``never_ids`` (exact: the word of the full projection's largest fp32 logit, up to the
order of the fp32 additions), and ``logits`` is (B, 1), that logit. Fed false (the default),
``logits`` is the full (B, V) projection and ``screen_ids`` is empty; the graph declares the
logits' width symbolic for that. The input has a default initializer ``False``: callers that do
not feed it get the full projection, and onnxruntime lists it among the session's overridable
initializers, not its inputs, so ``model.json``'s input and output lists are unchanged.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from attnserve.contract.graph_io import SCREEN_ARGMAX as SCREEN_INPUT
from attnserve.contract.graph_io import SCREEN_IDS
from attnserve.contract.manifest import Manifest

log = logging.getLogger(__name__)

MIN_OPSET = 18  # ReduceL2 / ReduceMax with their axes as an input
WEIGHT_LEVELS = 63  # 7-bit weights: u8 x s8 pairs never saturate int16 on AVX2 / AVX-512F kernels
BLOCK = 64  # words per block: the candidates are found among the blocks whose best word is one


@dataclass(frozen=True)
class ScreenSettings:
    """``never_ids``: the ids the engine never picks (masked before its argmax); ``cap``: candidates
    per row, on average over the batch, beyond which the full projection runs."""

    never_ids: tuple[int, ...]
    cap: int = 256


@dataclass(frozen=True)
class Projection:
    """The decoder's last node(s): ``logits = hidden @ weight.T (+ bias)``."""

    hidden: str
    weight: str
    bias: str | None
    nodes: tuple[onnx.NodeProto, ...]


def find_projection(model: onnx.ModelProto, output: str = "logits") -> Projection | None:
    """``Gemm(h, W, transB=1)`` -> output, optionally followed by ``Add(., bias)``; None if absent."""
    inits = {i.name for i in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    last = producers.get(output)
    nodes, bias = [], None
    if last is not None and last.op_type == "Add":
        a, b = last.input
        last, bias, nodes = producers.get(a), b, [last]
        if bias not in inits:
            return None
    if last is None or last.op_type != "Gemm" or len(last.input) != 2:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in last.attribute}
    if attrs.get("transB") != 1 or attrs.get("transA", 0) != 0 or attrs.get("alpha", 1.0) != 1.0:
        return None
    hidden, weight = last.input
    if weight not in inits:
        return None
    return Projection(hidden, weight, bias, (last, *nodes))


def quantize_rows(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """weight (V, D) float32 -> int8 (V, D) in [-63, 63] and one scale per row (V,) float32."""
    peak = np.abs(weight).max(axis=1)
    scale = np.where(peak > 0, peak / WEIGHT_LEVELS, 1.0).astype(np.float32)
    q = np.clip(np.rint(weight / scale[:, None]), -WEIGHT_LEVELS, WEIGHT_LEVELS).astype(np.int8)
    return q, scale


def add_screen(model: onnx.ModelProto, settings: ScreenSettings) -> bool:
    """Rewrite ``model`` in place (see the module docstring); False (and unchanged) when its
    ``logits`` do not come from a plain projection, or its opset is older than :data:`MIN_OPSET`."""
    proj = find_projection(model)
    inits = {i.name: i for i in model.graph.initializer}
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if proj is None or opset < MIN_OPSET:
        log.info("no vocabulary projection to screen (or opset %d < %d)", opset, MIN_OPSET)
        return False
    weight = numpy_helper.to_array(inits[proj.weight]).astype(np.float32)  # (V, D)
    if weight.shape[0] <= len(settings.never_ids) + 1:
        return False
    bias = numpy_helper.to_array(inits[proj.bias]).astype(np.float32) if proj.bias is not None else None
    consts = _constants(weight, bias, settings)
    for name, array in consts.items():
        model.graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))
    full = _full_branch(proj)
    screened = _screen_branch(proj)
    logits = proj.nodes[-1].output[0]
    node = helper.make_node(
        "If", [SCREEN_INPUT], [logits, SCREEN_IDS], then_branch=screened, else_branch=full, name="screen"
    )
    at = min(i for i, n in enumerate(model.graph.node) if n in proj.nodes)
    for n in proj.nodes:
        model.graph.node.remove(n)
    model.graph.node.insert(at, node)
    model.graph.input.append(helper.make_tensor_value_info(SCREEN_INPUT, TensorProto.BOOL, []))
    _declare_outputs(model.graph, logits)
    model.graph.initializer.append(numpy_helper.from_array(np.array(False), SCREEN_INPUT))
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return True


def _constants(weight: np.ndarray, bias: np.ndarray | None, settings: ScreenSettings) -> dict[str, np.ndarray]:
    """The screen's initializers, by name: the 7-bit weights, their error bounds, the masks."""
    q, scale = quantize_rows(weight)
    dequant = q.astype(np.float32) * scale[:, None]
    w_max = float(np.linalg.norm(weight, axis=1).max())
    d_max = float(np.linalg.norm(weight - dequant, axis=1).max())
    V = len(weight)
    blocks = -(-V // BLOCK)
    padded = blocks * BLOCK - V  # words that fill the last block: no weight, -inf
    screen_bias = np.zeros(V, np.float32) if bias is None else bias.copy()
    screen_bias[list(settings.never_ids)] = -np.inf
    never = np.zeros(V, np.float32)
    never[list(settings.never_ids)] = -np.inf
    return {
        "screen_wq": np.pad(q.T, ((0, 0), (0, padded))),  # (D, V') int8: MatMulIntegerToFloat's B
        "screen_wscale": np.pad(scale, (0, padded), constant_values=1.0),  # (V',)
        "screen_wmax": np.float32(w_max),
        "screen_dmax": np.float32(d_max),
        "screen_bias": np.pad(screen_bias, (0, padded), constant_values=-np.inf),  # (V',) the logits bias,
        # -inf on the ids the engine never picks
        "screen_blocks": np.array([0, blocks, BLOCK], np.int64),  # (B, V') -> (B, blocks, BLOCK)
        "screen_block": np.array(BLOCK, np.int64),
        "screen_axis2": np.array([2], np.int64),
        "screen_flat": np.array([-1], np.int64),
        "screen_rel_margin": np.float32(1e-4),
        "screen_two": np.float32(2.0),
        "screen_cap": np.array([settings.cap], np.int64),
        "screen_zero_i": np.array(0, np.int64),
        "screen_zero_1d": np.array([0], np.int64),
        "screen_one_i": np.array(1, np.int64),
        "screen_minus_inf": np.array([-np.inf], np.float32),
        "screen_axis1": np.array([1], np.int64),
        "screen_never": never,  # (V,) -inf on the ids the engine never picks: the fallback's mask
        "screen_no_id": np.array([np.iinfo(np.int64).max], np.int64),  # above every id: min-reduced away
        "screen_no_ids": np.zeros(0, np.int64),  # the full projection's screen_ids
    }


def _declare_outputs(graph: onnx.GraphProto, logits: str) -> None:
    """``logits`` (B, V) becomes (B, logits_width): (B, 1) when screened; ``screen_ids`` (B,) int64 is
    declared after the other outputs, so the listed ones keep their positions."""
    out = next(o for o in graph.output if o.name == logits)
    dims = out.type.tensor_type.shape.dim
    batch = dims[0].dim_param or "batch" if len(dims) else "batch"
    width = dims[-1] if len(dims) else None
    if width is not None:
        width.Clear()
        width.dim_param = "logits_width"
    graph.output.append(helper.make_tensor_value_info(SCREEN_IDS, TensorProto.INT64, [batch]))


def screen_decoder(directory: Path, manifest: Manifest) -> Manifest:
    """Screen ``directory``'s decoder (:func:`add_screen`) for the tokenizer's never-generated ids;
    the manifest records it (``extra.screen_vocab``), or is returned as is when the graph has no
    plain projection to screen."""
    path = directory / manifest.graphs["decoder"].file
    model = onnx.load(str(path))
    settings = ScreenSettings(tuple(manifest.tokenizer.never_generate))
    if not add_screen(model, settings):
        return manifest
    onnx.save(model, str(path))
    record = {
        "input": SCREEN_INPUT,
        "never_ids": list(settings.never_ids),
        "cap_per_row": settings.cap,
        "output": SCREEN_IDS,
        "weights": f"int8, one scale per vocabulary row, |q| <= {WEIGHT_LEVELS}",
    }
    return dataclasses.replace(manifest, extra={**manifest.extra, "screen_vocab": record})


def _out(name: str, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, None)


def _full_branch(proj: Projection) -> onnx.GraphProto:
    """The original fp32 projection, as a subgraph with its own output names."""
    gemm = helper.make_node("Gemm", [proj.hidden, proj.weight], ["full_linear"], transB=1)
    nodes = [gemm]
    if proj.bias is not None:
        nodes.append(helper.make_node("Add", ["full_linear", proj.bias], ["full_logits"]))
    else:
        nodes.append(helper.make_node("Identity", ["full_linear"], ["full_logits"]))
    nodes.append(helper.make_node("Identity", ["screen_no_ids"], ["full_ids"]))  # (0,)
    return helper.make_graph(nodes, "screen_full", [], [_out("full_logits"), _out("full_ids", TensorProto.INT64)])


def _fallback_branch(proj: Projection) -> onnx.GraphProto:
    """Flat rows: the full fp32 projection, the never-picked ids masked, and each row's argmax."""
    n = helper.make_node
    nodes = [n("Gemm", [proj.hidden, proj.weight], ["f_linear"], transB=1)]
    linear = "f_linear"
    if proj.bias is not None:
        nodes.append(n("Add", ["f_linear", proj.bias], ["f_logits"]))
        linear = "f_logits"
    nodes += [
        n("Add", [linear, "screen_never"], ["f_masked"]),  # (B, V)
        n("ReduceMax", ["f_masked", "screen_axis1"], ["f_best"], keepdims=1),  # (B, 1)
        n("ArgMax", ["f_masked"], ["f_ids"], axis=1, keepdims=0),  # (B,) the first maximum
    ]
    return helper.make_graph(nodes, "screen_fallback", [], [_out("f_best"), _out("f_ids", TensorProto.INT64)])


def _screen_branch(proj: Projection) -> onnx.GraphProto:
    h = proj.hidden
    n = helper.make_node
    nodes = [
        n("DynamicQuantizeLinear", [h], ["s_hq", "s_hs", "s_hz"]),  # h: (B, D) -> uint8, per tensor
        n(
            "MatMulIntegerToFloat",
            ["s_hq", "screen_wq", "s_hs", "screen_wscale", "s_hz", "", "screen_bias"],
            ["s_approx"],
            domain="com.microsoft",
        ),  # (B, V')
        n("DequantizeLinear", ["s_hq", "s_hs", "s_hz"], ["s_hhat"]),  # (B, D)
        n("Sub", [h, "s_hhat"], ["s_herr"]),
        n("ReduceL2", ["s_herr", "screen_axis1"], ["s_enorm"], keepdims=1),  # (B, 1)
        n("ReduceL2", ["s_hhat", "screen_axis1"], ["s_hnorm"], keepdims=1),  # (B, 1)
        n("Mul", ["s_enorm", "screen_wmax"], ["s_b1"]),
        n("Mul", ["s_hnorm", "screen_dmax"], ["s_b2"]),
        n("ReduceL2", [h, "screen_axis1"], ["s_norm"], keepdims=1),
        n("Mul", ["s_norm", "screen_wmax"], ["s_scale"]),
        n("Mul", ["s_scale", "screen_rel_margin"], ["s_b3"]),  # fp32 rounding of both sides
        n("Sum", ["s_b1", "s_b2", "s_b3"], ["s_bound"]),  # (B, 1)
        n("Reshape", ["s_approx", "screen_blocks"], ["s_blocks"]),  # (B, nb, BLOCK), a view
        n("ReduceMax", ["s_blocks", "screen_axis2"], ["s_peaks"], keepdims=0),  # (B, nb)
        n("ReduceMax", ["s_peaks", "screen_axis1"], ["s_keep"], keepdims=1),  # (B, 1) never ids are -inf
        n("Abs", ["s_keep"], ["s_keep_abs"]),
        n("Mul", ["s_keep_abs", "screen_rel_margin"], ["s_b4"]),  # fp32 rounding of the bias add
        n("Mul", ["s_bound", "screen_two"], ["s_two_bound"]),
        n("Sub", ["s_keep", "s_two_bound"], ["s_cut0"]),
        n("Sub", ["s_cut0", "s_b4"], ["s_cut"]),  # (B, 1)
        *_candidates(),  # s_rows, s_cols (M,) and the batch size s_batch (1,)
        n("Shape", ["s_rows"], ["s_count"]),  # (1,) M
        n("Mul", ["s_batch", "screen_cap"], ["s_limit"]),
        n("LessOrEqual", ["s_count", "s_limit"], ["s_few1"]),
        n("Squeeze", ["s_few1"], ["s_few"]),
        n("If", ["s_few"], ["s_best", "s_ids"], then_branch=_exact_branch(proj), else_branch=_fallback_branch(proj)),
    ]
    return helper.make_graph(nodes, "screen_int8", [], [_out("s_best"), _out("s_ids", TensorProto.INT64)])


def _candidates() -> list[onnx.NodeProto]:
    """The words whose approximate logit reaches their row's cut, (row, word) as ``s_rows`` and
    ``s_cols`` (M,): first the blocks whose best word does (B x V / BLOCK entries searched), then
    the words of those blocks, so that no (B, V) mask is written or searched."""
    n = helper.make_node
    return [
        n("GreaterOrEqual", ["s_peaks", "s_cut"], ["s_bmask"]),  # (B, nb)
        n("NonZero", ["s_bmask"], ["s_bwhere"]),  # (2, Mb) rows, blocks
        n("Transpose", ["s_bwhere"], ["s_bindex"], perm=[1, 0]),  # (Mb, 2)
        n("GatherND", ["s_blocks", "s_bindex"], ["s_bvals"]),  # (Mb, BLOCK)
        n("Gather", ["s_bwhere", "screen_zero_i"], ["s_brows"], axis=0),  # (Mb,)
        n("Gather", ["s_bwhere", "screen_one_i"], ["s_bcols"], axis=0),  # (Mb,)
        n("Gather", ["s_cut", "s_brows"], ["s_bcut"], axis=0),  # (Mb, 1)
        n("GreaterOrEqual", ["s_bvals", "s_bcut"], ["s_mask"]),  # (Mb, BLOCK)
        n("NonZero", ["s_mask"], ["s_where"]),  # (2, M) block entries, places in the block
        n("Gather", ["s_where", "screen_zero_i"], ["s_entry"], axis=0),  # (M,)
        n("Gather", ["s_where", "screen_one_i"], ["s_place"], axis=0),  # (M,)
        n("Gather", ["s_brows", "s_entry"], ["s_rows"], axis=0),  # (M,)
        n("Gather", ["s_bcols", "s_entry"], ["s_block_of"], axis=0),  # (M,)
        n("Mul", ["s_block_of", "screen_block"], ["s_first"]),
        n("Add", ["s_first", "s_place"], ["s_cols"]),  # (M,)
        n("Shape", ["s_approx"], ["s_shape"]),
        n("Gather", ["s_shape", "screen_zero_1d"], ["s_batch"], axis=0),  # (1,) B
    ]


def _exact_branch(proj: Projection) -> onnx.GraphProto:
    """fp32 logits of the candidates ``s_rows``, ``s_cols`` (M,) and each row's best of them: its
    logit (B, 1) and its word (B,), the lowest id among equal logits (candidates come in id order)."""
    n = helper.make_node
    nodes = [
        n("Gather", [proj.weight, "s_cols"], ["e_w"], axis=0),  # (M, D)
        n("Gather", [proj.hidden, "s_rows"], ["e_h"], axis=0),  # (M, D)
        n("Unsqueeze", ["e_w", "screen_axis1"], ["e_w3"]),  # (M, 1, D)
        n("Unsqueeze", ["e_h", "screen_axis2"], ["e_h3"]),  # (M, D, 1)
        n("MatMul", ["e_w3", "e_h3"], ["e_dot3"]),  # (M, 1, 1)
        n("Reshape", ["e_dot3", "screen_flat"], ["e_dot"]),  # (M,)
    ]
    value = "e_dot"
    if proj.bias is not None:
        nodes += [
            n("Gather", [proj.bias, "s_cols"], ["e_bias"], axis=0),
            n("Add", ["e_dot", "e_bias"], ["e_exact"]),
        ]
        value = "e_exact"
    nodes += [
        n("Expand", ["screen_minus_inf", "s_batch"], ["e_base"]),  # (B,)
        n("ScatterElements", ["e_base", "s_rows", value], ["e_best1"], axis=0, reduction="max"),  # (B,)
        n("Gather", ["e_best1", "s_rows"], ["e_row_best"], axis=0),  # (M,)
        n("Equal", [value, "e_row_best"], ["e_won"]),  # (M,)
        n("Where", ["e_won", "s_cols", "screen_no_id"], ["e_keys"]),  # (M,)
        n("Expand", ["screen_no_id", "s_batch"], ["e_none"]),  # (B,)
        n("ScatterElements", ["e_none", "s_rows", "e_keys"], ["e_first"], axis=0, reduction="min"),  # (B,)
        n("Equal", ["e_first", "screen_no_id"], ["e_empty"]),  # a row with no candidate (NaN hidden state):
        n("Where", ["e_empty", "screen_zero_i", "e_first"], ["e_ids"]),  # id 0, an argmax of its -inf row
        n("Unsqueeze", ["e_best1", "screen_axis1"], ["e_best"]),  # (B, 1)
    ]
    return helper.make_graph(nodes, "screen_exact", [], [_out("e_best"), _out("e_ids", TensorProto.INT64)])
