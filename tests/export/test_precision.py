"""--precision int8 / fp16: smaller files, the attention nodes survive, agreement is reported."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from attnserve.contract.manifest import load_manifest
from attnserve.export.cli import main
from attnserve.export.onnx_nodes import count_attention_nodes

from .conftest import TINY_MT


def _report(out) -> dict:
    return json.loads((out / "export-report.json").read_text())


def _checks(report: dict) -> dict:
    return {c["name"]: c for c in report["verification"]["checks"]}


@pytest.fixture(scope="module")
def int8_translator(checkpoints, tmp_path_factory):
    out = tmp_path_factory.mktemp("int8") / "mt"
    args = ["--tokenizer", str(checkpoints["tokenizer"]), "--precision", "int8", "--out", str(out), "--threads", "1"]
    assert main(["translation", "--checkpoint", str(checkpoints["translation"]), *args]) == 0
    return out


def test_int8_translator_stores_the_tied_embedding_once_in_int8(int8_translator):
    manifest = load_manifest(int8_translator)
    assert manifest.precision == "int8"
    decoder = onnx.load(str(int8_translator / "decoder.onnx"))
    tables = [t for t in decoder.graph.initializer if TINY_MT.vocab_size in t.dims and TINY_MT.d_model in t.dims]
    assert [(numpy_helper.to_array(t).dtype, tuple(t.dims)) for t in tables] == [
        (np.dtype(np.int8), (TINY_MT.vocab_size, TINY_MT.d_model))
    ]  # one int8 table: the embedding lookup and the tied output projection both read it
    ops = {n.op_type for n in decoder.graph.node}
    assert {"MatMulInteger", "DynamicQuantizeLinear", "DequantizeLinear"} <= ops and "Gemm" not in ops
    assert count_attention_nodes(decoder) == {  # self-attention in place, cross-attention as before
        "com.microsoft::MultiHeadAttention": TINY_MT.decoder_layers,
        "com.microsoft::GroupQueryAttention": TINY_MT.decoder_layers,
    }


def test_int8_report_has_tolerance_and_top1(int8_translator, cli):
    checks = _checks(_report(int8_translator))
    assert checks["decoder.logits max abs diff"]["passed"]
    assert checks["decoder.logits max abs diff"]["limit"] > 1e-4  # the looser int8 tolerance
    assert 0.5 <= checks["greedy decode (teacher-forced) top-1 agreement"]["value"] <= 1.0
    assert checks["greedy decode tokens"]["passed"] is None  # reported, not required bit-exact at int8
    run = cli("verify", int8_translator, "--threads", "1")
    assert run.code == 0 and "top-1 agreement" in run.out


@pytest.fixture(scope="module")
def fp16_vit(checkpoints, tmp_path_factory):
    out = tmp_path_factory.mktemp("fp16") / "vit16"
    assert main(["vit", "--checkpoint", str(checkpoints["vit"]), "--precision", "fp16", "--out", str(out)]) == 0
    return out


def test_fp16_keeps_io_float32_and_one_attention_node_per_call(fp16_vit):
    proto = onnx.load(str(fp16_vit / "model.onnx"))
    assert proto.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT  # keep_io_types
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in proto.graph.initializer)
    assert count_attention_nodes(proto) == {"com.microsoft::MultiHeadAttention": 2}
    report = _report(fp16_vit)
    assert report["precision"] == "fp16" and report["graph_bytes"]["ratio"] > 1.5
    assert report["verification"]["passed"]
    checks = _checks(report)
    if not report["verification"]["skipped"]:  # this onnxruntime runs fp16 on CPU
        assert checks["model.logits max abs diff"]["limit"] > 1e-4 and "model.logits top-1 agreement" in checks


def test_fp16_without_kernels_says_numeric_checks_were_skipped(fp16_vit, cli, monkeypatch):
    from attnserve.export import verify

    def no_fp16_kernels(*args, **kwargs):
        raise RuntimeError(
            "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for MultiHeadAttention(1)"
        )

    monkeypatch.setattr(verify, "_session", no_fp16_kernels)
    run = cli("verify", fp16_vit)
    assert run.code == 0
    assert "skip  numeric checks of the fp16 graphs need CUDA" in run.out
    assert "numeric checks skipped" in run.out and "max abs diff" not in run.out
    assert "ok    onnx.checker model.onnx" in run.out and "ok    attention nodes model.onnx" in run.out


def test_a_graph_that_cannot_run_is_a_failure_not_a_skip(int8_translator, cli, monkeypatch):
    from attnserve.export import verify

    def broken(*args, **kwargs):
        raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : Load model failed")

    monkeypatch.setattr(verify, "_session", broken)
    run = cli("verify", int8_translator)
    assert run.code == 1 and "FAIL  onnxruntime session" in run.out


@pytest.mark.parametrize("kind, preset", [("translation", "mt-small"), ("vit", "vit-s16")])
def test_int8_presets_shrink_at_least_3x_and_report_top1(kind, preset, cli, tmp_path):
    out = tmp_path / preset
    run = cli(kind, "--preset", preset, "--precision", "int8", "--out", out)
    assert run.code == 0, run.err
    report = _report(out)
    ratio = report["graph_bytes"]["ratio"]
    top1 = {name: c["value"] for name, c in _checks(report).items() if name.endswith("top-1 agreement")}
    print(f"{preset} int8: graphs {ratio:.2f}x smaller; top-1 agreement with fp32 PyTorch: {top1}")
    assert ratio >= 3.0
    assert all(size["ratio"] >= 3.0 for size in report["graphs"].values())
    assert top1 and "top-1 agreement" in run.out
    assert report["verification"]["passed"]
