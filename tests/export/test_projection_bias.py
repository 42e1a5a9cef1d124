"""The logits bias folded into the vocabulary projection (export/projection_bias.py): the graph
computes the same logits and embeddings with the weight stored once and no (B, V) Add left,
in a plain decoder tail and in both branches of a screened one; any shape it does not know
is left as it was."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from attnserve.export.projection_bias import fold_projection_bias
from attnserve.export.screen_vocab import ScreenSettings, add_screen
from tests.support.sessions import cpu_session

V, D = 3000, 64
NEVER = (0, 1)


def tied_tail(weight: np.ndarray, bias: np.ndarray, alpha: float = 1.0, bias_name: str = "b") -> onnx.ModelProto:
    """ids (B,), hidden (B, D) -> embedding = W[ids] (the tied target embedding), logits =
    Gemm(hidden + embedding, W, transB=1) + bias (B, V)."""
    n = helper.make_node
    nodes = [
        n("Gather", ["w", "ids"], ["embedding"], axis=0),  # (B, D)
        n("Add", ["hidden", "embedding"], ["mixed"]),
        n("Gemm", ["mixed", "w"], ["linear"], transB=1, alpha=alpha),
        n("Add", ["linear", bias_name], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tail",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["B"]),
            helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["B", D]),
        ],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", V]),
            helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["B", D]),
        ],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.fixture(scope="module")
def weights() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((V, D)) * 0.2).astype(np.float32)
    bias = (rng.standard_normal(V) * 3).astype(np.float32)
    bias[list(NEVER)] = -1e4  # a padded vocabulary's banned ids, as the importers write them
    return weight, bias


def feeds(rng, rows: int = 24) -> dict[str, np.ndarray]:
    return {
        "ids": rng.integers(0, V, rows),
        "hidden": (rng.standard_normal((rows, D)) * 2).astype(np.float32),
    }


def big_adds(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Adds of a Gemm's output, in the graph or its branches."""
    found = []

    def walk(graph):
        gemms = {o for node in graph.node if node.op_type == "Gemm" for o in node.output}
        found.extend(node for node in graph.node if node.op_type == "Add" and gemms & set(node.input))
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)

    walk(model.graph)
    return found


def stored_floats(model: onnx.ModelProto) -> int:
    return sum(int(np.prod(i.dims)) for i in model.graph.initializer if i.data_type == TensorProto.FLOAT)


def test_the_folded_tail_computes_the_same_logits_and_embeddings(weights):
    weight, bias = weights
    model = tied_tail(weight, bias)
    assert fold_projection_bias(model) == 1
    onnx.checker.check_model(model)
    assert big_adds(model) == []
    assert stored_floats(model) == V * (D + 1)  # the tied weight once, its bias a column of it
    rng = np.random.default_rng(1)
    for rows in (1, 24):
        x = feeds(rng, rows)
        want_logits, want_embedding = cpu_session(tied_tail(weight, bias)).run(None, x)
        logits, embedding = cpu_session(model).run(None, x)
        np.testing.assert_array_equal(embedding, want_embedding)  # the bias column sliced off
        np.testing.assert_allclose(logits, want_logits, rtol=1e-5, atol=1e-4)
        assert (logits.argmax(axis=1) == want_logits.argmax(axis=1)).all()


def test_both_branches_of_a_screened_projection_are_folded(weights):
    weight, bias = weights
    screened = tied_tail(weight, bias)
    assert add_screen(screened, ScreenSettings(NEVER))
    folded = onnx.ModelProto.FromString(screened.SerializeToString())
    assert fold_projection_bias(folded) == 2  # the full branch and the screen's fallback
    onnx.checker.check_model(folded)
    never_masks = [n for n in big_adds(folded) if "screen_never" in n.input]  # the fallback's, on its argmax
    assert big_adds(folded) == never_masks and len(never_masks) == 1 and len(big_adds(screened)) == 2
    rng = np.random.default_rng(2)
    before, after = cpu_session(screened), cpu_session(folded)
    for screen in (False, True):
        x = {**feeds(rng), "screen_argmax": np.array(screen)}
        (want, want_ids), (got, got_ids) = (s.run(["logits", "screen_ids"], x) for s in (before, after))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(got_ids, want_ids)
        assert got_ids.shape == ((0,) if not screen else (len(got),))
        if not screen:
            assert (got.argmax(axis=1) == want.argmax(axis=1)).all()


@pytest.mark.parametrize(
    "change",
    ["another reader of the weight", "a scaled product", "a bias of another length", "a weight callers may feed"],
)
def test_a_shape_it_does_not_know_is_left_as_it_was(weights, change):
    weight, bias = weights
    if change == "a scaled product":
        model = tied_tail(weight, bias, alpha=0.5)
    elif change == "a bias of another length":
        model = tied_tail(weight, bias)
        model.graph.initializer.append(numpy_helper.from_array(np.zeros(1, np.float32), "b1"))
        model.graph.node[-1].input[1] = "b1"
    elif change == "a weight callers may feed":
        model = tied_tail(weight, bias)
        model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [V, D]))
    else:
        model = tied_tail(weight, bias)
        model.graph.node.append(helper.make_node("MatMul", ["hidden", "w_t"], ["other"]))
        model.graph.node.append(helper.make_node("Transpose", ["w"], ["w_t"]))
    before = model.SerializeToString()
    assert fold_projection_bias(model) == 0
    assert model.SerializeToString() == before


def test_an_opset_without_shape_slices_is_left_as_it_was(weights):
    weight, bias = weights
    model = tied_tail(weight, bias)
    model.opset_import[0].version = 14
    assert fold_projection_bias(model) == 0
