"""A unary call is a drained stream: the same request's reply whole (sentences in batched engine
calls) and streamed (one engine stream per sentence, its events put in document order, then
joined) are the same translation, at the service and at the engine, for plain text, html and
several sentences; and a whole request's events (beams, batches, alignments, quality) end in
the reply ``translate`` returns."""

from __future__ import annotations

import dataclasses

import pytest

from attnserve.server.service.requests import Translated, TranslationRequest, drained
from attnserve.server.shared.calls import Call
from attnserve.server.translation import DecodeOptions

from ..kserve.conftest import kserve_repo, reverser_dir  # noqa: F401 - the reverser's repository

MODEL = "reverser"


@pytest.fixture(scope="module")
def server(serve, kserve_repo):  # noqa: F811
    with serve(kserve_repo, max_beam_size=4, stream_interval_ms=0) as handle:
        yield handle


def _request(texts, **fields) -> TranslationRequest:
    return TranslationRequest(Call("test", MODEL, "one-path"), tuple(texts), MODEL, **fields)


def _both(server, request: TranslationRequest) -> tuple[Translated, Translated, list]:
    """(the unary reply, the streamed path's events drained to their reply, the stream's events)."""
    service = server.app.translation

    async def run():
        unary = await service.translate(request)
        seen = []

        async def watched():
            async for event in service.events(request, tokens=True):
                seen.append(event)
                yield event

        return unary, await drained(watched()), [e for e in seen if not isinstance(e, Translated)]

    return server.loop_thread.run(run())


def _same(a: Translated, b: Translated) -> None:
    assert (a.model, a.source_language, a.target_language) == (b.model, b.source_language, b.target_language)
    for x, y in zip(a.results, b.results, strict=True):
        assert x.source_tokens == y.source_tokens
        for h, g in zip(x.hypotheses, y.hypotheses, strict=True):
            assert (h.text, h.token_ids, h.finish_reason) == (g.text, g.token_ids, g.finish_reason)
            assert h.logprob == pytest.approx(g.logprob, abs=1e-4) and h.score == pytest.approx(g.score, abs=1e-4)


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ("t5 t9 t17", {}),
        ("t5 t9. t17 t3.\n\n  t4 t8 ", {}),
        ("<p>t5 <b>t9</b> t17</p><p>t3</p>", {"format": "html"}),
        ("t5 t9 t17 t3", {"options": DecodeOptions(max_new_tokens=2)}),
    ],
)
def test_a_streamed_request_drained_is_its_unary_reply(server, text, fields):
    unary, streamed, events = _both(server, _request([text], **fields))
    _same(unary, streamed)
    assert "".join(e.delta for e in events) == unary.results[0].hypotheses[0].text
    assert [e.finish_reason for e in events][-1] == unary.results[0].hypotheses[0].finish_reason
    assert [t for e in events for t in e.token_ids] == unary.results[0].hypotheses[0].token_ids


def test_the_engines_stream_drained_is_its_translate(server):
    engine = server.app.registry.models[MODEL].engine

    async def run(options):
        prepared = engine.prepare(["t5 t9 t17", "t3 t4"], options)
        whole = await engine.translate(prepared)
        events = [e async for e in engine.stream(prepared, tokens=False)]
        one = engine.prepare(["t5 t9 t17"], options)
        streamed = [e async for e in engine.stream(one)]
        return whole, events, streamed

    for options in (DecodeOptions(), DecodeOptions(beam_size=3, num_hypotheses=2)):
        whole, events, streamed = server.loop_thread.run(run(options))
        assert [e.index for e in events] == [0, 1] and all(e.finish_reason for e in events)
        for result, event in zip(whole, events, strict=True):
            assert event.result is not None and event.delta == result.hypotheses[0].text
            assert [h.token_ids for h in event.result.hypotheses] == [h.token_ids for h in result.hypotheses]
        last = streamed[-1].result  # one text: its tokens streamed (a beam search's: only its last event)
        assert [h.token_ids for h in last.hypotheses] == [h.token_ids for h in whole[0].hypotheses]
        assert "".join(e.delta for e in streamed) == whole[0].hypotheses[0].text


def test_a_whole_requests_events_end_in_its_reply(server):
    """Beams, n-best, a batch, alignments and quality: what the reply carries the events end in."""
    service = server.app.translation
    options = DecodeOptions(beam_size=3, num_hypotheses=2)
    request = _request(["t5 t9. t17", "t3 t4 t8"], options=options, alignments=True, quality=True)

    async def run():
        events = [e async for e in service.events(request)]
        return events, await service.translate(dataclasses.replace(request, caller=Call("test", MODEL, "again")))

    events, unary = server.loop_thread.run(run())
    (reply,) = events  # nothing streams: the reply alone
    _same(unary, reply)
    assert len(reply.results[0].hypotheses) == 2 and reply.alignments is not None and reply.quality is not None
    assert [[a.target for a in text] for text in reply.alignments] == [
        [a.target for a in text] for text in unary.alignments
    ]
    assert [q.score for q in reply.quality] == pytest.approx([q.score for q in unary.quality], abs=1e-3)
