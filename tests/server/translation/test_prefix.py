"""A per-job forced prefix (``DecodeOptions.prefix_ids`` / ``hide_prefix``): M2M100's target
language token or a user's target prefix. Every hypothesis starts with it, whatever the
search; the rest is what the model continues with after it; texts without one in the same
batch are untouched."""

from __future__ import annotations

import asyncio

import pytest
import torch

from attnserve.models import greedy_decode
from attnserve.server import engine_api
from attnserve.server.errors import InvalidRequest
from attnserve.server.translation import DecodeOptions, EngineSettings

from .conftest import MAX_TARGET_LEN, TINY, random_texts, run

PREFIX = (17, 5, 33)


@torch.no_grad()
def greedy_after_prefix(tiny, text: str, prefix: tuple[int, ...], max_new: int) -> tuple[list[int], float]:
    """The PyTorch model's tokens and logprob when ``prefix`` is forced, then greedy (teacher forcing)."""
    src = torch.tensor([tiny.tokenizer.encode(text).ids])  # (1, L)
    tokens: list[int] = []
    logprob = 0.0
    while len(tokens) < max_new and not (tokens and tokens[-1] == TINY.eos_id):
        tgt = torch.tensor([[TINY.bos_id, *tokens]])  # (1, T)
        logp = tiny.model(src, tgt)[0, -1].float().log_softmax(dim=-1)  # (V,)
        logp[[TINY.pad_id, TINY.bos_id]] = float("-inf")
        tok = prefix[len(tokens)] if len(tokens) < len(prefix) else int(logp.argmax())
        tokens.append(tok)
        logprob += float(logp[tok])
    return tokens, logprob


def translate(tiny, texts, options, settings=None):
    engine = tiny.engine(settings)

    async def go():
        await engine.start()
        try:
            return await engine_api.translate(engine, texts, options)
        finally:
            await engine.stop(1.0)

    return run(go())


def stream(tiny, text, options):
    engine = tiny.engine()

    async def go():
        await engine.start()
        try:
            return [event async for event in engine_api.stream(engine, text, options)]
        finally:
            await engine.stop(1.0)

    return run(go())


def test_greedy_forces_the_prefix_then_continues_like_the_model(tiny):
    texts = random_texts(4, seed=3)
    results = translate(tiny, texts, DecodeOptions(prefix_ids=PREFIX, max_new_tokens=20))
    for text, result in zip(texts, results):
        tokens, logprob = greedy_after_prefix(tiny, text, PREFIX, 20)
        (h,) = result.hypotheses
        assert tuple(h.token_ids[: len(PREFIX)]) == PREFIX
        assert h.token_ids == tokens
        # the forced tokens' log-probabilities count, as CTranslate2 counts a target prefix's
        assert h.logprob == pytest.approx(logprob, abs=1e-3)
        assert h.text == tiny.tokenizer.decode(tokens, skip_special_tokens=True)


def test_every_beam_hypothesis_starts_with_the_prefix(tiny):
    texts = random_texts(3, seed=5)
    options = DecodeOptions(beam_size=4, num_hypotheses=3, prefix_ids=PREFIX, max_new_tokens=12)
    for result in translate(tiny, texts, options):
        assert len(result.hypotheses) == 3
        assert len({tuple(h.token_ids) for h in result.hypotheses}) == 3  # beams expanded after the prefix
        for h in result.hypotheses:
            assert tuple(h.token_ids[: len(PREFIX)]) == PREFIX
            assert h.logprob < 0.0 and len(h.token_ids) <= 12


def test_sampling_starts_with_the_prefix_and_stays_reproducible(tiny):
    texts = random_texts(3, seed=7)
    options = DecodeOptions(temperature=1.5, seed=11, prefix_ids=PREFIX, max_new_tokens=15)
    first = translate(tiny, texts, options)
    for result in first:
        assert tuple(result.hypotheses[0].token_ids[: len(PREFIX)]) == PREFIX
    assert [r.hypotheses[0].token_ids for r in translate(tiny, texts, options)] == [
        r.hypotheses[0].token_ids for r in first
    ]


def test_texts_without_a_prefix_decode_as_before_next_to_prefixed_ones(tiny):
    texts = random_texts(6, seed=9)
    engine = tiny.engine(EngineSettings(max_active_sequences=4))

    async def go():
        await engine.start()
        try:
            plain = engine_api.translate(engine, texts[:3], DecodeOptions(prefix_ids=()))
            forced = engine_api.translate(engine, texts[3:], DecodeOptions(prefix_ids=PREFIX))
            return await asyncio.gather(plain, forced)
        finally:
            await engine.stop(1.0)

    plain, forced = run(go())
    for text, result in zip(texts[:3], plain):
        ref = greedy_decode(tiny.model, torch.tensor([tiny.tokenizer.encode(text).ids]), MAX_TARGET_LEN)[0]
        assert result.hypotheses[0].token_ids == ref.tokens
    for result in forced:
        assert tuple(result.hypotheses[0].token_ids[:3]) == PREFIX


@pytest.mark.parametrize(
    "options",
    [
        DecodeOptions(prefix_ids=PREFIX, hide_prefix=1),
        DecodeOptions(prefix_ids=PREFIX, hide_prefix=1, beam_size=3),
        DecodeOptions(prefix_ids=PREFIX, hide_prefix=1, temperature=1.2, seed=3),
    ],
    ids=["greedy", "beam", "sampling"],
)
def test_hidden_prefix_tokens_are_not_returned(tiny, options):
    (text,) = random_texts(1, seed=13)
    options = DecodeOptions(**{**options.__dict__, "max_new_tokens": 10})
    (result,) = translate(tiny, [text], options)
    for h in result.hypotheses:
        assert tuple(h.token_ids[:2]) == PREFIX[1:]
        assert h.text == tiny.tokenizer.decode(h.token_ids, skip_special_tokens=True)
        assert not h.text.startswith("t17")


def test_a_stream_hides_the_hidden_prefix_and_adds_up_to_the_translation(tiny):
    (text,) = random_texts(1, seed=21)
    options = DecodeOptions(prefix_ids=PREFIX, hide_prefix=2, max_new_tokens=12)
    events = stream(tiny, text, options)
    (result,) = translate(tiny, [text], options)
    assert [e.token_id for e in events] == result.hypotheses[0].token_ids
    assert events[0].token_id == PREFIX[2]
    assert "".join(e.delta for e in events) == result.hypotheses[0].text


@pytest.mark.parametrize(
    "options, message",
    [
        (DecodeOptions(prefix_ids=(5, TINY.eos_id)), "prefix token 1 is the model's end token"),
        (DecodeOptions(prefix_ids=(TINY.vocab_size,)), "prefix token 0 is 64; this model's token ids are 0..63"),
        (DecodeOptions(prefix_ids=(5, 6), hide_prefix=3), "hide_prefix must be in 0..2"),
        (DecodeOptions(prefix_ids=(5, 6, 7), max_new_tokens=2), "prefix is 3 tokens, more than max_new_tokens"),
    ],
)
def test_a_bad_prefix_is_refused_with_a_message(tiny, options, message):
    engine = tiny.engine()
    with pytest.raises(InvalidRequest, match=message):
        engine.validate(["t5 t6"], options)


def test_max_new_tokens_ending_inside_a_hidden_prefix_returns_an_empty_text(tiny):
    options = DecodeOptions(prefix_ids=PREFIX, hide_prefix=3, max_new_tokens=3)
    (result,) = translate(tiny, ["t5 t6"], options)
    h = result.hypotheses[0]
    assert (h.token_ids, h.text, h.finish_reason) == ([], "", "length")
    events = stream(tiny, "t5 t6", options)
    assert [(e.delta, e.finish_reason) for e in events] == [("", "length")]
