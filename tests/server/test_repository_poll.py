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
