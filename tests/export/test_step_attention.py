"""A fused export's step decoder returns its step's cross-attention at the layer alignments read
(``step_attention``), equal to PyTorch's teacher-forced attention along a greedy decode; the
verification compares them; other exports and older directories go without it."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from attnserve.contract.graph_io import STEP_ATTENTION
from attnserve.contract.manifest import load_manifest
from attnserve.export.graphs import export_decoder
from attnserve.export.onnx_nodes import count_attention_nodes
from attnserve.export.step_attention import without_step_attention
from attnserve.export.verify import VERIFICATION_FILE
from attnserve.models import load_checkpoint

from .test_verify import _rehash

CHECK = "decoder.step_attention (greedy steps) max abs diff"


def _export(cli, checkpoints, out, *args):
    tokenizer = ["--tokenizer", str(checkpoints["tokenizer"])]
    run = cli(
        "translation", "--checkpoint", checkpoints["translation"], *tokenizer, "--out", out, "--threads", "1", *args
    )
    assert run.code == 0, run.err
    return load_manifest(out)


@pytest.mark.parametrize(
    "args",
    [(), ("--kv-cache", "left-padded"), ("--precision", "int8")],
    ids=["in-place", "left-padded", "int8"],
)
def test_the_step_decoder_returns_the_attention_pytorch_computes(checkpoints, cli, tmp_path, args):
    manifest = _export(cli, checkpoints, tmp_path / "mt", *args)
    assert manifest.graphs["decoder"].outputs[-1] == STEP_ATTENTION
    assert manifest.decoder_io().attention == STEP_ATTENTION
    proto = onnx.load(str(tmp_path / "mt" / "decoder.onnx"))
    calls = count_attention_nodes(proto)
    layers = manifest.config["decoder_layers"]
    assert sum(calls.values()) == 2 * layers  # still one node per attention call, self and cross
    inspected = json.loads(cli("inspect", tmp_path / "mt", "--json").out)
    assert inspected["graphs"]["decoder"]["attention_nodes"] == calls  # its Softmax is no attention call
    run = cli("verify", tmp_path / "mt", "--json")
    assert run.code == 0, run.out
    checks = {c["name"]: c for c in json.loads(run.out)["checks"]}
    assert checks[CHECK]["passed"], checks[CHECK]
    if not args:  # fp32: the reference's rows, steps of a real decode
        reference = np.load(tmp_path / "mt" / VERIFICATION_FILE)["greedy.step_attention"]
        assert reference.ndim == 3 and np.allclose(reference.sum(-1), 1.0, atol=1e-5)
        assert checks[CHECK]["value"] < 1e-5


def test_a_drifting_step_attention_fails_verification(checkpoints, cli, tmp_path):
    out = tmp_path / "mt"
    _export(cli, checkpoints, out)
    path = out / VERIFICATION_FILE
    data = dict(np.load(path))
    data["greedy.step_attention"] = data["greedy.step_attention"][..., ::-1].copy()  # the source read backwards
    with open(path, "wb") as fh:
        np.savez(fh, **data)
    _rehash(out, VERIFICATION_FILE)  # only the numeric check can notice now
    run = cli("verify", out, "--json")
    assert run.code != 0
    checks = {c["name"]: c for c in json.loads(run.out)["checks"]}
    assert checks[CHECK]["passed"] is False


def test_decomposed_attention_has_no_step_attention_and_loads(checkpoints, cli, tmp_path):
    manifest = _export(cli, checkpoints, tmp_path / "mt", "--attention", "decomposed")
    assert STEP_ATTENTION not in manifest.graphs["decoder"].outputs
    assert manifest.decoder_io().attention == ""
    assert count_attention_nodes(onnx.load(str(tmp_path / "mt" / "decoder.onnx"))) == {}
    run = cli("verify", tmp_path / "mt", "--json")
    assert run.code == 0
    assert CHECK not in {c["name"] for c in json.loads(run.out)["checks"]}


@pytest.mark.parametrize("kv_cache", ["in-place", "left-padded"])
def test_the_output_removed_gives_the_decoder_exported_without_it(checkpoints, tmp_path, kv_cache):
    """What the benchmarks serve as the decoder before step_attention is that export, byte for byte."""
    model, _ = load_checkpoint(checkpoints["translation"])
    plain = export_decoder(model, tmp_path / "plain.onnx", kv_cache=kv_cache, step_attention=False)
    full = export_decoder(model, tmp_path / "full.onnx", kv_cache=kv_cache)
    assert STEP_ATTENTION not in [o.name for o in plain.graph.output]
    assert full.graph.output[-1].name == STEP_ATTENTION
    assert without_step_attention(full).SerializeToString() == plain.SerializeToString()


def test_a_cuda_export_goes_without_it_until_a_gpu_has_verified_it(checkpoints, cli, tmp_path):
    """onnxruntime's CUDA MultiHeadAttention has not run with its scores output on a lent GPU yet:
    ``--device cuda`` writes the decoder without step_attention (alignments run the aligner graph)."""
    manifest = _export(cli, checkpoints, tmp_path / "mt", "--device", "cuda", "--no-verify")
    assert manifest.kv_cache == "left-padded" and manifest.decoder_io().attention == ""
    assert STEP_ATTENTION not in manifest.graphs["decoder"].outputs
