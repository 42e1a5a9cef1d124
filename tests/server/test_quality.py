"""The quality score: low for out-of-domain nonsense, high for in-domain translations, on every door
of a live server with the bundled translator; the threshold marks or refuses; repetition counts."""

from __future__ import annotations

import json

import grpc
import numpy as np
import pytest

from attnserve.client import AttnServeError
from attnserve.contract.manifest import ManifestError, load_manifest
from attnserve.contract.quality import DEFAULT, parse_calibration
from attnserve.export.zoo import REPO
from attnserve.server.service import quality
from attnserve.server.translation import Hypothesis

from ..support.server import post_json

MODEL = "translator-en-de"
GOOD, NONSENSE = "Monday, March 3, 2025", "I will call you tomorrow."
HIGH, LOW = 0.9, 0.1


@pytest.fixture(scope="module")
def server(serve):
    with serve(REPO, http_port=0) as handle:
        yield handle


def test_v1_scores_in_domain_high_and_free_text_low_only_when_asked(server):
    with server.client() as client:
        good, nonsense = client.translate([GOOD, NONSENSE], quality=True)
        (plain,) = client.translate([GOOD])
        (two,) = client.translate([f"{GOOD}. {NONSENSE}"], quality=True)
        beam = client.translate([GOOD, NONSENSE], quality=True, beam_size=4, num_hypotheses=2)
    assert good.quality.score > HIGH and not good.quality.low
    assert nonsense.quality.score < LOW and nonsense.quality.likely_wrong and not nonsense.quality.low
    assert nonsense.text == "sechzehnhundertsechzehnste."  # the README's example: the model's answer is unchanged
    assert plain.quality is None  # not asked, no threshold: nothing computed
    assert beam[0].quality.score > HIGH and beam[1].quality.score < LOW  # beam search: the best hypothesis's
    # a text scores its worst sentence
    assert len(two.quality.sentences) == 2 and two.quality.sentences[0] > HIGH
    assert two.quality.score == min(two.quality.sentences) < LOW


def test_a_long_document_is_scored_per_sentence_and_by_its_worst(server):
    lines = [GOOD] * 70 + [NONSENSE] + [GOOD] * 5  # more sentences than are judged on the event loop
    with server.client() as client:
        (document,) = client.translate(["\n".join(lines)], quality=True)
    scores = document.quality.sentences
    assert len(scores) == 76 and scores.index(min(scores)) == 70 and document.quality.score == min(scores) < LOW
    assert all(s > HIGH for i, s in enumerate(scores) if i != 70)


def test_a_stream_refuses_quality(server):
    from attnserve.protos.attnserve.v1 import inference_pb2 as pb

    with server.client() as client, pytest.raises(grpc.RpcError) as err:
        list(client.stub.TranslateStream(pb.TranslateRequest(texts=[GOOD], return_quality=True), timeout=20))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "whole translations" in err.value.details()


def test_kserve_rest_returns_a_quality_tensor_when_asked(server):
    texts = {"name": "TEXT", "datatype": "BYTES", "shape": [2], "data": [GOOD, NONSENSE]}
    status, reply = post_json(
        server, f"/v2/models/{MODEL}/infer", {"inputs": [texts], "parameters": {"return_quality": True}}
    )
    assert status == 200, reply
    (scores,) = [o for o in reply["outputs"] if o["name"] == "QUALITY"]
    assert scores["datatype"] == "FP32" and scores["shape"] == [2]
    assert scores["data"][0] > HIGH and scores["data"][1] < LOW
    # or by naming the output
    outputs = [{"name": "TRANSLATION"}, {"name": "QUALITY"}]
    status, reply = post_json(server, f"/v2/models/{MODEL}/infer", {"inputs": [texts], "outputs": outputs})
    assert status == 200 and [o["name"] for o in reply["outputs"]] == ["TRANSLATION", "QUALITY"]
    status, reply = post_json(server, f"/v2/models/{MODEL}/infer", {"inputs": [texts]})
    assert [o["name"] for o in reply["outputs"]] == ["TRANSLATION"]


def test_kserve_grpc_returns_the_quality_tensor(server):
    tritonclient_grpc = pytest.importorskip("tritonclient.grpc")
    text = tritonclient_grpc.InferInput("TEXT", [2], "BYTES")
    text.set_data_from_numpy(np.array([GOOD.encode(), NONSENSE.encode()], dtype=object))
    outputs = [tritonclient_grpc.InferRequestedOutput(n) for n in ("TRANSLATION", "QUALITY")]
    client = tritonclient_grpc.InferenceServerClient(server.address)
    try:
        result = client.infer(MODEL, [text], outputs=outputs)
    finally:
        client.close()
    scores = result.as_numpy("QUALITY")
    assert scores.dtype == np.float32 and scores[0] > HIGH and scores[1] < LOW


def test_generate_returns_the_quality(server):
    path = f"/v2/models/{MODEL}/generate"
    status, reply = post_json(server, path, {"text_input": NONSENSE, "parameters": {"return_quality": True}})
    assert status == 200 and reply["quality"] < LOW and reply["low_quality"] is False
    assert reply["quality_sentences"] == [reply["quality"]]
    status, reply = post_json(server, path, {"text_input": GOOD})
    assert status == 200 and "quality" not in reply


def test_libretranslate_adds_quality_and_libretranslatepy_still_reads_the_reply(server):
    body = {"q": [GOOD, NONSENSE], "source": "en", "target": "de", "quality": True}
    status, reply = post_json(server, "/translate", body)
    assert status == 200 and reply["quality"][0] > HIGH and reply["quality"][1] < LOW
    assert reply["lowQuality"] == [False, False]
    status, reply = post_json(server, "/translate", {"q": NONSENSE, "source": "en", "target": "de", "quality": True})
    assert reply["translatedText"] == "sechzehnhundertsechzehnste." and reply["quality"] < LOW
    libretranslatepy = pytest.importorskip("libretranslatepy")
    lt = libretranslatepy.LibreTranslateAPI(f"http://{server.http_address}/")
    assert lt.translate(GOOD, "en", "de") == "Montag, 3. März 2025"


def test_a_threshold_marks_low_translations_on_every_door_without_being_asked(serve):
    with serve(REPO, http_port=0, min_quality=0.5) as server:
        with server.client() as client:
            good, nonsense = client.translate([GOOD, NONSENSE])
        assert not good.quality.low and nonsense.quality.low and nonsense.text == "sechzehnhundertsechzehnste."
        status, reply = post_json(server, "/translate", {"q": NONSENSE, "source": "en", "target": "de"})
        assert status == 200 and reply["lowQuality"] is True
        status, reply = post_json(server, f"/v2/models/{MODEL}/generate", {"text_input": NONSENSE})
        assert status == 200 and reply["low_quality"] is True
        texts = {"name": "TEXT", "datatype": "BYTES", "shape": [2], "data": [GOOD, NONSENSE]}
        status, reply = post_json(server, f"/v2/models/{MODEL}/infer", {"inputs": [texts]})
        assert status == 200 and reply["parameters"]["low_quality"] == 1


def test_a_refusing_threshold_names_the_sentence_and_its_score(serve):
    with serve(REPO, http_port=0, min_quality=0.5, quality_action="refuse") as server:
        with server.client() as client:
            (good,) = client.translate([GOOD])
            with pytest.raises(AttnServeError) as err:
                client.translate([GOOD, f"{GOOD}. {NONSENSE}"])
        assert good.text == "Montag, 3. März 2025" and good.quality.score > HIGH
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
        details = err.value.details
        assert "text 1, sentence 1" in details and NONSENSE in details and "quality 0.00" in details
        status, reply = post_json(server, "/translate", {"q": NONSENSE, "source": "en", "target": "de"})
        assert status == 400 and "--min-quality" in reply["error"]


def test_repeated_ngrams_are_measured_and_lower_the_default_score():
    looped = [5, 6, 7] * 6 + [2]
    assert quality.repetition(looped) > 0.7 and quality.repetition([5, 6, 7, 8, 9, 2]) == 0.0
    attention = np.eye(6, dtype=np.float32)[np.arange(19) % 6]  # (steps, source): every word read in turn

    def score(ids, reason="eos"):  # the same confidence per token, the same attention
        hyp = Hypothesis("x", ids, -0.2 * len(ids), 0.0, reason, attention=attention[: len(ids)])
        return DEFAULT.score(quality.features(hyp, 6, [11, 12, 13, 14, 15, 2]))

    once = [5, 6, 7, 8, 9, 10, 2]
    assert score(once) > 0.99 and score(looped) < 0.6  # the loop alone takes the score down
    assert score(looped, "length") < 0.01  # and running into max_new_tokens further
    # repeats the source has are no loop: "1,000,000" -> "1.000.000"
    source = [20, 21, 20, 21, 20, 21, 2]
    hyp = Hypothesis("x", [30, 21, 30, 21, 30, 21, 2], -1.0, 0.0, "eos")
    assert quality.features(hyp, 7, source)["repetition"] == 0.0 < quality.features(hyp, 7)["repetition"]


def test_a_bad_calibration_in_model_json_is_refused_naming_the_field(tmp_path):
    import shutil

    model = tmp_path / MODEL
    shutil.copytree(REPO / MODEL, model)
    data = json.loads((model / "model.json").read_text())
    assert load_manifest(model).quality.features == ("mean_logprob",)  # the committed fit
    data["quality"]["scale"] = [0.0]
    (model / "model.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="quality.scale"):
        load_manifest(model)
    with pytest.raises(ValueError, match="unknown 'bleu'"):
        parse_calibration({**data["quality"], "features": ["bleu"]})


def test_the_decoder_keeps_its_steps_attention_for_scoring_only_where_the_calibration_reads_it():
    from types import SimpleNamespace

    from attnserve.server.translation import DecodeOptions

    bundled = load_manifest(REPO / "translator-en-de").quality  # fit on the log-probability alone
    assert bundled is not None and not bundled.reads_attention and DEFAULT.reads_attention
    for calibration, kept in ((bundled, False), (DEFAULT, True), (None, True)):  # None: the generic default
        engine = SimpleNamespace(step_attention=True, manifest=SimpleNamespace(quality=calibration))
        options = quality.scoring_options(DecodeOptions(), engine)
        assert options.return_scores and options.return_attention is kept
    no_output = SimpleNamespace(step_attention=False, manifest=SimpleNamespace(quality=DEFAULT))
    assert not quality.scoring_options(DecodeOptions(), no_output).return_attention
    asked = quality.scoring_options(
        DecodeOptions(return_attention=True), SimpleNamespace(step_attention=True, manifest=None)
    )
    assert asked.return_attention  # what the request asked for stays
