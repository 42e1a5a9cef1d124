"""LibreTranslate's API on a multilingual model: an NLLB-shaped checkpoint (tests/hf_checkpoints.py,
trained to reverse into French and copy into German) imported with --from-hf and served.

Its own codes (``eng_Latn``, ``fra_Latn``, ``deu_Latn``) are listed as ISO 639-1 codes, and the
target a client names chooses the forced language token: French answers are the reversed
text, German ones the copy, each what transformers' ``generate`` gives for that target.
"""

from __future__ import annotations

import json
import shutil
import urllib.request

import pytest

from tests import hf_checkpoints

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")]
libretranslatepy = pytest.importorskip("libretranslatepy")


@pytest.fixture(scope="module")
def nllb(hf_root):
    return hf_checkpoints.export("nllb", hf_root)


@pytest.fixture(scope="module")
def server(serve, nllb, tmp_path_factory):
    repo = tmp_path_factory.mktemp("lt-nllb")
    shutil.copytree(nllb[1], repo / "nllb")
    with serve(repo, http_port=0) as handle:
        yield handle


def test_languages_are_listed_by_their_iso_codes(server):
    lt = libretranslatepy.LibreTranslateAPI(f"http://{server.http_address}")
    assert lt.languages() == [
        {"code": "de", "name": "German", "targets": ["en", "fr"]},
        {"code": "en", "name": "English", "targets": ["de", "fr"]},
        {"code": "fr", "name": "French", "targets": ["de", "en"]},
    ]


def test_the_target_chooses_the_language_token(server, nllb):
    ckpt, texts = nllb[0], hf_checkpoints.test_texts()[:6]
    answers = {}
    for target, own in (("fr", "fra_Latn"), ("de", "deu_Latn")):
        expected = [ckpt.decode(row[1:]) for row in ckpt.generate(texts, own, num_beams=1)]  # row[0]: its token
        body = json.dumps({"q": texts, "source": "en", "target": target}).encode()
        request = urllib.request.Request(
            f"http://{server.http_address}/translate", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            answers[target] = json.loads(reply.read())["translatedText"]
        assert answers[target] == expected, target
    assert answers["fr"] != answers["de"]  # reversed vs copied: the token made the difference
