"""A request's source language picks the sentence rules its documents are split by, through a
real request: the bundled translator declared as translating from English and German, so the
source language is the request's to name (with one declared source, it is the model's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import COMMITTED

GERMAN = "Am 3. März ging er. Dann kam sie."  # German rules: 2 sentences; English rules end one at "3."
GERMAN_SENTENCES = ["Am 3. März ging er.", "Dann kam sie."]
ENGLISH_PIECES = ["Am 3.", "März ging er.", "Dann kam sie."]
MODEL = "translator"


@pytest.fixture(scope="module")
def server(serve, tmp_path_factory):
    repo = tmp_path_factory.mktemp("two-sources")
    model_dir = repo / MODEL
    model_dir.mkdir()
    for path in COMMITTED.iterdir():
        if path.name != "model.json":
            (model_dir / path.name).symlink_to(path)
    manifest = json.loads((COMMITTED / "model.json").read_text())
    manifest["name"] = MODEL
    manifest["languages"] = {**manifest["languages"], "source": ["en", "de"]}
    (model_dir / "model.json").write_text(json.dumps(manifest))
    with serve(Path(repo)) as handle:
        yield handle


def sentences_seen(server) -> float:
    return server.metric("attnserve_request_sentences_sum", model=MODEL)


def test_a_german_request_is_split_by_german_rules(server):
    with server.client(timeout=120.0) as client:
        before = sentences_seen(server)
        (german,) = client.translate([GERMAN], MODEL, source_language="de", target_language="de")
        assert sentences_seen(server) - before == 2
        alone = client.translate(GERMAN_SENTENCES, MODEL, source_language="de", target_language="de")
        assert german.text == " ".join(t.text for t in alone)  # each sentence translated whole

        before = sentences_seen(server)
        (english,) = client.translate([GERMAN], MODEL, source_language="en", target_language="de")
        assert sentences_seen(server) - before == 3
        pieces = client.translate(ENGLISH_PIECES, MODEL, source_language="en", target_language="de")
        assert english.text == " ".join(t.text for t in pieces)
    assert german.text != english.text


def test_iso_and_regional_codes_pick_the_same_rules(server):
    with server.client(timeout=120.0) as client:
        (plain,) = client.translate([GERMAN], MODEL, source_language="de", target_language="de")
        before = sentences_seen(server)
        (regional,) = client.translate([GERMAN], MODEL, source_language="de-AT", target_language="de")
        assert sentences_seen(server) - before == 2
    assert regional.text == plain.text
