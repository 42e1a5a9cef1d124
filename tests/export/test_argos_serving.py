"""A folder of Argos Translate packages (LibreTranslate's package folder) exported with one command,
then served: ``attnserve-export translation --from-argos FOLDER --out REPO``.

The folder holds an int8 Marian-shaped ``.argosmodel`` (en -> de), an unpacked OpenNMT-py-shaped
package with a target prefix (relabelled en -> fr) and a corrupt ``.argosmodel``: the two good ones
are exported and verified into ``REPO/argos-en-de`` and ``REPO/argos-en-fr``, the corrupt one is
reported and leaves nothing, the exit code is 1. The real server then answers LibreTranslate's
``/translate`` with CTranslate2's greedy translations, sentence for sentence.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil

import pytest

from attnserve.contract.manifest import load_manifest
from attnserve.export import cli
from tests.support import argos_packages as ap
from tests.support import hf_checkpoints
from tests.support.server import ServerProcess, post_json

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")]
TEXTS = hf_checkpoints.test_texts()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("argos-serving")
    marian, onmt = ap.build("marian", "int8", root), ap.build("onmt", "float32", root)
    folder = root / "packages"
    folder.mkdir()
    marian.zip(folder / "translate-en_de-1_0.argosmodel")
    shutil.copytree(onmt.path, folder / "translate-en_fr-1_0")
    meta = folder / "translate-en_fr-1_0" / "metadata.json"
    meta.write_text(json.dumps(onmt.meta | {"to_code": "fr", "to_name": "French"}))
    (folder / "broken.argosmodel").write_bytes(b"not a zip at all")
    (folder / "sbd-en").mkdir()  # older LibreTranslate folders hold sentence-boundary packages too
    (folder / "sbd-en" / "metadata.json").write_text(json.dumps({"type": "sbd", "from_code": "en"}))
    repo, err = root / "repo", io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(["translation", "--from-argos", str(folder), "--out", str(repo), "--threads", "1"])
    packages = {"de": marian, "fr": ap.Package("onmt", folder / "translate-en_fr-1_0", onmt.meta)}
    return code, repo, packages, err.getvalue()


def test_the_folder_exports_every_good_package_and_reports_the_corrupt_one(exported):
    code, repo, _, err = exported
    assert code == 1  # one package failed
    assert "broken.argosmodel: not a valid .argosmodel" in err and "broken.argosmodel skipped" in err
    assert "sbd-en: a 'sbd' package, not a translation model; left out" in err
    assert sorted(p.name for p in repo.iterdir()) == ["argos-en-de", "argos-en-fr"]  # nothing half-written
    de, fr = load_manifest(repo / "argos-en-de"), load_manifest(repo / "argos-en-fr")
    assert de.family == fr.family == "argos"
    assert (de.languages.source, de.languages.target, de.languages.tokens) == (["en"], ["de"], {})
    assert fr.languages.tokens == {"fr": "__de__"}  # the package's target_prefix, forced and hidden
    assert de.extra["source"]["checks"][0]["passed"] is True
    checks = json.loads((repo / "argos-en-de" / "export-report.json").read_text())["verification"]["checks"]
    assert checks and all(c["passed"] is not False for c in checks)  # verified as every export is


def test_the_server_gives_ctranslate2s_greedy_translations(exported):
    _, repo, packages, _ = exported
    server = ServerProcess(repo, "--metrics-port", "-1")
    try:
        for target, package in packages.items():
            status, reply = post_json(server, "/translate", {"q": TEXTS, "source": "en", "target": target})
            assert status == 200, reply
            assert reply["translatedText"] == ap.argos_translate(package, TEXTS, compute_type="float32")
    finally:
        assert server.stop() == 0
