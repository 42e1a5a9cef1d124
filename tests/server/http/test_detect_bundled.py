"""Out of the box: a server on the bundled translator with the default settings answers
LibreTranslate's ``/detect`` for one- to three-word inputs, as a new user would try it with
LibreTranslate's own client (``make serve`` serves the same models and settings)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from attnserve.benchmarks.detect import read_labelled
from attnserve.server.shared.config import Settings

libretranslatepy = pytest.importorskip("libretranslatepy")
from libretranslatepy import LibreTranslateAPI  # noqa: E402

BUNDLED = Path(__file__).resolve().parents[3] / "models" / "repo" / "translator-en-de"


@pytest.fixture(scope="module")
def client(serve, tmp_path_factory):
    root = tmp_path_factory.mktemp("bundled-repo")
    (root / BUNDLED.name).symlink_to(BUNDLED, target_is_directory=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "lingua", None)  # as `pip install 'attnserve[cpu]'` leaves it: no detect extra
        with serve(root, http_port=0) as handle:  # language detection: the default setting
            assert handle.app.settings.language_detection == Settings().language_detection
            yield LibreTranslateAPI(f"http://{handle.http_address}")


def test_detect_names_the_language_of_short_inputs_among_the_served_ones(client):
    served = sorted(language["code"] for language in client.languages())
    assert served == ["de", "en"]
    items = [x for x in read_labelled() if x.language in served and x.kind != "paragraph"]
    answers = {x.text: client.detect(x.text) for x in items}
    for found in answers.values():
        assert {d["language"] for d in found} <= set(served) and 0 < found[0]["confidence"] <= 100
    short = [x for x in items if x.kind == "short"]
    right = sum(answers[x.text][0]["language"] == x.language for x in short)
    assert right / len(short) >= 0.85, f"{right} of {len(short)}"
    assert all(answers[x.text][0]["language"] == x.language for x in items if x.kind == "sentence")
