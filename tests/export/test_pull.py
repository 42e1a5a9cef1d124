"""``attnserve-export pull`` end to end, as a user runs it (the CLI in its own process, so
``HF_ENDPOINT`` / ``HF_HOME`` are read as huggingface_hub reads them) against local stand-ins of
the Hub and of an Argos index, into the repository of a server that is already running:

- a Hub id installs a model directory whose translations, through the server, equal those of
  ``attnserve-export translation --from-hf`` on the same files (a ViT id: ``vit --from-hf-vit``'s);
- the running server serves it without a restart (the repository is polled);
- a damaged Argos package named beside it fails alone: reported, exit code 1, nothing of it left
  in the repository or the download cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from attnserve.client import Client
from tests.support import hf_checkpoints
from tests.support.server import BIN, ServerProcess
from tests.support.stand_ins import FileStandIn, HubStandIn

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")]
HUB_ID = "Helsinki-NLP/opus-mt-en-de"


def pull(*args, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    cmd = [str(BIN / "attnserve-export"), "pull", *map(str, args), "--threads", "1"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def wait_for(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_pull_a_hub_id_into_a_running_server(hf_root, tmp_path):
    ckpt, from_hf = hf_checkpoints.export("opus-mt", hf_root, name="from-hf")
    served = tmp_path / "hub" / "opus-mt-en-de"
    shutil.copytree(ckpt.path, served)
    (served / "tf_model.h5").write_bytes(b"\0" * 1024)  # on the Hub too; the importer never reads it
    argos = tmp_path / "argos"
    argos.mkdir()
    (argos / "translate-en_de-1_0.argosmodel").write_bytes(b"PK\x03\x04 not a whole zip")
    entry = {"from_code": "en", "to_code": "de", "package_version": "1.0", "links": ["translate-en_de-1_0.argosmodel"]}
    (argos / "index.json").write_text(json.dumps([entry]))
    repo = tmp_path / "repo"
    shutil.copytree(from_hf, repo / "from-hf")
    server = ServerProcess(repo, "--metrics-port", "-1", "--repository-poll-seconds", "0.2")
    try:
        with HubStandIn({HUB_ID: served}) as hub, FileStandIn(argos) as index:
            env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "ATTNSERVE_CACHE": str(tmp_path / "cache")}
            done = pull(
                HUB_ID, "argos:en-de", "--model-repo", repo, "--argos-index", f"{index.url}/index.json", env=env
            )
            fetched = {path.rsplit("/", 1)[-1] for _, path, _ in hub.requests if "/resolve/" in path}
        assert done.returncode == 1, done.stderr
        assert f"installed {HUB_ID} -> opus-mt-en-de" in done.stdout
        assert "failed    argos:en-de" in done.stdout and "argos:en-de" in done.stderr
        assert "tf_model.h5" not in fetched
        assert sorted(p.name for p in repo.iterdir()) == ["from-hf", "opus-mt-en-de"]  # nothing hidden left
        assert list((tmp_path / "cache" / "argos").iterdir()) == []
        with Client(server.address, retries=0, timeout=60) as client:
            assert wait_for(lambda: client.health("opus-mt-en-de") == "SERVING"), "".join(server.log)
            texts = hf_checkpoints.test_texts()
            pulled = [t.text for t in client.translate(texts, "opus-mt-en-de")]
            reference = [t.text for t in client.translate(texts, "from-hf")]
        assert pulled == reference
        assert len(set(pulled)) >= 20  # the checkpoint translates, not one token repeated
        manifest = json.loads((repo / "opus-mt-en-de" / "model.json").read_text())
        assert manifest["extra"]["source"]["pulled"] == {"hub": HUB_ID, "revision": "main"}
    finally:
        assert server.stop() == 0
    assert any("opus-mt-en-de" in line and "appeared" in line for line in server.log), "".join(server.log)


def test_pull_a_hub_vit_equals_from_hf_vit(tmp_path, monkeypatch):
    """A Hub id whose config.json says ``vit`` is imported as ``vit --from-hf-vit`` imports it."""
    import numpy as np
    import onnxruntime as ort
    import torch
    import transformers
    from huggingface_hub import constants

    from attnserve.contract.manifest import load_manifest
    from attnserve.export import cli

    path = tmp_path / "hub" / "vit-tiny"
    shape = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4)
    config = transformers.ViTConfig(**shape, intermediate_size=64, id2label={0: "cat", 1: "dog"})
    torch.manual_seed(0)
    transformers.ViTForImageClassification(config).save_pretrained(path)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(path)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    with HubStandIn({"google/vit-tiny": path}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert cli.main(["pull", "google/vit-tiny", "--model-repo", str(tmp_path / "repo"), "--threads", "1"]) == 0
    assert cli.main(["vit", "--from-hf-vit", str(path), "--out", str(tmp_path / "ref"), "--threads", "1"]) == 0
    pulled, reference = load_manifest(tmp_path / "repo" / "vit-tiny"), load_manifest(tmp_path / "ref")
    assert pulled.kind == "image-classification" and pulled.labels == reference.labels == ["cat", "dog"]
    assert pulled.preprocessing == reference.preprocessing
    pixels = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    outputs = [
        ort.InferenceSession(str(d / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"pixels": pixels})
        for d in (tmp_path / "repo" / "vit-tiny", tmp_path / "ref")
    ]
    np.testing.assert_array_equal(outputs[0][0], outputs[1][0])
