"""The server replays a model's stored reference outputs (verification.npz) at load: a model whose
graphs do not reproduce them on this machine is NOT_SERVING with a message that says what to do."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from attnserve.contract.manifest import load_manifest
from attnserve.contract.references import VERIFICATION_FILE
from attnserve.export.cli import main as export_main
from attnserve.export.modeldir import seal
from attnserve.server.runtime.registry import ModelRegistry, RepositoryError

from .conftest import digit_png, settings_for

pytestmark = pytest.mark.integration  # torch exports of mt-tiny (tests/support/tiers.py)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    """mt-tiny exported by the CLI (so with verification.npz) at fp32 and int8."""
    root = tmp_path_factory.mktemp("exported")
    dirs = {}
    for precision in ("fp32", "int8"):
        out = root / f"mt-{precision}"
        args = ["--preset", "mt-tiny", "--precision", precision, "--threads", "1", "--out", str(out)]
        assert export_main(["translation", *args]) == 0
        dirs[precision] = out
    return dirs


def _copy_named(src: Path, dest: Path, *, drop_quantization: bool = False) -> Path:
    """A copy of the model directory ``src`` served under the name ``dest.name``, re-sealed."""
    shutil.copytree(src, dest)
    raw = json.loads((dest / "model.json").read_text())
    raw["name"] = dest.name
    if drop_quantization:  # an int8 export from before the scheme was recorded in model.json
        raw["extra"].pop("quantization", None)
    (dest / "model.json").write_text(json.dumps(raw))
    seal(dest, load_manifest(dest, verify_files=False))
    return dest


def _alter(model_dir: Path, key: str) -> Path:
    """Move the stored reference ``key`` by 1.0 and re-seal: the sha256 in model.json match and only the
    numbers disagree, as when a model meets a CPU whose kernels compute something else."""
    with np.load(model_dir / VERIFICATION_FILE) as npz:
        data = {k: npz[k] for k in npz.files}
    data[key] = data[key] + 1.0
    np.savez(model_dir / VERIFICATION_FILE, **data)
    seal(model_dir, load_manifest(model_dir, verify_files=False))
    return model_dir


@pytest.fixture
def repo_with_altered(tmp_path, exported, vit_dirs) -> Path:
    repo = tmp_path / "repo"
    _copy_named(exported["fp32"], repo / "good")
    _alter(_copy_named(exported["fp32"], repo / "altered"), "decoder.out.logits")
    shutil.copytree(vit_dirs["digits"], repo / "digits")  # no verification.npz: loads as before
    return repo


def test_a_model_whose_references_were_altered_is_not_serving_with_the_reason(serve, repo_with_altered, caplog):
    caplog.set_level(logging.INFO, logger="attnserve.server")
    with serve(repo_with_altered, skip_bad_models=True) as server, server.client() as client:
        assert client.health("altered") == "NOT_SERVING"
        assert client.health("good") == "SERVING" and client.health("digits") == "SERVING"
        models = {m.name: m for m in client.list_models()}
        error = models["altered"].error
        assert "do not reproduce the reference outputs" in error and "decoder.logits" in error
        assert "re-export" in error
        assert client.translate(["t5 t6 t7"], "good")[0].text  # the good one translates
        assert client.classify([digit_png(3)], "digits")[0].labels
    logged = [r.getMessage() for r in caplog.records]
    assert any("altered NOT_SERVING" in m and "decoder.logits" in m for m in logged)
    assert any("loaded model good" in m and "reference outputs match" in m for m in logged)
    assert any("loaded model digits" in m and "not checked" in m for m in logged)


def test_without_skip_bad_models_the_altered_model_stops_start_up(repo_with_altered):
    with pytest.raises(RepositoryError, match="altered.*do not reproduce the reference outputs.*--skip-bad-models"):
        ModelRegistry.load(repo_with_altered, settings_for(repo_with_altered))


def test_an_old_full_range_int8_export_is_told_to_re_export(tmp_path, exported):
    repo = tmp_path / "repo"
    _alter(_copy_named(exported["int8"], repo / "old-int8", drop_quantization=True), "encoder.out.memory")
    with pytest.raises(RepositoryError) as err:
        ModelRegistry.load(repo, settings_for(repo))
    message = str(err.value)
    assert "int8 graphs" in message and "encoder.memory" in message
    assert "7-bit weights" in message and "--precision fp32" in message
