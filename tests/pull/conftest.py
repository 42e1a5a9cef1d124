"""The stand-ins ``pull``'s tests run against: a local Argos index over HTTP, a Hub-layout file
server (``HF_ENDPOINT``), and an export that writes only ``model.json`` so an install is fast."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from attnserve.export.cli import main
from tests.support.stand_ins import FileStandIn, HubStandIn


@pytest.fixture
def run(capsys):
    def run(*args):
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def argos(tmp_path):
    """A local Argos index (en-de, de-en, en-fr) over HTTP; its packages are not there (404)."""
    root = tmp_path / "argos"
    root.mkdir()
    entries = [
        {"from_code": s, "to_code": t, "package_version": "1.0", "links": [f"translate-{s}_{t}-1_0.argosmodel"],
         "from_name": s.upper(), "to_name": t.upper()}
        for s, t in (("en", "de"), ("de", "en"), ("en", "fr"))
    ]  # fmt: skip
    (root / "index.json").write_text(json.dumps(entries))
    with FileStandIn(root) as files:
        yield files


@pytest.fixture
def hub(tmp_path, monkeypatch):
    from huggingface_hub import constants

    repo = tmp_path / "hub" / "opus-mt-en-de"
    repo.mkdir(parents=True)
    (repo / "config.json").write_text('{"model_type": "marian"}')
    (repo / "model.safetensors").write_bytes(b"\0" * 64)
    (repo / "tf_model.h5").write_bytes(b"\0" * 64)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    with HubStandIn({"Helsinki-NLP/opus-mt-en-de": repo}) as stand_in:
        monkeypatch.setenv("HF_ENDPOINT", stand_in.url)
        yield stand_in


@pytest.fixture
def fake_export(monkeypatch):
    """Installs write ``model.json`` only (with the origin the pull records), as the export would,
    through the same hidden folder renamed into place; ``calls`` lists the labels exported."""
    from attnserve.export.modeldir import staged_directory
    from attnserve.export.pull import install

    calls = []

    def export_pulled(item, source, out, settings):
        calls.append(item.label)
        with staged_directory(out, force=settings.force) as tmp:
            (tmp / "model.json").write_text(json.dumps({"extra": {"source": {"pulled": item.origin}}}))
        return SimpleNamespace(manifest=SimpleNamespace(kind="translation", precision="fp32"))

    monkeypatch.setattr(install, "load_source", lambda item, local: local)
    monkeypatch.setattr(install, "export_pulled", export_pulled)
    return calls
