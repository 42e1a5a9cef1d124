"""Lower-precision graphs: int8 (onnxruntime dynamic quantization, CPU) and fp16 (CUDA).

Both rewrite an exported fp32 ``.onnx`` file and keep its inputs and outputs (names,
dtypes) unchanged, so ``model.json`` and the server's I/O code stay the same; only
``precision`` changes. Both keep exactly one attention node per attention call (checked).

int8 (``quantize_dynamic``: weights QInt8 per tensor in 7 bits, activations quantized on the fly;
the scheme, and why, is :data:`INT8_SCHEME`, recorded in ``model.json`` and ``export-report.json``):

- every MatMul with a constant weight becomes MatMulInteger;
- ``Gemm`` nodes are first rewritten to MatMul (+ Add) on their own transposed copy of
  the weight. onnxruntime's quantizer would otherwise transpose the initializer in
  place, which breaks a weight shared with a ``Gather``: the tied embedding / output
  projection of the translator;
- embedding tables (``Gather`` on a float initializer) are stored as int8 with one
  scale and dequantized after the lookup (``DequantizeLinear``). When the same table is
  also the (tied) output projection, the int8 table is stored once and the projection
  reads it through a ``Transpose`` that onnxruntime folds when the session is built.
  Without this the translator's vocabulary-sized table would stay fp32 twice over and
  the files would shrink by ~1.5x instead of ~4x.

fp16: ``onnxruntime.transformers.float16.convert_float_to_float16`` with
``keep_io_types`` (inputs and outputs stay float32, but an in-place decoder's cache buffers).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from attnserve.contract.kinds import PRECISIONS
from attnserve.contract.references import TOLERANCES, Tolerance  # noqa: F401 - re-exported

from .onnx_nodes import count_attention_nodes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Int8Scheme:
    """How ``--precision int8`` quantizes, as ``quantize_dynamic`` takes it.

    ``reduce_range`` (weights in [-64, 64]) is what makes a graph portable: onnxruntime multiplies
    uint8 activations by int8 weights, and on CPUs without VNNI (AVX2, AVX-512F alone) its kernel
    (``vpmaddubsw``) adds each pair of products in int16, which saturates when weights use all 8
    bits (255 * 127 * 2 > 32767): the same graph then computes garbage there while it verifies on
    a VNNI or AMX machine (int32 sums). With 7-bit weights every pair fits (255 * 64 * 2 < 32767),
    so the numbers are the same on every CPU, and the kernels are the same fast ones.
    """

    weight_type: str = "int8"  # "int8" (QInt8, symmetric) | "uint8" (QUInt8: u8 x u8 kernels, exact, slower)
    reduce_range: bool = True
    per_channel: bool = False  # one scale per output column; per tensor keeps the tied table shared

    @property
    def portable(self) -> bool:
        """Computes the same on AVX2, AVX-512, VNNI and AMX (no int16 saturation anywhere)."""
        return self.weight_type == "uint8" or self.reduce_range

    def to_json(self) -> dict[str, object]:
        return {
            "weights": f"{self.weight_type}, {'per channel' if self.per_channel else 'per tensor'}, "
            + ("7-bit range" if self.reduce_range else "full range"),
            "activations": "uint8, dynamic (per tensor, computed per run)",
            "reduce_range": self.reduce_range,
            "per_channel": self.per_channel,
            "portable": self.portable,
            "why": INT8_WHY,
        }


INT8_WHY = (
    "7-bit int8 weights: onnxruntime's int8 kernels on CPUs without VNNI (AVX2, AVX-512F) sum u8 x s8 "
    "pairs in int16 and saturate on full-range weights; 7 bits never saturate, so the graph computes "
    "the same on AVX2, AVX-512, VNNI and AMX with the same fast kernels (uint8 weights are also exact "
    "but ran 2.4x slower on AMX; see benchmarks/README.md, decode)"
)
INT8_SCHEME = Int8Scheme()

TRANSPOSED_SUFFIX = ".T"  # our transposed copy of a Gemm weight
QUANT_SUFFIX = "_quantized"  # onnxruntime.quantization's names: W_quantized, W_scale, W_zero_point


class PrecisionError(RuntimeError):
    """A conversion that would change what the graph computes beyond precision."""


def convert_graph(path: Path, precision: str) -> dict[str, int]:
    """Rewrite ``path`` in place to ``precision``; returns {"bytes_before", "bytes_after"}."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} not in {PRECISIONS}")
    before = path.stat().st_size
    if precision == "fp32":
        return {"bytes_before": before, "bytes_after": before}
    model = onnx.load(str(path))
    expected = count_attention_nodes(model)
    converted = quantize_int8(model) if precision == "int8" else convert_fp16(model)
    found = count_attention_nodes(converted)
    if found != expected:
        raise PrecisionError(f"{path.name}: {precision} conversion changed the attention nodes {expected} -> {found}")
    onnx.save(converted, str(path))
    return {"bytes_before": before, "bytes_after": path.stat().st_size}


def convert_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    return _topologically_sorted(convert_float_to_float16(model, keep_io_types=_float32_io(model)))


def _float32_io(model: onnx.ModelProto) -> bool | list[str]:
    """The inputs and outputs an fp16 graph keeps in float32: all of them, except an in-place
    decoder's cache buffers (GroupQueryAttention's past and present), which stay fp16 so that one
    buffer is both (a Cast in between would make the present a new tensor, copied every step)."""
    if not any(node.op_type == "GroupQueryAttention" for node in model.graph.node):
        return True
    names = [v.name for v in [*model.graph.input, *model.graph.output]]
    return [n for n in names if not n.startswith(("past_", "present_"))]


def _topologically_sorted(model: onnx.ModelProto) -> onnx.ModelProto:
    """The fp16 converter appends its input Casts at the end; onnx.checker wants graph order."""
    from onnxruntime.transformers.onnx_model import OnnxModel

    wrapped = OnnxModel(model)
    wrapped.topological_sort()
    return wrapped.model


def quantize_int8(model: onnx.ModelProto, scheme: Int8Scheme = INT8_SCHEME) -> onnx.ModelProto:
    """Dynamic int8 quantization of the MatMuls and embedding tables (see the module docstring)."""
    import tempfile

    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.ModelProto.FromString(model.SerializeToString())  # never touch the caller's proto
    _drop_initializer_value_info(model)
    _gemm_to_matmul(model)
    with tempfile.TemporaryDirectory() as tmp, _quiet_root_logger():
        out = Path(tmp) / "int8.onnx"
        quantize_dynamic(
            model,
            out,
            op_types_to_quantize=["MatMul"],
            weight_type=QuantType.QInt8 if scheme.weight_type == "int8" else QuantType.QUInt8,
            reduce_range=scheme.reduce_range,
            per_channel=scheme.per_channel,
            extra_options={"MatMulConstBOnly": True},  # q @ k^T of decomposed attention stays float
        )
        quantized = onnx.load(str(out))
    _quantize_embedding_tables(quantized)
    return _topologically_sorted(quantized)


def _drop_initializer_value_info(model: onnx.ModelProto) -> None:
    """The dynamo exporter records value_info for initializers; the quantizer's Gemm
    rewrite transposes weights without updating it, and shape inference then fails.
    Types of contrib-op outputs (MultiHeadAttention) are kept: ONNX inference cannot
    derive them."""
    names = {i.name for i in model.graph.initializer}
    keep = [v for v in model.graph.value_info if v.name not in names]
    del model.graph.value_info[:]
    model.graph.value_info.extend(keep)


def _attr(node: onnx.NodeProto, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _gemm_to_matmul(model: onnx.ModelProto) -> None:
    """Gemm(A, W, C, transB=1) -> MatMul(A, W.T) [+ Add C], W.T a new initializer."""
    inits = {i.name: i for i in model.graph.initializer}
    nodes: list[onnx.NodeProto] = []
    for node in model.graph.node:
        plain = _attr(node, "alpha", 1.0) == 1.0 and _attr(node, "beta", 1.0) == 1.0 and not _attr(node, "transA", 0)
        if node.op_type != "Gemm" or node.domain not in ("", "ai.onnx") or node.input[1] not in inits or not plain:
            nodes.append(node)
            continue
        weight = node.input[1]
        if _attr(node, "transB", 0):
            name = weight + TRANSPOSED_SUFFIX
            if name not in inits:
                array = numpy_helper.to_array(inits[weight]).T.copy()  # (K, N)
                inits[name] = numpy_helper.from_array(array, name)
                model.graph.initializer.append(inits[name])
            weight = name
        has_bias = len(node.input) > 2 and node.input[2]
        product = node.output[0] + "_matmul" if has_bias else node.output[0]
        nodes.append(helper.make_node("MatMul", [node.input[0], weight], [product], name=node.name + "_matmul"))
        if has_bias:
            nodes.append(helper.make_node("Add", [product, node.input[2]], [node.output[0]], name=node.name + "_bias"))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    _remove_unused_initializers(model)


def _quantize_embedding_tables(model: onnx.ModelProto) -> None:
    """Gather(W float (V, C), ids) -> DequantizeLinear(Gather(W int8, ids), scale)."""
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    tables = {
        n.input[0]
        for n in graph.node
        if n.op_type == "Gather"
        and n.input[0] in inits
        and _attr(n, "axis", 0) == 0
        and inits[n.input[0]].data_type == onnx.TensorProto.FLOAT
        and len(inits[n.input[0]].dims) == 2
    }
    prologue: list[onnx.NodeProto] = []
    for table in sorted(tables):
        q_name, s_name = table + ".int8", table + ".int8_scale"
        shared = _shared_quantized_transpose(inits, table)
        if shared is not None:  # the tied output projection: read it from the int8 table
            q_array, scale = shared
            transposed = table + TRANSPOSED_SUFFIX + QUANT_SUFFIX
            graph.initializer.remove(inits.pop(transposed))
            prologue.append(helper.make_node("Transpose", [q_name], [transposed], perm=[1, 0], name=transposed))
        else:
            q_array, scale = _quantize_symmetric(numpy_helper.to_array(inits[table]))
        graph.initializer.extend(
            [numpy_helper.from_array(q_array, q_name), numpy_helper.from_array(np.array(scale, np.float32), s_name)]
        )
        nodes: list[onnx.NodeProto] = []
        for node in graph.node:
            if node.op_type == "Gather" and node.input[0] == table:
                lookup = node.output[0] + ".int8"
                nodes.append(helper.make_node("Gather", [q_name, node.input[1]], [lookup], name=node.name, axis=0))
                nodes.append(
                    helper.make_node("DequantizeLinear", [lookup, s_name], [node.output[0]], name=node.name + "_dq")
                )
            else:
                nodes.append(node)
        del graph.node[:]
        graph.node.extend(nodes)
    if prologue:
        nodes = prologue + list(graph.node)
        del graph.node[:]
        graph.node.extend(nodes)
    _remove_unused_initializers(model)


def _shared_quantized_transpose(inits: dict, table: str) -> tuple[np.ndarray, float] | None:
    """The quantizer's int8 copy of ``table``.T (the tied projection), transposed back, and its scale."""
    base = table + TRANSPOSED_SUFFIX
    names = (base + QUANT_SUFFIX, base + "_scale", base + "_zero_point")
    if not all(n in inits for n in names):
        return None
    q, scale, zero = (numpy_helper.to_array(inits[n]) for n in names)
    if q.dtype != np.int8 or scale.size != 1 or np.any(zero != 0):
        log.info("not sharing the int8 table of %s: per-channel or asymmetric quantization", table)
        return None
    return np.ascontiguousarray(q.T), float(scale.reshape(()))


def _quantize_symmetric(array: np.ndarray) -> tuple[np.ndarray, float]:
    """Per-tensor symmetric int8, as onnxruntime quantizes weights: q = round(x / s), s = max|x| / 127."""
    absmax = float(np.abs(array).max()) if array.size else 0.0
    scale = absmax / 127.0 if absmax > 0 else 1.0
    return np.clip(np.rint(array / scale), -127, 127).astype(np.int8), scale


def _remove_unused_initializers(model: onnx.ModelProto) -> None:
    used = {name for n in model.graph.node for name in n.input} | {o.name for o in model.graph.output}
    unused = [i for i in model.graph.initializer if i.name not in used]
    for init in unused:
        model.graph.initializer.remove(init)


@contextmanager
def _quiet_root_logger():
    """quantize_dynamic logs advice on the root logger ("consider pre-processing"); keep the CLI quiet."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)
