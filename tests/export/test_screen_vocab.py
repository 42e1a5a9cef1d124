"""The int8-screened vocabulary projection (export/screen_vocab.py): with ``screen_argmax`` fed true
``screen_ids`` is every row's argmax over the ids but the never-generated ones of the full fp32
projection, and ``logits`` (B, 1) its logit, on random rows, near-ties, exact ties and flat rows
(the fallback); fed nothing, the logits are the original graph's."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from attnserve.export.screen_vocab import ScreenSettings, add_screen, quantize_rows
from tests.support.sessions import cpu_session

V, D = 3000, 64
NEVER = (0, 1)


def projection_graph(weight: np.ndarray, bias: np.ndarray | None) -> onnx.ModelProto:
    """hidden (B, D) -> LayerNorm-free decoder tail: Gemm(hidden, W, transB=1) (+ bias) -> logits."""
    nodes = [helper.make_node("Gemm", ["hidden", "w"], ["linear" if bias is not None else "logits"], transB=1)]
    inits = [numpy_helper.from_array(weight, "w")]
    if bias is not None:
        nodes.append(helper.make_node("Add", ["linear", "b"], ["logits"]))
        inits.append(numpy_helper.from_array(bias, "b"))
    graph = helper.make_graph(
        nodes,
        "tail",
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["B", D])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", V])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.fixture(scope="module")
def weights() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((V, D)) * 0.2).astype(np.float32)
    weight[7] = weight[5] + np.float32(1e-4)  # a near-tie whenever 5 wins
    bias = rng.standard_normal(V).astype(np.float32)
    bias[list(NEVER)] = 50.0  # the never-generated ids would win every row: the argmax must skip them
    return weight, bias


@pytest.fixture(scope="module")
def screened(weights) -> tuple[ort.InferenceSession, ort.InferenceSession]:
    weight, bias = weights
    full = projection_graph(weight, bias)
    model = projection_graph(weight, bias)
    assert add_screen(model, ScreenSettings(NEVER))
    return cpu_session(full), cpu_session(model)


def masked(logits: np.ndarray) -> np.ndarray:
    logits = logits.copy()
    logits[:, list(NEVER)] = -np.inf
    return logits


def masked_argmax(logits: np.ndarray) -> np.ndarray:
    return masked(logits).argmax(axis=1)


def screen(model: ort.InferenceSession, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ids (B,), best logit (B,)) of the screened run."""
    best, ids = model.run(["logits", "screen_ids"], {"hidden": h, "screen_argmax": np.array(True)})
    assert best.shape == (len(h), 1) and ids.shape == (len(h),)
    return ids, best[:, 0]


def hidden_rows(weights, rng) -> np.ndarray:
    """Random rows, rows aimed at word 5 (a near-tie with word 7) and rows with a clear winner."""
    weight, _ = weights
    random = rng.standard_normal((40, D)).astype(np.float32) * 3
    aimed = weight[[5] * 8] * 40 + rng.standard_normal((8, D)).astype(np.float32) * 0.1
    clear = weight[rng.integers(2, V, 16)] * 60
    return np.concatenate([random, aimed, clear]).astype(np.float32)


def test_screened_argmax_is_the_full_projections_on_every_row(weights, screened):
    full, model = screened
    rng = np.random.default_rng(1)
    h = hidden_rows(weights, rng)
    expected = full.run(None, {"hidden": h})[0]
    for rows in (slice(0, 1), slice(40, 48), slice(48, 64), slice(0, 64)):
        ids, best = screen(model, h[rows])
        np.testing.assert_array_equal(ids, masked_argmax(expected[rows]))
        np.testing.assert_allclose(best, masked(expected[rows]).max(axis=1), rtol=1e-5, atol=1e-5)
    winners = masked_argmax(expected[40:48])
    assert set(winners) <= {5, 7}  # the near-tie rows really are near-ties


def test_an_exact_tie_goes_to_the_lowest_id(weights):
    weight, bias = (w.copy() for w in weights)
    weight[300], bias[300] = weight[200], bias[200]  # words 200 and 300 score the same on every row
    full, model = projection_graph(weight, bias), projection_graph(weight, bias)
    assert add_screen(model, ScreenSettings(NEVER))
    h = (weight[[200, 200, 300]] * 60).astype(np.float32)
    ids, _ = screen(cpu_session(model), h)
    assert ids.tolist() == [200, 200, 200] == masked_argmax(cpu_session(full).run(None, {"hidden": h})[0]).tolist()


def test_a_row_of_nan_gets_id_zero_and_leaves_the_others_theirs(weights, screened):
    full, model = screened
    h = hidden_rows(weights, np.random.default_rng(5))[48:52].copy()
    h[1] = np.nan
    ids, _ = screen(model, h)
    expected = masked_argmax(full.run(None, {"hidden": h})[0])
    assert ids[1] == 0
    np.testing.assert_array_equal(ids[[0, 2, 3]], expected[[0, 2, 3]])


def test_a_flat_batch_falls_back_to_the_full_projection(weights):
    weight, _ = weights
    flat = np.zeros(V, np.float32)  # every word scores the same on a zero row: all are candidates
    full, model = projection_graph(weight, flat), projection_graph(weight, flat)
    assert add_screen(model, ScreenSettings(NEVER))
    h = np.zeros((2, D), np.float32)
    ids, best = screen(cpu_session(model), h)
    expected = cpu_session(full).run(None, {"hidden": h})[0]
    np.testing.assert_array_equal(ids, masked_argmax(expected))  # the lowest id but the never-picked ones
    assert ids.tolist() == [2, 2]
    np.testing.assert_array_equal(best, masked(expected).max(axis=1))


def test_without_the_flag_the_output_is_the_full_projection(weights, screened):
    full, model = screened
    h = hidden_rows(weights, np.random.default_rng(3))
    expected = full.run(None, {"hidden": h})[0]
    for feeds in ({"hidden": h}, {"hidden": h, "screen_argmax": np.array(False)}):
        logits, ids = model.run(["logits", "screen_ids"], feeds)
        np.testing.assert_array_equal(logits, expected)
        assert ids.shape == (0,)


def test_a_projection_without_bias_is_screened_too(weights):
    weight, _ = weights
    full, model = projection_graph(weight, None), projection_graph(weight, None)
    assert add_screen(model, ScreenSettings(NEVER))
    h = hidden_rows(weights, np.random.default_rng(4))
    ids, _ = screen(cpu_session(model), h)
    np.testing.assert_array_equal(ids, masked_argmax(cpu_session(full).run(None, {"hidden": h})[0]))


def test_the_outputs_are_declared_for_both_modes(screened):
    _, model = screened
    shapes = {o.name: o.shape for o in model.get_outputs()}
    assert shapes == {"logits": ["B", "logits_width"], "screen_ids": ["B"]}
    assert [o.name for o in model.get_outputs()] == ["logits", "screen_ids"]  # listed outputs keep their places


def test_weights_are_seven_bit_so_no_cpu_saturates_them(weights):
    q, scale = quantize_rows(weights[0])
    assert q.dtype == np.int8 and np.abs(q).max() == 63
    np.testing.assert_allclose(q * scale[:, None], weights[0], atol=float(scale.max()) / 2 + 1e-7)


def test_a_graph_whose_last_node_is_not_a_projection_is_left_alone():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["hidden"], ["logits"])],
        "relu",
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["B", D])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", D])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    before = model.SerializeToString()
    assert not add_screen(model, ScreenSettings(NEVER))
    assert model.SerializeToString() == before


def test_the_flag_is_screen_argmax_so_a_reader_of_screen_vocab_never_screens_it(screened):
    """A caller that knows only ``screen_vocab`` (whose argmax stays in (B, V) logits) finds no such
    flag on this decoder and reads its full logits; model.json's record names the flag."""
    _, model = screened
    flags = [i.name for i in model.get_overridable_initializers()]
    assert flags == ["screen_argmax"]
    assert [i.name for i in model.get_inputs()] == ["hidden"]
