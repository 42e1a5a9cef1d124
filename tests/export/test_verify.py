"""`attnserve-export verify` catches a tampered file (sha256) and a graph whose outputs drift,
and runs without torch."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from attnserve.contract.manifest import load_manifest, sha256_file
from attnserve.export.cli import main

from .conftest import error_lines, leftovers


@pytest.fixture(scope="module")
def model_dirs(checkpoints, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("verify")
    dirs = {}
    for kind, extra in (("translation", ["--tokenizer", str(checkpoints["tokenizer"])]), ("vit", [])):
        dirs[kind] = root / kind
        args = [kind, "--checkpoint", str(checkpoints[kind]), *extra, "--out", str(dirs[kind]), "--threads", "1"]
        assert main(args) == 0
    return dirs


@pytest.fixture
def copy_of(model_dirs, tmp_path):
    def copy(kind: str):
        return shutil.copytree(model_dirs[kind], tmp_path / kind)

    return copy


def _rehash(model_dir, fname: str) -> None:
    """Put the file's new sha256 and size into model.json: only the numeric checks can notice now."""
    path = model_dir / "model.json"
    data = json.loads(path.read_text())
    data["files"][fname] = {"sha256": sha256_file(model_dir / fname), "bytes": (model_dir / fname).stat().st_size}
    path.write_text(json.dumps(data, indent=2))


def test_tampered_file_fails_with_one_line(copy_of, cli):
    model_dir = copy_of("translation")
    tokenizer = model_dir / "tokenizer.json"
    tokenizer.write_text(tokenizer.read_text().replace('"t5"', '"x5"'))  # same size: only sha256 can tell
    run = cli("verify", model_dir)
    assert run.code == 1
    error = error_lines(run)
    assert len(error) == 1 and "tokenizer.json" in error[0] and "sha256" in error[0]


@pytest.mark.parametrize("kind", ["vit", "translation"])
def test_graph_whose_output_drifts_fails_with_the_numbers(copy_of, cli, kind):
    model_dir = copy_of(kind)
    fname = "model.onnx" if kind == "vit" else "decoder.onnx"
    proto = onnx.load(str(model_dir / fname))
    weights = max(proto.graph.initializer, key=lambda t: np.prod(t.dims))  # the largest weight
    array = numpy_helper.to_array(weights)
    weights.CopyFrom(numpy_helper.from_array(array * 1.05 + 0.01, weights.name))
    onnx.save(proto, str(model_dir / fname))
    _rehash(model_dir, fname)
    load_manifest(model_dir)  # the hashes agree again
    run = cli("verify", model_dir)
    assert run.code == 1
    assert "FAIL" in run.out and "max abs diff" in run.out and "> 0.0001" in run.out
    assert "verification failed" in run.err and "max abs diff" in run.err
    assert "onnx.checker" in run.out and "FAIL  onnx.checker" not in run.out  # still a valid graph


def test_a_screened_projection_that_picks_other_words_fails(copy_of, cli):
    """The fp32 export's int8 screen (``extra.screen_vocab``) is verified against its full projection."""
    model_dir = copy_of("translation")
    assert load_manifest(model_dir).extra["screen_vocab"]["never_ids"] == [0, 1]
    proto = onnx.load(str(model_dir / "decoder.onnx"))
    (scale,) = (t for t in proto.graph.initializer if t.name == "screen_wscale")
    scale.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(scale), scale.name))  # ranks words upside down
    onnx.save(proto, str(model_dir / "decoder.onnx"))
    _rehash(model_dir, "decoder.onnx")
    run = cli("verify", model_dir)
    assert run.code == 1
    assert "ok    greedy decode tokens: 3/3" in run.out  # the full projection is untouched
    assert "FAIL  greedy decode tokens (screened projection)" in run.out


def test_verify_json(model_dirs, cli):
    run = cli("verify", model_dirs["vit"], "--json")
    assert run.code == 0
    result = json.loads(run.out)
    assert result["passed"] and result["provider"] == "CPUExecutionProvider"
    assert any(c["name"] == "model.logits top-1 agreement" and c["value"] == 1.0 for c in result["checks"])


def test_failed_verification_at_export_leaves_nothing_behind(checkpoints, cli, tmp_path, monkeypatch):
    from attnserve.export import precision

    monkeypatch.setitem(precision.TOLERANCES, "fp32", precision.Tolerance(atol=-1.0, rtol=0.0))  # nothing passes
    out = tmp_path / "repo" / "vit"
    run = cli("vit", "--checkpoint", checkpoints["vit"], "--out", out)
    assert run.code == 1
    assert "FAIL  model.logits max abs diff" in run.err
    assert run.err.strip().splitlines()[-1].startswith("attnserve-export: error: verification failed")
    assert not out.exists() and not leftovers(out.parent)


def test_verify_and_inspect_need_no_torch(model_dirs):
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["torch"] = None  # any `import torch` now fails
        from attnserve.export.cli import main
        assert main(["verify", {str(model_dirs["translation"])!r}, "--threads", "1"]) == 0
        assert main(["inspect", {str(model_dirs["vit"])!r}]) == 0
        assert "torch" not in {{m for m in sys.modules if sys.modules[m] is not None}}
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name", ["translator-en-de", "digits-vit"])
def test_the_bundled_models_verify_and_say_they_have_no_reference_outputs(cli, name):
    """models/repo is written without verification.npz (make serve serves it as committed): verify
    checks what the directory has and says the numeric checks were skipped, rather than failing."""
    from attnserve.export.zoo import REPO

    run = cli("verify", REPO / name)
    assert run.code == 0, run.err
    lines = [line.strip() for line in run.out.splitlines() if line.startswith("  ")]
    assert any(line.startswith("ok    attention nodes") for line in lines)
    assert [line for line in lines if not line.startswith("ok")] == [
        "skip  numeric checks: no verification.npz (this directory was written without reference outputs; "
        "attnserve-export translation|vit writes them)"
    ]


def test_reference_outputs_named_in_model_json_but_gone_fail(copy_of, cli):
    model_dir = copy_of("translation")
    (model_dir / "verification.npz").unlink()
    data = json.loads((model_dir / "model.json").read_text())
    del data["files"]["verification.npz"]  # so that only the numeric checks can notice
    (model_dir / "model.json").write_text(json.dumps(data, indent=2))
    run = cli("verify", model_dir)
    assert run.code == 1 and "verification.npz: missing" in run.err
