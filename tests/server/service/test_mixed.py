"""A batch with source ``auto`` whose texts are in several languages: one request per language,
the results back in the batch's order, every text's detection named."""

from __future__ import annotations

import asyncio

import pytest

from attnserve.server.service import mixed, quality
from attnserve.server.service.requests import Detection, Translated, TranslationRequest
from attnserve.server.shared.calls import Call
from attnserve.server.shared.errors import InvalidRequest
from attnserve.server.translation import Hypothesis, TranslationResult

MODELS = {"de": "de-en", "fr": "fr-en"}


def _result(text: str) -> TranslationResult:
    hypothesis = Hypothesis(text.upper(), token_ids=[], logprob=0.0, score=0.0, finish_reason="eos")
    return TranslationResult(
        [hypothesis], source_tokens=1, queue_ms=0.0, encode_ms=0.0, decode_ms=0.0, first_token_ms=0.0
    )


def _request(texts: tuple[str, ...]) -> TranslationRequest:
    return TranslationRequest(
        Call("libretranslate.translate", "", "test"), texts, source_language="auto", target_language="en"
    )


def test_each_language_goes_as_one_request_and_results_keep_the_batch_order():
    sent: list[TranslationRequest] = []

    async def translate(request: TranslationRequest) -> Translated:
        sent.append(request)
        model = MODELS[request.source_language]
        return Translated(model, [_result(t) for t in request.texts], request.source_language, "en")

    texts = ("guten Morgen", "merci", "danke", "bonjour")
    detected = [Detection("de", 90.0), Detection("fr", 80.0), Detection("de", 70.0), Detection("fr", 60.0)]
    done = asyncio.run(mixed.translate(translate, _request(texts), detected, 60.0))
    assert [(r.source_language, r.texts) for r in sent] == [
        ("de", ("guten Morgen", "danke")),
        ("fr", ("merci", "bonjour")),
    ]
    assert [r.hypotheses[0].text for r in done.results] == ["GUTEN MORGEN", "MERCI", "DANKE", "BONJOUR"]
    assert done.detected == tuple(detected)
    assert (done.model, done.source_language, done.target_language) == ("de-en,fr-en", "", "en")
    assert all(r.deadline is not None for r in sent)  # the server's time limit, once for all groups


def test_one_language_is_one_request_naming_it():
    async def translate(request: TranslationRequest) -> Translated:
        return Translated("de-en", [_result(t) for t in request.texts], "de", "en")

    detected = [Detection("de", 90.0), Detection("de", 95.0)]
    done = asyncio.run(mixed.translate(translate, _request(("a", "b")), detected, 0.0))
    assert (done.model, done.source_language, done.detected) == ("de-en", "de", tuple(detected))


def test_a_failing_language_fails_the_batch_and_stops_the_others():
    stopped = []

    async def translate(request: TranslationRequest) -> Translated:
        if request.source_language == "fr":
            raise InvalidRequest("text 0 is empty")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.append(request.source_language)
            raise
        raise AssertionError("not cancelled")

    detected = [Detection("de", 90.0), Detection("fr", 80.0)]
    with pytest.raises(InvalidRequest, match="empty"):
        asyncio.run(mixed.translate(translate, _request(("a", "b")), detected, 0.0))
    assert stopped == ["de"]


def test_an_error_naming_a_text_names_it_by_its_place_in_the_batch():
    """Each language's texts go as their own request, numbered from 0 there: a refusal of the
    German text, the batch's third, said "text 0", the French one the client sent first."""

    async def translate(request: TranslationRequest) -> Translated:
        if request.source_language == "de":
            raise quality.LowQuality(1, 0, request.texts[1], 0.1, 0.5)
        return Translated("fr-en", [_result(t) for t in request.texts], "fr", "en")

    detected = [Detection("fr", 90.0), Detection("de", 80.0), Detection("de", 70.0)]
    texts = ("merci", "guten Morgen", "schlecht übersetzt")
    with pytest.raises(quality.LowQuality) as err:
        asyncio.run(mixed.translate(translate, _request(texts), detected, 0.0))
    assert str(err.value).startswith("text 2, sentence 0 ('schlecht übersetzt')") and err.value.text == 2

    async def too_long(request: TranslationRequest) -> Translated:
        if request.source_language == "de":
            raise InvalidRequest("text 0 is 900 tokens long after tokenization; this model takes at most 512")
        return Translated("fr-en", [_result(t) for t in request.texts], "fr", "en")

    with pytest.raises(InvalidRequest, match=r"^text 1 is 900 tokens"):
        asyncio.run(mixed.translate(too_long, _request(texts), detected, 0.0))
