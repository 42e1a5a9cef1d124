"""The one documented command, from a checkout: ``make serve MODELS=...`` (and ``LANGUAGES=...``)
pulls the models into ``PULL_REPO`` and serves them, against a local Hub stand-in. The venv the
Makefile uses is this test environment (its stamps say it is installed), so nothing is installed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from attnserve.client import Client
from tests.support import argos_packages, hf_checkpoints
from tests.support.server import BIN
from tests.support.stand_ins import FileStandIn, HubStandIn

ROOT = Path(__file__).resolve().parents[2]
HUB_ID = "Helsinki-NLP/opus-mt-en-de"
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")]


def installed_venv(tmp_path: Path) -> Path:
    """A venv folder whose bin/ is this environment's and whose install stamps are fresh."""
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "bin").symlink_to(BIN)
    for stamp in (".serve-installed", ".import-installed"):
        (venv / stamp).touch()
    return venv


def serve_with_make(*variables: str, env: dict) -> tuple[subprocess.Popen, int, list[str]]:
    """``make serve VARIABLES`` in its own process group; (process, gRPC port, log so far)."""
    args = "ARGS=--port 0 --http-port -1 --metrics-port -1"
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "-C", str(ROOT), "serve", *variables, args],
        env={**os.environ, "OMP_NUM_THREADS": "1", "ATTNSERVE_THREADS": "1", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    log: list[str] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        log.append(line)
        if m := re.search(r"serving \d+ model\(s\) on [\d.]+:(\d+)", line):
            return proc, int(m.group(1)), log
    os.killpg(proc.pid, signal.SIGTERM)
    raise AssertionError("make serve did not serve:\n" + "".join(log))


def test_make_serve_models_pulls_then_serves(hf_root, tmp_path):
    ckpt = hf_checkpoints.build("opus-mt", hf_root)
    repo = tmp_path / "model-repo"
    with HubStandIn({HUB_ID: ckpt.path}) as hub:
        env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf")}
        variables = (f"MODELS={HUB_ID}", f"PULL_REPO={repo}", f"VENV={installed_venv(tmp_path)}")
        proc, port, log = serve_with_make(*variables, env=env)
    try:
        assert (repo / "opus-mt-en-de" / "model.json").is_file()
        texts = hf_checkpoints.test_texts()[:4]
        with Client(f"127.0.0.1:{port}", retries=0, timeout=60) as client:
            translations = client.translate(texts, "opus-mt-en-de")
        assert len(translations) == 4 and all(t.text for t in translations)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def test_make_serve_languages_pulls_the_index_pairs_then_serves(tmp_path):
    """``make serve LANGUAGES=en,de ARGOS_INDEX=...``: the documented command with a mirror's index."""
    package = argos_packages.build("onmt", "float32", tmp_path / "packages")
    index = tmp_path / "argos"
    index.mkdir()
    package.zip(index / "translate-en_de-1_0.argosmodel")
    entry = {"from_code": "en", "to_code": "de", "package_version": "1.0", "links": ["translate-en_de-1_0.argosmodel"]}
    (index / "index.json").write_text(json.dumps([entry]))
    repo = tmp_path / "model-repo"
    texts = hf_checkpoints.test_texts()[:4]
    with FileStandIn(index) as files:
        variables = ("LANGUAGES=en,de", f"ARGOS_INDEX={files.url}/index.json", f"PULL_REPO={repo}")
        env = {"ATTNSERVE_CACHE": str(tmp_path / "cache")}
        proc, port, log = serve_with_make(*variables, f"VENV={installed_venv(tmp_path)}", env=env)
    try:
        assert sorted(p.name for p in repo.iterdir()) == ["argos-en-de"], "".join(log)
        with Client(f"127.0.0.1:{port}", retries=0, timeout=60) as client:
            got = client.translate(texts, source_language="en", target_language="de")
        assert [t.text for t in got] == argos_packages.argos_translate(package, texts)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
