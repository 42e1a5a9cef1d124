"""n distinct alternatives of every text, asked of the translation service itself
(``TranslationRequest.distinct_alternatives``, ``server/service/alternatives.py``), as any door
asks: the bundled English -> German translator's beams hold one text twice ("Freitag" under two
subword splits), so a beam of n + 1 can hold fewer than n alternatives and that text is decoded
again with a wider beam; a text that had n is not, the request's characters count once, and the
call's items are the request's texts. Through LibreTranslate's ``alternatives``:
tests/server/http/test_libretranslate.py."""

from __future__ import annotations

import dataclasses

import pytest

from attnserve.export.zoo import REPO
from attnserve.server.service.requests import Translated, TranslationRequest
from attnserve.server.shared.calls import Call
from attnserve.server.shared.errors import InvalidRequest
from attnserve.server.translation import DecodeOptions

CLIENT, MODEL = "ip:10.0.0.9", "translator-en-de"


@pytest.fixture(scope="module")
def server(serve):
    with serve(REPO, max_beam_size=4, language_detection="off") as handle:
        yield handle


def _request(texts: list[str], **fields) -> TranslationRequest:
    call = Call("test", "", "alternatives", client=CLIENT)
    return TranslationRequest(call, tuple(texts), source_language="en", target_language="de", **fields)


def _translate(server, texts: list[str], alternatives: int) -> tuple[Translated, Call, int, int]:
    """(the reply, its call, the characters the model was asked to decode, the characters billed)."""
    service, request = server.app.translation, _request(texts, distinct_alternatives=alternatives)
    call = request.caller
    before = server.metric("attnserve_request_characters_sum", model=MODEL)
    billed = service.usage.used(CLIENT)
    done = server.loop_thread.run(service.translate(request))
    after = server.metric("attnserve_request_characters_sum", model=MODEL)
    return done, call, int(after - before), service.usage.used(CLIENT) - billed


def _texts(done: Translated) -> list[list[str]]:
    return [[h.text for h in r.hypotheses] for r in done.results]


def test_a_text_short_of_n_distinct_alternatives_is_decoded_again_wider(server):
    texts = ["Friday", "at 3:45 PM", "", "Monday"]
    done, call, decoded, billed = _translate(server, texts, 1)
    translations = _texts(done)
    assert [t[0] for t in translations] == ["Freitag", "um 15:45 Uhr", "", "Montag"]  # the beam of 2's best
    assert [len(t) for t in translations] == [2, 2, 1, 2]  # each decoded text: its translation, one alternative
    assert translations[1] == ["um 15:45 Uhr", "um 13:45 Uhr"]
    assert all(len(set(t)) == len(t) for t in translations)
    # a plain beam of 2 reads "Freitag" and "Montag" twice: those two went to the model again, wider
    beam = DecodeOptions(beam_size=2, num_hypotheses=2)
    plain = server.loop_thread.run(server.app.translation.translate(_request(texts, options=beam)))
    assert [len(r.hypotheses) for r in plain.results] == [1, 2, 1, 1]
    assert decoded == sum(map(len, texts)) + len("Friday") + len("Monday")
    assert billed == sum(map(len, texts))  # the request's characters, once
    assert call.items == len(texts)


def test_texts_with_n_alternatives_cost_nothing_more(server):
    done, call, decoded, billed = _translate(server, ["at 3:45 PM"], 1)
    assert _texts(done) == [["um 15:45 Uhr", "um 13:45 Uhr"]]
    assert decoded == billed == len("at 3:45 PM") and call.items == 1


def test_the_widest_beam_bounds_the_alternatives(server):
    """At --max-beam-size (4) "Friday"'s beam holds three texts: two alternatives, never one twice."""
    done, _, _, _ = _translate(server, ["Friday"], 3)
    (translation,) = _texts(done)
    assert translation[0] == "Freitag" and len(translation) == 3 and len(set(translation)) == 3


def test_a_stream_and_a_negative_count_are_refused(server):
    service, request = server.app.translation, _request(["Friday"])

    async def stream(request):
        return [event async for event in service.stream(request)]

    with pytest.raises(InvalidRequest, match="distinct alternatives come with whole translations"):
        server.loop_thread.run(stream(dataclasses.replace(request, distinct_alternatives=1)))
    with pytest.raises(InvalidRequest, match="distinct_alternatives must be 0 or more, got -1"):
        server.loop_thread.run(service.translate(dataclasses.replace(request, distinct_alternatives=-1)))
