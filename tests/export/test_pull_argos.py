"""``attnserve-export pull --languages`` against a local Argos index over HTTP, serving packages
made by CTranslate2's own converters (tests/support/argos_packages.py), into a running server:

- every pair among the languages that the index offers is installed, an int8 package included,
  and translates as Argos Translate (CTranslate2) does, sentence for sentence, through the server;
- a pair the index lacks (fr -> de) is served through the pivot (fr -> en -> de);
- a download cut mid-body is resumed with a Range request; a damaged package and a 404 fail
  alone: reported, exit code 1, nothing of them in the repository or the download cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from attnserve.client import Client
from tests.support import argos_packages, hf_checkpoints
from tests.support.server import BIN, ServerProcess
from tests.support.stand_ins import FileStandIn

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")]
ROOT = Path(__file__).resolve().parents[2]
# pair -> (package kind, quantization); it-en is listed but 404s, en-it is damaged
PAIRS = {"fr-en": ("marian", "float32"), "en-de": ("onmt", "int8")}


def argos_index(root, packages: dict) -> FileStandIn:
    """A folder served over HTTP: index.json, and a .argosmodel per pair with the pair's codes."""
    root.mkdir()
    entries = []
    for pair, package in packages.items():
        source, target = pair.split("-")
        name = f"translate-{source}_{target}-1_0.argosmodel"
        entries.append({"from_code": source, "to_code": target, "package_version": "1.0", "links": [name],
                        "from_name": source, "to_name": target, "type": "translate"})  # fmt: skip
        if package is None:
            continue
        if isinstance(package, bytes):
            (root / name).write_bytes(package)
            continue
        unpacked = root / "unpacked" / f"translate-{source}_{target}"
        shutil.copytree(package.path, unpacked)
        meta = json.loads((unpacked / "metadata.json").read_text()) | {"from_code": source, "to_code": target}
        (unpacked / "metadata.json").write_text(json.dumps(meta))
        argos_packages.Package(package.kind, unpacked, meta).zip(root / name)
    (root / "index.json").write_text(json.dumps(entries))
    return FileStandIn(root)


def wait_for(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("argos-packages")
    return {pair: argos_packages.build(kind, q, root) for pair, (kind, q) in PAIRS.items()}


def test_pull_languages_from_a_local_index_into_a_running_server(packages, tmp_path):
    served = {**packages, "en-it": b"PK\x03\x04 damaged", "it-en": None}
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "models" / "repo" / "digits-vit", repo / "digits-vit")  # a server needs one model
    with argos_index(tmp_path / "argos", served) as index:
        index.cut_once["translate-fr_en-1_0.argosmodel"] = 5000
        env = {**os.environ, "OMP_NUM_THREADS": "1", "ATTNSERVE_CACHE": str(tmp_path / "cache")}
        cmd = [str(BIN / "attnserve-export"), "pull", "--languages", "en,de,fr,it", "--model-repo", str(repo),
               "--argos-index", f"{index.url}/index.json", "--threads", "1"]  # fmt: skip
        server = ServerProcess(repo, "--metrics-port", "-1", "--repository-poll-seconds", "0.2", "--skip-bad-models")
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
            ranges = [r for _, path, r in index.requests if path == "translate-fr_en-1_0.argosmodel"]
            assert done.returncode == 1, done.stdout + done.stderr
            assert "HTTP 404" in done.stderr and "argos:it-en" in done.stderr and "argos:en-it" in done.stderr
            assert ranges == [None, "bytes=5000-"]
            assert sorted(p.name for p in repo.iterdir()) == ["argos-en-de", "argos-fr-en", "digits-vit"]
            assert sorted(p.name for p in (tmp_path / "cache" / "argos").iterdir()) == [
                "translate-en_de-1_0.argosmodel",
                "translate-fr_en-1_0.argosmodel",
            ]
            texts = hf_checkpoints.test_texts()[:8]
            with Client(server.address, retries=0, timeout=60) as client:
                assert wait_for(lambda: client.health("argos-en-de") == "SERVING"), "".join(server.log)
                assert wait_for(lambda: client.health("argos-fr-en") == "SERVING"), "".join(server.log)
                for pair, package in packages.items():
                    source, target = pair.split("-")
                    got = client.translate(texts, source_language=source, target_language=target)
                    assert [t.text for t in got] == argos_packages.argos_translate(package, texts), pair
                english = [t.text for t in client.translate(texts, source_language="fr", target_language="en")]
                pivoted = client.translate(texts, source_language="fr", target_language="de")
                direct = client.translate(english, source_language="en", target_language="de")
            assert {t.pivot_language for t in pivoted} == {"en"}
            assert [t.text for t in pivoted] == [t.text for t in direct]
        finally:
            assert server.stop() == 0
