"""A running server picks up model directories renamed into its repository (how
``attnserve-export pull`` installs them) without a restart or a signal: lazily served, the new
model is indexed and its language pair routed at once, and loaded on its first request; a
directory still being written (hidden, ``.name.partial-*``) is never looked at."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from attnserve.client import Client
from tests.support.server import ServerProcess

pytestmark = pytest.mark.integration  # a live server process (tests/support/tiers.py)
BUNDLED = Path(__file__).resolve().parents[2] / "models" / "repo"


def wait_for(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_a_directory_renamed_into_the_repository_is_served(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(BUNDLED / "digits-vit", repo / "digits-vit")
    server = ServerProcess(repo, "--metrics-port", "-1", "--load-models", "lazy", "--repository-poll-seconds", "0.1")
    try:
        with Client(server.address, retries=0, timeout=60) as client:
            staged = repo / ".translator-en-de.partial-1"
            shutil.copytree(BUNDLED / "translator-en-de", staged)
            time.sleep(0.5)  # several polls: a hidden directory is not a model yet
            assert client.health("translator-en-de") == "SERVICE_UNKNOWN"
            os.replace(staged, repo / "translator-en-de")
            assert wait_for(lambda: client.health("translator-en-de") == "SERVING"), "".join(server.log)
            (got,) = client.translate(["Monday, March 3, 2025"], source_language="en", target_language="de")
            assert got.text == "Montag, 3. März 2025"  # routed by its languages, loaded on this first request
    finally:
        assert server.stop() == 0
    assert any("translator-en-de appeared or changed" in line for line in server.log), "".join(server.log)


def test_a_folder_copied_file_by_file_is_served_once_its_last_file_is_there(tmp_path):
    # cp -r writes model.json before the graph: the poll sees the folder half copied, its load
    # fails, and the rest arriving is a change too
    import json

    repo = tmp_path / "repo"
    shutil.copytree(BUNDLED / "digits-vit", repo / "digits-vit")
    server = ServerProcess(repo, "--metrics-port", "-1", "--repository-poll-seconds", "0.1")
    try:
        with Client(server.address, retries=0, timeout=60) as client:
            copy = repo / "digits-copy"
            copy.mkdir()
            manifest = json.loads((BUNDLED / "digits-vit" / "model.json").read_text())
            (copy / "model.json").write_text(json.dumps({**manifest, "name": "digits-copy"}))
            assert wait_for(lambda: any("reload of model digits-copy failed" in line for line in server.log))
            time.sleep(0.5)  # several polls with nothing new: not tried again
            assert sum("reload of model digits-copy failed" in line for line in server.log) == 1
            for name in ("labels.json", "model.onnx"):
                shutil.copy(BUNDLED / "digits-vit" / name, copy / name)
            assert wait_for(lambda: client.health("digits-copy") == "SERVING"), "".join(server.log)
    finally:
        assert server.stop() == 0


def test_loads_by_a_reload_are_counted_as_at_start(serve, tmp_path):
    # "any failed load" (docs/operations.md's alert) fires for a broken deploy, not only at start
    import json

    repo = tmp_path / "repo"
    shutil.copytree(BUNDLED / "digits-vit", repo / "digits-vit")
    with serve(repo) as server:

        def loads(outcome: str) -> float:
            return server.metric("attnserve_model_loads_total", model="digits-copy", outcome=outcome)

        copy = repo / "digits-copy"
        shutil.copytree(BUNDLED / "digits-vit", copy)
        manifest = json.loads((copy / "model.json").read_text())
        (copy / "model.json").write_text(json.dumps({**manifest, "name": "digits-copy"}))
        (copy / "model.onnx").write_bytes((copy / "model.onnx").read_bytes()[:-100] + bytes(100))  # sha256 fails
        (failed,) = server.loop_thread.run(server.app.reload(["digits-copy"]))
        assert failed.action == "failed" and (loads("failed"), loads("ok")) == (1, 0)
        shutil.copy(BUNDLED / "digits-vit" / "model.onnx", copy / "model.onnx")
        (added,) = server.loop_thread.run(server.app.reload(["digits-copy"]))
        assert added.action == "added" and (loads("failed"), loads("ok")) == (1, 1)
        (copy / "model.json").write_text(json.dumps({**manifest, "name": "digits-copy", "extra": {"v": 2}}))
        (reloaded,) = server.loop_thread.run(server.app.reload(["digits-copy"]))
        assert reloaded.action == "reloaded" and (loads("failed"), loads("ok")) == (1, 2)


def test_a_second_folder_naming_a_served_model_is_refused_not_swapped_in_at_every_reload(serve, tmp_path):
    import json

    repo = tmp_path / "repo"
    shutil.copytree(BUNDLED / "digits-vit", repo / "digits-vit")
    with serve(repo) as server:
        served = server.app.registry.models["digits-vit"]
        copy = repo / "digits-vit-new"  # a new version dropped beside the served one, its name unchanged
        shutil.copytree(BUNDLED / "digits-vit", copy)
        manifest = json.loads((copy / "model.json").read_text())
        (copy / "model.json").write_text(json.dumps({**manifest, "extra": {"v": 2}}))
        for _ in range(2):
            outcomes = [(o.name, o.action, o.error) for o in server.loop_thread.run(server.app.reload())]
            assert [o[:2] for o in outcomes] == [("digits-vit", "unchanged"), ("digits-vit", "failed")]
            assert "already served from" in outcomes[1][2] and "digits-vit-new" in outcomes[1][2]
            assert server.app.registry.models["digits-vit"] is served
