"""The layers' biases folded into their products (export/layer_bias.py): the graph computes the
same outputs with the Add gone, a residual's bias, a shared weight and an input of other
leading dimensions left alone; fp32 CPU translation exports carry it and verify, int8 ones not."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from attnserve.export.layer_bias import ONES, WITH_BIAS, fold_layer_biases
from attnserve.export.modeldir import placeholder_tokenizer
from attnserve.export.options import ExportOptions
from attnserve.export.pipeline import export_translation
from attnserve.models import TranslationConfig, TranslationTransformer
from tests.support.sessions import cpu_session

C, N = 16, 24


def layers(rng) -> onnx.ModelProto:
    """ids (B, S), h (B, S, C), other (B, T, C) -> act = sigmoid(h W1 + b1); res = h W2 + b2 + h...
    with W2 (C, C); shared = h Ws + b1 and other Ws' + b1 (Ws read twice); far = other W3 + b3."""
    n = helper.make_node
    nodes = [
        n("MatMul", ["h", "w1"], ["p1"]),
        n("Add", ["p1", "b1"], ["s1"]),
        n("Sigmoid", ["s1"], ["act"]),
        n("MatMul", ["h", "w2"], ["p2"]),
        n("Add", ["b2", "p2"], ["s2"]),
        n("Add", ["s2", "h"], ["res"]),  # a residual: its bias stays
        n("MatMul", ["h", "ws"], ["p3"]),
        n("Add", ["p3", "b1"], ["shared"]),
        n("MatMul", ["other", "ws"], ["p4"]),
        n("Sigmoid", ["p4"], ["shared_other"]),
        n("MatMul", ["other", "w3"], ["p5"]),
        n("Add", ["p5", "b1"], ["far"]),  # other leading dimensions than the ids'
    ]
    inits = {
        "w1": (C, N), "b1": (N,), "w2": (C, C), "b2": (C,), "ws": (C, N), "w3": (C, N),
    }  # fmt: skip
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "layers",
        [
            value("ids", TensorProto.INT64, ["batch", "new"]),
            value("h", TensorProto.FLOAT, ["batch", "new", C]),
            value("other", TensorProto.FLOAT, ["batch", "src", C]),
        ],
        [value(o, TensorProto.FLOAT, ["d0", "d1", "d2"]) for o in ("act", "res", "shared", "shared_other", "far")],
        [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), k) for k, s in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return cpu_session(model).run(None, feeds)


def test_a_bias_goes_into_its_product_and_the_outputs_stay():
    rng = np.random.default_rng(0)
    model = layers(rng)
    feeds = {
        "ids": np.zeros((3, 5), np.int64),
        "h": rng.standard_normal((3, 5, C)).astype(np.float32),
        "other": rng.standard_normal((3, 7, C)).astype(np.float32),
    }
    before = run(model, feeds)
    assert fold_layer_biases(model, "ids") == 1
    onnx.checker.check_model(model)
    after = run(model, feeds)
    for a, b in zip(before, after):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    inits = {i.name for i in model.graph.initializer}
    assert WITH_BIAS.format("w1") in inits and "w1" not in inits
    adds = [list(n.input) for n in model.graph.node if n.op_type == "Add"]
    assert ["p1", "b1"] not in adds  # folded
    assert ["b2", "p2"] in adds and ["p3", "b1"] in adds and ["p5", "b1"] in adds  # residual, shared, far
    assert "b1" in inits  # still read by the Adds left


def test_without_named_leading_dimensions_nothing_changes():
    model = layers(np.random.default_rng(1))
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 5  # ids (batch, 5): a fixed length
    assert fold_layer_biases(model, "ids") == 0
    assert fold_layer_biases(model, "no_such_input") == 0


TINY = TranslationConfig(vocab_size=60, d_model=32, num_heads=4, encoder_layers=1, decoder_layers=2, ffn_dim=64)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_translation_exports_fold_for_fp32_only_and_verify(tmp_path, precision):
    torch.manual_seed(0)
    model = TranslationTransformer(TINY).eval()
    options = ExportOptions(out=tmp_path / "mt", precision=precision, force=True)
    result = export_translation(model, placeholder_tokenizer(TINY.vocab_size), options)
    assert result.verification is not None and result.verification.passed
    folds = {
        graph: [n for n in onnx.load(str(tmp_path / "mt" / f"{graph}.onnx")).graph.node if ONES in n.input]
        for graph in ("encoder", "decoder")
    }
    if precision == "fp32":
        # per decoder layer: the packed q/k/v, the cross-attention query and the first FFN product;
        # the encoder: each layer's first FFN product (its q/k/v bias is MultiHeadAttention's
        # input) and each decoder layer's cross-attention key/value projection of its output
        assert len(folds["decoder"]) == 3 * TINY.decoder_layers
        assert len(folds["encoder"]) == TINY.encoder_layers + TINY.decoder_layers
    else:
        assert folds == {"encoder": [], "decoder": []}
