"""The engine's tokens are the PyTorch reference decoder's, while rows join and leave the batch.

Texts of different lengths are submitted together and staggered into a batch that holds
only a few rows, so newcomers join at step boundaries next to rows many steps ahead
(left-padded caches), finished rows leave at once, and beam requests reorder their rows
every step. Every text must still decode to exactly what ``greedy_decode`` /
``beam_search`` give for it alone.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

import pytest
import torch

from attnserve.models import beam_search, greedy_decode
from attnserve.server.service.limits import prepare
from attnserve.server.translation import DecodeOptions, EngineSettings

from .conftest import MAX_TARGET_LEN, random_texts, record_encoder_batches, run, translate_once


@dataclass
class Event:
    kind: str  # "join" | "leave" | "compact"
    live_before: int  # rows decoding at that moment
    rows: int  # rows joining, leaving, or kept by the compaction
    past_len: int  # cache length at that moment


def record_events(engine) -> list[Event]:
    """Spy on the cache: rows joining, leaving and compactions, next to how many rows were decoding."""
    scheduler, events = engine._scheduler, []
    cache = scheduler.cache
    assign, free, compact = cache.assign, cache.free, cache.compact

    def spy_assign(slots, new):
        events.append(Event("join", scheduler.slots.live_rows, len(slots), cache.P))
        assign(slots, new)

    def spy_free(slots):
        events.append(Event("leave", scheduler.slots.live_rows, len(slots), cache.P))
        free(slots)

    def spy_compact(keep, extra=0):
        events.append(Event("compact", scheduler.slots.live_rows, len(keep), cache.P))
        compact(keep, extra)

    cache.assign, cache.free, cache.compact = spy_assign, spy_free, spy_compact
    return events


def assert_batch_was_continuous(events: list[Event]) -> None:
    assert any(e.kind == "join" and e.live_before and e.past_len for e in events), "no row joined a running batch"
    assert any(e.kind == "leave" and e.live_before > e.rows for e in events), "no row left while others went on"
    assert any(e.kind == "compact" and e.rows for e in events), "no compaction while rows were decoding"


def reference(tiny, text: str, options: DecodeOptions):
    src = torch.tensor([tiny.tokenizer.encode(text).ids])
    max_new = options.max_new_tokens or MAX_TARGET_LEN
    if options.beam_size == 1:
        return [greedy_decode(tiny.model, src, max_new)[0]]
    return beam_search(tiny.model, src, options.beam_size, max_new, options.length_penalty, options.num_hypotheses)[0]


def assert_matches_reference(tiny, text, options, result):
    expected = reference(tiny, text, options)
    assert [h.token_ids for h in result.hypotheses] == [h.tokens for h in expected], text
    for got, want in zip(result.hypotheses, expected):
        assert got.finish_reason == want.finish
        assert got.logprob == pytest.approx(want.logprob, abs=1e-4)
        assert got.score == pytest.approx(want.score, abs=1e-4)
        assert got.text == tiny.tokenizer.decode(want.tokens, skip_special_tokens=True)


async def submit_staggered(engine, texts, options_for):
    """Half the texts at once, the rest one every 2 ms; one translate() call per text."""

    async def one(i):
        if i >= len(texts) // 2:
            await asyncio.sleep(0.002 * (i - len(texts) // 2))
        return (await engine.translate(prepare(engine, [texts[i]], options_for(i))))[0]

    await engine.start()
    try:
        return await asyncio.gather(*(one(i) for i in range(len(texts))))
    finally:
        await engine.stop(1.0)


def test_greedy_equals_reference_while_rows_join_and_leave(tiny):
    texts = random_texts(16, seed=1)
    rng = random.Random(1)
    options = [DecodeOptions(max_new_tokens=rng.randrange(2, MAX_TARGET_LEN + 1)) for _ in texts]
    engine = tiny.engine(EngineSettings(max_active_sequences=5))
    events = record_events(engine)
    encoder_batches = record_encoder_batches(engine)
    results = run(submit_staggered(engine, texts, options.__getitem__))
    for text, opts, result in zip(texts, options, results):
        assert_matches_reference(tiny, text, opts, result)
    assert_batch_was_continuous(events)
    assert sum(encoder_batches) == len(texts) and len(encoder_batches) < len(texts), "queued texts encoded early"
    assert engine.active_sequences == 0 and engine.kv_cache_bytes == 0


@pytest.mark.parametrize("beam_size, length_penalty", [(2, 1.0), (4, 0.6)])
def test_beam_search_equals_reference_mixed_with_greedy(tiny, beam_size, length_penalty):
    texts = random_texts(14, seed=beam_size)
    rng = random.Random(beam_size)
    beam = DecodeOptions(beam_size=beam_size, num_hypotheses=2, length_penalty=length_penalty)
    options = [
        DecodeOptions(max_new_tokens=rng.randrange(2, MAX_TARGET_LEN + 1)) if i % 4 == 3 else beam
        for i in range(len(texts))
    ]
    engine = tiny.engine(EngineSettings(max_active_sequences=3 * beam_size))
    events = record_events(engine)
    results = run(submit_staggered(engine, texts, options.__getitem__))
    for text, opts, result in zip(texts, options, results):
        assert_matches_reference(tiny, text, opts, result)
        assert len(result.hypotheses) == opts.num_hypotheses
    assert_batch_was_continuous(events)
    assert engine.active_sequences == 0 and engine.kv_cache_bytes == 0 and engine.tokens_in_flight == 0


def test_many_texts_in_one_request_come_back_in_order(tiny):
    texts = random_texts(9, seed=7)
    options = DecodeOptions(beam_size=2, num_hypotheses=1, max_new_tokens=12)
    results = translate_once(tiny.engine(), texts, options)
    assert len(results) == len(texts)
    for text, result in zip(texts, results):
        assert_matches_reference(tiny, text, options, result)
        assert result.source_tokens == len(tiny.tokenizer.encode(text).ids)
        assert result.decode_ms > 0 and result.first_token_ms > 0 and result.queue_ms >= 0
