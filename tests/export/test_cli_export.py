"""attnserve-export end to end: tiny presets, both kinds, all three attention targets;
then verify and inspect on what was written."""

from __future__ import annotations

import json

import pytest

from attnserve.contract.manifest import load_manifest
from attnserve.export.cli import main
from attnserve.export.onnx_nodes import ATTENTION_OPS
from attnserve.models.attention import EXPORT_OP_TYPES

from .conftest import TINY_VIT, leftovers

CASES = [(kind, attention) for kind in ("translation", "vit") for attention in ("fused", "onnx", "decomposed")]
PRESET = {"translation": "mt-tiny", "vit": "vit-tiny"}
CALLS = {
    "translation": {"encoder.onnx": 2, "decoder.onnx": 4, "aligner.onnx": 1},
    "vit": {"model.onnx": 12},
}  # mt-tiny 2+2 (the aligner: layer 0, the one it reads: its self-attention), vit 12


@pytest.fixture(scope="module", params=CASES, ids=[f"{k}-{a}" for k, a in CASES])
def exported(request, tmp_path_factory):
    kind, attention = request.param
    out = tmp_path_factory.mktemp("repo") / f"{kind}-{attention}"
    code = main([kind, "--preset", PRESET[kind], "--attention", attention, "--out", str(out), "--threads", "1"])
    return kind, attention, out, code


def test_export_writes_a_verified_directory(exported):
    kind, attention, out, code = exported
    assert code == 0
    manifest = load_manifest(out)  # every sha256 matches
    assert manifest.attention == attention and manifest.precision == "fp32" and manifest.name == out.name
    assert {"verification.npz", "export-report.json"} <= set(manifest.files)
    assert manifest.extra["source"] == {"type": "preset", "preset": PRESET[kind], "seed": 0, "weights": "random"}
    if kind == "translation":
        assert "placeholder" in manifest.extra["tokenizer"]
    report = json.loads((out / "export-report.json").read_text())
    checks = {c["name"]: c for c in report["verification"]["checks"]}
    assert report["verification"]["passed"]
    op = ATTENTION_OPS[attention]
    for fname, calls in CALLS[kind].items():
        nodes = checks[f"attention nodes {fname}"]
        assert nodes["passed"] and nodes["limit"] == calls
        assert nodes["value"] == (calls if op else 0)
    diffs = [c for name, c in checks.items() if name.endswith("max abs diff")]
    assert diffs and all(c["value"] <= 1e-4 for c in diffs)
    if kind == "translation":
        assert checks["greedy decode tokens"]["passed"]
    assert [s["stage"] for s in report["stages"]][:2] == [
        "load model",
        "export encoder" if kind == "translation" else "export model",
    ]
    assert not leftovers(out.parent)


def test_verify_and_inspect_the_written_directory(exported, cli):
    kind, attention, out, _ = exported
    verified = cli("verify", out, "--threads", "1")
    assert verified.code == 0, verified.err
    assert "verification passed" in verified.out and "FAIL" not in verified.out
    assert "max abs diff" in verified.out
    inspected = cli("inspect", out)
    assert inspected.code == 0
    op = ATTENTION_OPS[attention]
    first_graph = "encoder" if kind == "translation" else "model"
    assert f"graph {first_graph}" in inspected.out
    if kind == "translation":
        assert "in   src_ids: int64[batch, src_len]" in inspected.out
        if "screen_vocab" in load_manifest(out).extra:  # fp32 for the CPU: (B, 1) on screened steps
            assert "out  logits: float32[batch, logits_width]" in inspected.out
            assert "out  screen_ids: int64[batch]" in inspected.out and "vocab_size 1000" in inspected.out
        else:
            assert "out  logits: float32[batch, 1000]" in inspected.out
        assert "tokenizer.json" in inspected.out
        layout = "in-place" if attention == "fused" else "left-padded"  # GroupQueryAttention needs fused ops
        assert f"decoder KV cache {layout}" in inspected.out
    else:
        assert "in   pixels: float32[batch, 3, 224, 224]" in inspected.out
    if op:
        assert f"x {op}" in inspected.out
    summary = json.loads(cli("inspect", out, "--json").out)
    nodes = summary["graphs"][first_graph]["attention_nodes"]
    nodes.pop("ai.onnx::Softmax", None)
    assert nodes == ({op: next(iter(CALLS[kind].values()))} if op else {})


def test_export_from_checkpoint_with_labels_keep_rate_and_progress(checkpoints, cli, tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("zero\none\ntwo\nthree\nfour\n")
    out = tmp_path / "repo" / "digits"
    run = cli("vit", "--checkpoint", checkpoints["vit"], "--labels", labels, "--keep-rate", "0.5", "--out", out)
    assert run.code == 0, run.err
    for i, stage in enumerate(["load model", "export model", "reference outputs (PyTorch)"], start=1):
        assert f"[{i}/6] {stage}" in run.err  # progress, one line per stage off a terminal
    assert "write model.json" in run.err
    assert "stages:" in run.out and "model.logits max abs diff" in run.out and "files:" in run.out
    manifest = load_manifest(out)
    assert manifest.labels == ["zero", "one", "two", "three", "four"]
    assert manifest.config["keep_rate"] == 0.5
    assert manifest.extra["task"] == "tiny" and manifest.extra["source"]["type"] == "checkpoint"
    assert manifest.preprocessing.channels == TINY_VIT.in_channels
    assert (out.stat().st_mode & 0o777) != 0o700  # readable by a server running as another user


def test_translation_checkpoint_with_tokenizer_and_limits(checkpoints, cli, tmp_path):
    out = tmp_path / "mt"
    args = ["translation", "--checkpoint", checkpoints["translation"], "--tokenizer", checkpoints["tokenizer"]]
    run = cli(*args, "--max-source-len", "40", "--max-target-len", "30", "--name", "tiny-mt", "--out", out)
    assert run.code == 0, run.err
    manifest = load_manifest(out)
    assert manifest.name == "tiny-mt"
    assert manifest.limits == {"max_source_len": 40, "max_target_len": 30}
    assert "tokenizer" not in manifest.extra  # a real tokenizer, not the placeholder
    assert manifest.languages is None  # none given: the server routes by the name's pair, if any


def test_translation_checkpoint_records_the_languages_given(checkpoints, cli, tmp_path):
    """--source-language / --target-language: our own checkpoint's pair in model.json, as the
    Hugging Face importers record theirs, so the server routes and pivots by it (issue 36)."""
    out = tmp_path / "mt"
    args = ["translation", "--checkpoint", checkpoints["translation"], "--tokenizer", checkpoints["tokenizer"]]
    run = cli(*args, "--source-language", "fr", "--target-language", "en", "--name", "tiny", "--out", out)
    assert run.code == 0, run.err
    languages = load_manifest(out).languages
    assert (languages.source, languages.target) == (["fr"], ["en"])
    assert (languages.default_source, languages.default_target, languages.tokens) == ("fr", "en", {})


def test_no_verify_still_ships_the_reference_for_later(checkpoints, cli, tmp_path):
    out = tmp_path / "vit"
    run = cli("vit", "--checkpoint", checkpoints["vit"], "--no-verify", "--out", out)
    assert run.code == 0, run.err
    assert "verification: skipped (--no-verify)" in run.out
    assert cli("verify", out).code == 0


def test_attention_op_table_matches_the_models():
    expected = {t: None if v is None else f"{v[0] or 'ai.onnx'}::{v[1]}" for t, v in EXPORT_OP_TYPES.items()}
    assert ATTENTION_OPS == expected


def test_module_entry_point_and_help(cli):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "attnserve.export", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "verify" in proc.stdout and "inspect" in proc.stdout
    assert cli("translation", "--out", "x").code == 2  # no source: a usage error
