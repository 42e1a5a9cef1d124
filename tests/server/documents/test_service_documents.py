"""The translation service's documents against a recording stand-in engine (the bundled
translator's tokenizer and 64-token limit): what the engine is asked to translate, and the
sentence rules of the model's or the request's source language."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from attnserve.server.service import document_stream, documents, sentence_flow
from attnserve.server.service.requests import TranslationRequest, ValidTranslation
from attnserve.server.service.translation import TranslationService
from attnserve.server.shared.calls import Call
from attnserve.server.shared.config import Settings
from attnserve.server.shared.errors import InferenceFailed, InvalidRequest, LimitExceeded, Overloaded
from attnserve.server.shared.metrics import Metrics
from attnserve.server.translation import DecodeOptions, EngineSettings, Hypothesis, StreamEvent, TranslationResult

POOL = ThreadPoolExecutor(1, thread_name_prefix="test-documents")


class RecordingEngine:
    """Translates a sentence to itself in capitals; records every engine call."""

    max_source_len = 64

    def __init__(self, tokenizer, sources=None, **settings) -> None:
        self.tokenizer = tokenizer
        self.settings = EngineSettings(**settings)
        self.step_attention = False  # as an engine whose decoder does not return its steps' attention
        self.manifest = SimpleNamespace(languages=SimpleNamespace(source=sources) if sources else None)
        self.calls: list[list[str]] = []
        self.options: list[DecodeOptions] = []
        self.open_streams = 0
        self.reused = 0  # sentences whose ids came from the splitter, not tokenised again

    def prepare(self, texts, options, tokenised=None, max_new_tokens=None):
        if tokenised is not None:  # the splitter's ids: the sentences' own, as the engine would make them
            assert [list(ids) for ids in tokenised] == [self.tokenizer.encode(t).ids for t in texts], texts
            self.reused += len(texts)
        return list(texts), options  # the real engine's Prepared holds token ids instead

    async def translate(self, prepared, deadline=None):
        texts, options = prepared
        self.calls.append(list(texts))
        self.options.append(options)
        hypotheses = [[Hypothesis(t.upper(), [1], -1.0, -0.5, "eos")] for t in texts]
        return [TranslationResult(h, 2, 1.0, 1.0, 1.0, 1.0) for h in hypotheses]

    async def stream(self, prepared, deadline=None):
        (text,), options = prepared
        self.calls.append([text])
        self.open_streams += 1
        try:
            if text.startswith("Busy"):
                raise Overloaded("translation queue is full")
            for i, word in enumerate(text.split()):
                await asyncio.sleep(0.2 if text.startswith("Slow") else 0)
                yield StreamEvent((" " if i else "") + word.upper(), (i,), None)
            if not text.startswith("Unfinished"):
                yield StreamEvent("", (99,), "eos")
        finally:
            self.open_streams -= 1


GREEDY = DecodeOptions()


def valid(engine, texts, options=GREEDY, format="text", language="", per_call=64):
    """What the service hands the documents: a request checked for ``engine``'s model
    (``per_call``: the server's --max-texts-per-request)."""
    request = TranslationRequest(Call("test", "recorder", "r1"), tuple(texts), "recorder", format=format)
    model = SimpleNamespace(name="recorder", engine=engine)
    return ValidTranslation(request, model, options, 16, language, "", sentences_per_call=per_call)


def translate(engine, texts, options=GREEDY, format="text", language="", per_call=64):
    async def run():
        checked = valid(engine, texts, options, format, language, per_call)
        return await documents.translate(checked, await documents.split_documents(checked, POOL))

    return asyncio.run(run())


def stream(engine, text, options=None):
    async def collect():
        checked = valid(engine, [text], options or GREEDY)
        (prepared,) = await documents.split_documents(checked, POOL)
        return [e async for e in document_stream.stream(checked, prepared)]

    return asyncio.run(collect())


GERMAN = "Am 3. März ging er. Dann kam sie."


def test_the_models_source_language_picks_the_sentence_rules(tokenizer):
    english, german = RecordingEngine(tokenizer), RecordingEngine(tokenizer, sources=["de"])
    translate(english, [GERMAN])
    translate(german, [GERMAN])
    assert english.calls == [["Am 3.", "März ging er.", "Dann kam sie."]]  # English rules end a sentence at "3."
    assert german.calls == [["Am 3. März ging er.", "Dann kam sie."]]


def test_a_requests_source_language_picks_the_sentence_rules(tokenizer):
    engine = RecordingEngine(tokenizer, sources=["en", "de"])  # several: the request says which
    (result,) = translate(engine, [GERMAN], language="de-AT")
    assert engine.calls == [["Am 3. März ging er.", "Dann kam sie."]]
    assert result.hypotheses[0].text == GERMAN.upper()


def test_all_sentences_of_all_texts_go_to_the_engine_together_in_order(tokenizer):
    engine = RecordingEngine(tokenizer)
    results = translate(engine, ["It is 9. It is 10.\n\nAt noon", "***", "  Today  "])
    assert engine.calls == [["It is 9.", "It is 10.", "At noon", "Today"]]  # one call; "***": nothing to translate
    assert engine.reused == 4  # each sentence tokenised once: the splitter's ids go to the engine
    assert [r.hypotheses[0].text for r in results] == ["IT IS 9. IT IS 10.\n\nAT NOON", "***", "  TODAY  "]
    assert results[0].hypotheses[0].score == pytest.approx(-1.5) and results[1].source_tokens == 0


def test_a_long_document_is_sent_in_calls_of_the_per_call_limit(tokenizer):
    engine = RecordingEngine(tokenizer, max_queue_size=32)
    lines = [f"Line {i}." for i in range(50)]
    (result,) = translate(engine, ["\n".join(lines)], per_call=8)
    assert [len(c) for c in engine.calls] == [8] * 6 + [2]  # at most 2 calls (16 sentences) queued at once
    assert result.hypotheses[0].text == "\n".join(line.upper() for line in lines)
    small_queue = RecordingEngine(tokenizer, max_queue_size=8)
    translate(small_queue, ["\n".join(lines[:10])])
    assert [len(c) for c in small_queue.calls] == [4, 4, 2]  # a call never needs more than half the queue


def test_progress_moves_in_steps_and_counts_a_repeated_sentence_for_each_of_its_places(tokenizer):
    engine = RecordingEngine(tokenizer)
    lines = [f"Line {i}." for i in range(28)] + ["Line 0.", "Line 1.", "Line 2.", "Line 3."]
    told: list[int] = []

    async def run():
        checked = valid(engine, ["\n".join(lines)])
        prepared = await documents.split_documents(checked, POOL)
        return await documents.translate_sentences(checked, prepared, POOL, told.append)

    results = asyncio.run(run())
    assert len(results) == 32 and sum(len(c) for c in engine.calls) == 28  # the repeats decoded once
    assert sum(told) == 32  # ... and counted for each place they stand
    assert len(told) == len(engine.calls) > 2 and all(n > 0 for n in told)  # a step per engine call, not one jump


@pytest.mark.parametrize(
    ("texts", "fragment", "limit"),
    [
        ([], "no texts", None),
        (["x" * 50_001], "at most 50,000 per text", "max_text_chars"),
        (["x" * 40_000] * 6, "at most 200,000 per request", "max_request_chars"),
        (["x"] * 65, "65 texts in one request; the limit is 64", "max_texts_per_request"),
    ],
)
def test_the_service_refuses_texts_over_the_limits_before_reading_them(texts, fragment, limit):
    service = TranslationService(SimpleNamespace(models={}), Settings(language_detection="off"), Metrics(), POOL)
    with pytest.raises(InvalidRequest, match=fragment) as err:
        service.check_texts(texts)
    assert (err.value.limit if isinstance(err.value, LimitExceeded) else None) == limit


def test_the_splitter_cache_is_bounded(tokenizer):
    engine = RecordingEngine(tokenizer)
    for i in range(documents.MAX_LANGUAGES + 10):
        (result,) = translate(engine, ["It is 9. It is 10."], language=f"x{i}")
        assert result.hypotheses[0].text == "IT IS 9. IT IS 10."
    assert len(documents._documents(engine).splitters) <= documents.MAX_LANGUAGES


def test_a_target_prefix_starts_the_document_and_a_language_token_every_sentence(tokenizer):
    engine = RecordingEngine(tokenizer)
    options = DecodeOptions(prefix_ids=(5, 7, 9), hide_prefix=1)  # language token 5, then the user's 7 9
    results = translate(engine, ["It is 9. It is 10. At noon.", "Today."], options, per_call=2)
    seen = {text: o.prefix_ids for call, o in zip(engine.calls, engine.options) for text in call}
    assert seen == {"It is 9.": (5, 7, 9), "Today.": (5, 7, 9), "It is 10.": (5,), "At noon.": (5,)}
    assert [r.hypotheses[0].text for r in results] == ["IT IS 9. IT IS 10. AT NOON.", "TODAY."]
    assert (
        documents.sentence_options(DecodeOptions(prefix_ids=(5,), hide_prefix=1))
        == (DecodeOptions(prefix_ids=(5,), hide_prefix=1),) * 2
    )  # only a language token: the same options for every sentence


def test_a_stream_is_the_document_in_order(tokenizer):
    engine = RecordingEngine(tokenizer)
    events = stream(engine, "  Slow it is. Now it is.\n\nAt noon ")
    assert engine.reused == 3  # the splitter's ids, not tokenised again
    assert "".join(e.delta for e in events) == "  SLOW IT IS. NOW IT IS.\n\nAT NOON "
    assert [t for e in events for t in e.token_ids] == [0, 1, 2, 99, 0, 1, 2, 99, 0, 1, 99]  # sentence after sentence


@pytest.mark.parametrize(
    ("text", "error", "fragment"),
    [
        ("Slow it is. Busy now. At noon.", Overloaded, "queue is full"),
        ("It is. Unfinished it is.", InferenceFailed, "ended without a finish reason"),
    ],
)
def test_a_failing_sentence_fails_the_stream_and_closes_the_others(tokenizer, text, error, fragment):
    engine = RecordingEngine(tokenizer)
    with pytest.raises(error, match=fragment):
        stream(engine, text)
    assert engine.open_streams == 0  # the other sentences' engine streams were closed, not left decoding


def test_a_sentence_repeated_in_a_document_is_decoded_once(tokenizer):
    """Issue 32: ``"<b>a " * 9000`` (45 KB of html) was 9,000 one-word sentences in the decode
    batch; the same sentence with the same options gets the same greedy or beam translation."""
    engine = RecordingEngine(tokenizer)
    (result,) = translate(engine, ["<b>a " * 9000], format="html")
    assert engine.calls == [["a"]]
    assert result.hypotheses[0].text == "<b>A " * 9000
    sampled = RecordingEngine(tokenizer)
    translate(sampled, ["<b>a <b>a <b>a"], DecodeOptions(temperature=1.0), format="html")
    assert sampled.calls == [["a", "a", "a"]]  # sampling: each occurrence its own draw


def test_an_incomplete_tag_at_the_end_comes_back_as_sent(tokenizer):
    """Issue 32: ``"Monday, March 3, 2025<p"`` came back as ``"<Montag, 3. März 2025"``. An HTML 5
    tokenizer drops a tag cut off by the end of the input (eof-in-tag): markup, not text."""
    engine = RecordingEngine(tokenizer)
    texts = ["Monday, March 3, 2025<p", 'Hi <b>there</b> <a href="x', "Hi </p", "x < y"]
    results = translate(engine, texts, format="html")
    assert [r.hypotheses[0].text for r in results] == [
        "MONDAY, MARCH 3, 2025<p",
        'HI <b>THERE</b> <a href="x',
        "HI </p",
        "X < Y",
    ]
    assert ["Monday, March 3, 2025"] == engine.calls[0][:1]


def test_a_sentence_repeated_in_a_streamed_document_is_decoded_once(tokenizer):
    engine = RecordingEngine(tokenizer)
    events = stream(engine, "It is. Now. It is.\nIt is.")
    assert sorted(engine.calls) == [["It is."], ["Now."]]
    assert "".join(e.delta for e in events) == "IT IS. NOW. IT IS.\nIT IS."
    assert events[-1].finish_reason == "eos" and engine.open_streams == 0


def test_sentences_added_in_pieces_decode_as_they_come_and_give_the_whole_requests_results(tokenizer):
    """A file's pieces (``sentence_flow``): the first piece decodes before the next is added, its
    progress has no total (0) until the last piece is in; a repeat in a later piece is not decoded
    again, a known sentence (a resumed job's) not at all, and one kept for alignment in a later
    piece is decoded again with what alignment reads; the results are the whole request's."""
    lines = ["It is 9.", "It is 10.", "At noon.", "Today."]
    texts = [lines[0], lines[1] + " " + lines[2], lines[0] + " " + lines[3], lines[1]]
    whole_engine, engine = RecordingEngine(tokenizer), RecordingEngine(tokenizer)
    told: list[tuple[int, int]] = []

    async def run():
        checked = valid(whole_engine, texts)
        whole = await documents.translate_sentences(checked, await documents.split_documents(checked, POOL))
        checked = valid(engine, texts)
        done = 0

        def progress(n: int) -> None:
            nonlocal done
            done += n
            told.append((done, flow.total))

        flow = sentence_flow.SentenceFlow(checked, progress, known={"At noon.": "Mittags."})
        first, second = documents.split(engine, texts[:2], "text"), documents.split(engine, texts[2:], "text")
        flow.add(documents.piece_work(checked, first), keep=())
        for _ in range(3):
            await asyncio.sleep(0)
        decoded_first = [list(c) for c in engine.calls]
        flow.add(documents.piece_work(checked, second), keep=[5], last=True)  # "It is 10." again, kept
        return whole, await flow.results(), decoded_first

    whole, pieces, decoded_first = asyncio.run(run())
    assert decoded_first == [["It is 9."], ["It is 10."]]  # before the second piece came
    assert sorted(s for call in engine.calls for s in call) == ["It is 10.", "It is 10.", "It is 9.", "Today."]
    assert [o.return_memory for o in engine.options] == [False, False, False, True]  # the kept one: for alignment
    texts_of = [r.hypotheses[0].text for r in pieces]
    assert texts_of == ["IT IS 9.", "IT IS 10.", "Mittags.", "IT IS 9.", "TODAY.", "IT IS 10."]
    assert [r.hypotheses[0].text for r in whole] == [t if t != "Mittags." else "AT NOON." for t in texts_of]
    assert told == [(1, 0), (2, 0), (3, 0), (4, 6), (5, 6), (6, 6)]  # the known one first, then as decoded


class FailingEngine(RecordingEngine):
    """Refuses a call with a sentence starting "Busy"; takes 50 ms over each other call."""

    async def translate(self, prepared, deadline=None):
        texts, _ = prepared
        if any(t.startswith("Busy") for t in texts):
            raise Overloaded("translation queue is full")
        await asyncio.sleep(0.05)
        return await super().translate(prepared, deadline)


def test_a_failing_engine_call_fails_a_file_split_in_pieces_and_cancels_the_others(tokenizer):
    engine = FailingEngine(tokenizer)

    async def run():
        checked = valid(engine, [], per_call=1)
        flow = sentence_flow.SentenceFlow(checked, lambda n: None)
        flow.add(documents.piece_work(checked, documents.split(engine, ["It is 9. At noon."], "text")))
        await asyncio.sleep(0)
        flow.add(documents.piece_work(checked, documents.split(engine, ["Busy now. Today."], "text")), last=True)
        return await flow.results()

    with pytest.raises(Overloaded, match="queue is full"):
        asyncio.run(run())
    assert engine.calls == []  # the calls in flight beside it were cancelled, not left decoding


def test_a_files_texts_go_in_pieces_of_whole_texts_each_twice_the_last_up_to_the_most():
    assert sentence_flow.pieces(["abcde"] * 10, 10, 20) == [range(0, 2), range(2, 6), range(6, 10)]
    assert sentence_flow.pieces(["x" * 100, "y"], 10, 20) == [range(0, 1), range(1, 2)]  # a long text alone
    assert sentence_flow.pieces([], 10, 20) == [range(0, 0)]  # one empty piece, the last
