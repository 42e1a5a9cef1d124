"""Loading the model repository: bad model dirs abort start-up with a reason naming the
file and field, or with --skip-bad-models are served as NOT_SERVING beside the good ones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from attnserve.server.runtime.registry import ModelRegistry, RepositoryError

from .conftest import digit_png, settings_for


@pytest.fixture
def bad_repo(tmp_path, vit_dirs) -> Path:
    """The two good ViTs plus ``broken``: a copy of digits with one byte of its graph flipped."""
    repo = tmp_path / "repo"
    for name, path in vit_dirs.items():
        shutil.copytree(path, repo / name)
    shutil.copytree(vit_dirs["digits"], repo / "broken")
    manifest = json.loads((repo / "broken" / "model.json").read_text())
    manifest["name"] = "broken"
    (repo / "broken" / "model.json").write_text(json.dumps(manifest))
    with open(repo / "broken" / "model.onnx", "r+b") as fh:
        fh.seek(50)
        byte = fh.read(1)
        fh.seek(50)
        fh.write(bytes([byte[0] ^ 0xFF]))
    (repo / ".digits.partial-x").mkdir()  # an interrupted export: hidden, ignored
    return repo


def test_a_bad_model_aborts_start_up_naming_file_and_field(bad_repo):
    with pytest.raises(RepositoryError) as err:
        ModelRegistry.load(bad_repo, settings_for(bad_repo))
    message = str(err.value)
    assert "broken/model.onnx" in message and "files.model.onnx.sha256" in message and "--skip-bad-models" in message


def test_skip_bad_models_serves_the_others_and_reports_the_bad_one(serve, bad_repo):
    with serve(bad_repo, skip_bad_models=True) as server, server.client() as client:
        assert client.health("broken") == "NOT_SERVING"
        assert client.health("digits") == "SERVING" and client.health() == "SERVING"
        models = {m.name: m for m in client.list_models()}
        assert models["broken"].ready is False and "sha256" in models["broken"].error
        assert models["digits"].ready is True
        assert client.classify([digit_png(5)], "digits")[0].labels


def test_missing_or_empty_repository_says_how_to_build_it(tmp_path):
    with pytest.raises(RepositoryError, match="does not exist.*attnserve.export.zoo"):
        ModelRegistry.load(tmp_path / "nope", settings_for(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(RepositoryError, match="no servable model.*attnserve.export.zoo"):
        ModelRegistry.load(tmp_path / "empty", settings_for(tmp_path / "empty"))
