"""The HTTP routes on a multilingual model: an NLLB-shaped checkpoint (tests/support/hf_checkpoints.py,
trained to reverse into French and copy into German) imported with --from-hf and served.

LibreTranslate lists its own codes (``eng_Latn``, ``fra_Latn``, ``deu_Latn``) as ISO 639-1
codes; there and in generate / generate_stream / KServe's infer (``target_language``), the
target a client names chooses the forced language token: French answers are the reversed
text, German ones the copy, each what transformers' ``generate`` gives for that target.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request

import pytest

from tests.support import hf_checkpoints

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")]
libretranslatepy = pytest.importorskip("libretranslatepy")


@pytest.fixture(scope="module")
def nllb(hf_root):
    return hf_checkpoints.export("nllb", hf_root)


def expected(nllb, texts: list[str], own: str) -> list[str]:
    ckpt = nllb[0]
    return [ckpt.decode(row[1:]) for row in ckpt.generate(texts, own, num_beams=1)]  # row[0]: its token


def post(server, path: str, doc: dict) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"http://{server.http_address}{path}",
        data=json.dumps(doc).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


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
    texts = hf_checkpoints.test_texts()[:6]
    answers = {}
    for target, own in (("fr", "fra_Latn"), ("de", "deu_Latn")):
        status, reply = post(server, "/translate", {"q": texts, "source": "en", "target": target})
        answers[target] = json.loads(reply)["translatedText"]
        assert status == 200 and answers[target] == expected(nllb, texts, own), target
    assert answers["fr"] != answers["de"]  # reversed vs copied: the token made the difference


@pytest.mark.parametrize(("target", "own"), [("fr", "fra_Latn"), ("deu_Latn", "deu_Latn")])
def test_generate_stream_and_kserve_take_target_language(server, nllb, target, own):
    text = hf_checkpoints.test_texts()[2]
    (want,) = expected(nllb, [text], own)
    parameters = {"target_language": target}
    status, reply = post(server, "/v2/models/nllb/generate", {"text_input": text, "parameters": parameters})
    assert status == 200 and json.loads(reply)["text_output"] == want
    status, reply = post(server, "/v2/models/nllb/generate_stream", {"text_input": text, "parameters": parameters})
    events = [json.loads(e[len("data: ") :]) for e in reply.decode().split("\n\n") if e]
    assert status == 200 and "".join(e["text_output"] for e in events) == want
    tensor = {"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [text]}
    status, reply = post(server, "/v2/models/nllb/infer", {"inputs": [tensor], "parameters": parameters})
    assert status == 200 and json.loads(reply)["outputs"][0]["data"] == [want]


def test_an_unserved_target_language_is_400_naming_the_served_ones(server):
    body = {"text_input": "savi", "parameters": {"target_language": "es"}}
    status, reply = post(server, "/v2/models/nllb/generate", body)
    assert status == 400 and "eng_Latn, fra_Latn, deu_Latn" in json.loads(reply)["error"]
    status, reply = post(server, "/v2/models/nllb/generate", {**body, "parameters": {"target_language": 3}})
    assert status == 400 and "parameters.target_language: expected a string" in json.loads(reply)["error"]
