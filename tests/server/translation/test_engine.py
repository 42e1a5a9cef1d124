"""The engine's behaviour as a handler sees it: validation, limits, cancellation, failures,
shutdown, streaming and sampling."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from attnserve.contract.deadline import Deadline
from attnserve.models import greedy_decode
from attnserve.server.service.limits import prepare
from attnserve.server.shared.errors import DeadlineExceeded, InferenceFailed, InvalidRequest, Overloaded, ShuttingDown
from attnserve.server.translation import DecodeOptions, EngineSettings

from .conftest import (
    MAX_SOURCE_LEN,
    MAX_TARGET_LEN,
    SessionWrapper,
    random_texts,
    record_encoder_batches,
    run,
    translate_once,
)


def slow_engine(tiny, delay_s=0.004, settings=None, fail_at_rows=None):
    engine = tiny.engine(settings)
    wrapper = SessionWrapper(engine._scheduler.runner.decoder, delay_s, fail_at_rows)
    engine._scheduler.runner.decoder = wrapper
    return engine, wrapper


async def wait_until(condition, timeout=5.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not condition() and loop.time() < end:
        await asyncio.sleep(0.002)


async def wait_idle(engine):
    await wait_until(lambda: not (engine.active_sequences or engine.kv_cache_bytes or engine.tokens_in_flight))


def assert_idle(engine):
    assert (engine.active_sequences, engine.kv_cache_bytes, engine.tokens_in_flight, engine.queued) == (0, 0, 0, 0)


# --- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "texts, options, message",
    [
        (
            ["t5 " * 30],
            DecodeOptions(),
            f"text 0 is 31 tokens long after tokenization; this model takes at most {MAX_SOURCE_LEN}",
        ),
        (["t5"], DecodeOptions(beam_size=9), "beam_size must be in 1..8, got 9"),
        (["t5"], DecodeOptions(beam_size=2, num_hypotheses=3), "num_hypotheses must be in 1..beam_size (2), got 3"),
        (["t5"], DecodeOptions(max_new_tokens=MAX_TARGET_LEN + 1), f"max_new_tokens must be in 0..{MAX_TARGET_LEN}"),
        (["t5"], DecodeOptions(temperature=-0.5), "temperature must be >= 0"),
        (["t5"], DecodeOptions(temperature=1.0, top_p=0.0), "top_p must be in (0, 1]"),
        (["t5"], DecodeOptions(temperature=1.0, top_p=1.5), "top_p must be in (0, 1]"),
        (["t5"], DecodeOptions(temperature=1.0, top_k=-1), "top_k must be >= 0"),
        (["t5"], DecodeOptions(temperature=1.0, seed=-3), "seed must be >= 0, got -3"),
        (["t5"], DecodeOptions(temperature=1.0, seed=2**64), f"seed must be in 0..{2**64 - 1}, got {2**64}"),
        (["t5"], DecodeOptions(temperature=0.7, beam_size=2), "sampling (temperature 0.7) works with beam_size 1 only"),
    ],
)
def test_bad_requests_get_a_message_a_person_can_act_on(tiny, texts, options, message):
    """The service's checks of a request on this model (``service/limits.py``), then the engine's
    measure of its tokens; the texts' own limits are the service's (tests/server/documents)."""
    engine = tiny.engine()
    with pytest.raises(InvalidRequest) as info:
        prepare(engine, texts, options)
    assert message in str(info.value)


def test_a_text_larger_than_the_token_budget_is_refused_up_front(tiny):
    engine = tiny.engine(EngineSettings(max_tokens_in_flight=60))
    prepare(engine, ["t5 t6"], DecodeOptions(max_new_tokens=40))  # 3 + 40 fits
    with pytest.raises(InvalidRequest, match=r"needs 86 tokens in flight \(beam_size 2 x \(3 source \+ 40 new"):
        prepare(engine, ["t5 t6"], DecodeOptions(beam_size=2, max_new_tokens=40))


# --- admission and limits --------------------------------------------------------------------


def test_a_full_queue_answers_overloaded_and_takes_nothing(tiny):
    engine = tiny.engine(EngineSettings(max_queue_size=2))

    async def main():
        await engine.start()
        try:
            with pytest.raises(Overloaded, match=r"queue is full \(0 texts waiting, limit 2\)"):
                await engine.translate(prepare(engine, ["t5", "t6", "t7"], DecodeOptions()))
            assert_idle(engine)
            assert len(await engine.translate(prepare(engine, ["t5", "t6"], DecodeOptions(max_new_tokens=3)))) == 2
        finally:
            await engine.stop(1.0)

    run(main())


def test_token_and_row_budgets_bound_the_batch(tiny):
    """Two texts needing 43 tokens each under a budget of 60 never share the batch."""
    engine = tiny.engine(EngineSettings(max_tokens_in_flight=60))
    rows_seen = []
    engine.on_step = lambda rows, generated: rows_seen.append((rows, generated))

    results = translate_once(engine, ["t5 t9", "t7 t8"], DecodeOptions(max_new_tokens=40))
    assert len(results) == 2 and rows_seen and max(rows for rows, _ in rows_seen) == 1
    assert engine.steps_total == len(rows_seen)
    assert engine.tokens_generated_total == sum(len(r.hypotheses[0].token_ids) for r in results)


def test_a_kv_cache_byte_budget_bounds_the_batch_and_refuses_what_can_never_fit(tiny):
    """Tiny model: 2 layers x d_model 32 x key+value x 4 bytes = 512 bytes per token; two texts
    of 43 tokens (22,016 bytes each) under a 30,000-byte budget never share the batch."""
    engine = tiny.engine(EngineSettings(max_cache_bytes=30_000))
    rows_seen = []
    engine.on_step = lambda rows, generated: rows_seen.append(rows)

    results = translate_once(engine, ["t5 t9", "t7 t8"], DecodeOptions(max_new_tokens=40))
    assert len(results) == 2 and max(rows_seen) == 1
    with pytest.raises(InvalidRequest, match="needs 44,032 bytes of KV cache .86 tokens.; this server allows 30,000"):
        prepare(engine, ["t5 t9"], DecodeOptions(beam_size=2, max_new_tokens=40))


# --- cancellation, deadlines -----------------------------------------------------------------


def test_cancelled_and_timed_out_requests_leave_the_batch_and_free_their_cache(tiny, long_text):
    engine, _ = slow_engine(tiny)
    other_text = long_text + " t9"

    async def main():
        await engine.start()
        try:
            other = asyncio.create_task(
                engine.translate(prepare(engine, [other_text], DecodeOptions(max_new_tokens=30)))
            )
            victim = asyncio.create_task(engine.translate(prepare(engine, [long_text] * 3, DecodeOptions())))
            await wait_until(lambda: engine.active_sequences == 4)
            assert engine.active_sequences == 4 and engine.kv_cache_bytes > 0
            victim.cancel()
            with pytest.raises(asyncio.CancelledError):
                await victim
            with pytest.raises(TimeoutError):  # a deadline arrives as cancellation too
                await asyncio.wait_for(engine.translate(prepare(engine, [long_text], DecodeOptions())), 0.03)
            result = (await other)[0]
            await wait_idle(engine)
            return result
        finally:
            await engine.stop(1.0)

    result = run(main())
    src = torch.tensor([tiny.tokenizer.encode(other_text).ids])
    assert result.hypotheses[0].token_ids == greedy_decode(tiny.model, src, 30)[0].tokens
    assert_idle(engine)


def test_a_deadline_fails_only_the_late_texts_with_deadline_exceeded_and_frees_their_rows(tiny, long_text):
    engine, _ = slow_engine(tiny)
    other_text = random_texts(1, seed=5)[0]

    async def main():
        await engine.start()
        try:
            other = asyncio.create_task(
                engine.translate(prepare(engine, [other_text], DecodeOptions(max_new_tokens=30)))
            )
            with pytest.raises(DeadlineExceeded, match="deadline passed"):
                await engine.translate(
                    prepare(engine, [long_text] * 2, DecodeOptions()), deadline=Deadline.from_timeout(0.05)
                )
            result = (await other)[0]
            await wait_idle(engine)
            return result
        finally:
            await engine.stop(1.0)

    result = run(main())
    src = torch.tensor([tiny.tokenizer.encode(other_text).ids])
    assert result.hypotheses[0].token_ids == greedy_decode(tiny.model, src, 30)[0].tokens
    assert_idle(engine)


def test_closing_a_stream_frees_its_row(tiny, long_text):
    engine, _ = slow_engine(tiny)

    async def main():
        await engine.start()
        try:
            stream = engine.stream(prepare(engine, [long_text], DecodeOptions()))
            first = await stream.__anext__()
            await stream.__anext__()
            assert engine.active_sequences == 1 and first.finish_reason is None
            await stream.aclose()
            await wait_idle(engine)
            assert_idle(engine)
        finally:
            await engine.stop(1.0)

    run(main())


# --- failures and shutdown -------------------------------------------------------------------


def test_a_failing_step_fails_exactly_its_batch_and_the_scheduler_goes_on(tiny, long_text):
    """Two requests share the batch when the decoder raises; a third, queued behind them, is served."""
    engine, wrapper = slow_engine(tiny, 0.002, EngineSettings(max_active_sequences=2), fail_at_rows=2)
    options = DecodeOptions(max_new_tokens=10)

    async def main():
        await engine.start()
        try:
            calls = [
                engine.translate(prepare(engine, [text], options))
                for text in (long_text, long_text + " t5", long_text + " t6")
            ]
            outcomes = await asyncio.gather(*calls, return_exceptions=True)
            await wait_idle(engine)
            assert_idle(engine)
            after = await engine.translate(prepare(engine, [long_text], options))
            return outcomes, after
        finally:
            await engine.stop(1.0)

    outcomes, after = run(main())
    assert [type(o) for o in outcomes[:2]] == [InferenceFailed, InferenceFailed], outcomes
    assert "decoder failed" in str(outcomes[0]) and "injected failure" in str(outcomes[0])
    src = torch.tensor([tiny.tokenizer.encode(long_text + " t6").ids])
    assert outcomes[2][0].hypotheses[0].token_ids == greedy_decode(tiny.model, src, 10)[0].tokens
    assert len(after[0].hypotheses[0].token_ids) == 10 and wrapper.fail_at_rows is None


def test_a_failing_encoder_fails_its_newcomers_only(tiny, long_text):
    engine, _ = slow_engine(tiny, 0.002)
    scheduler = engine._scheduler
    scheduler.runner.encoder = SessionWrapper(scheduler.runner.encoder, fail_at_rows=None)
    options = DecodeOptions(max_new_tokens=10)

    async def main():
        await engine.start()
        try:
            running = asyncio.create_task(engine.translate(prepare(engine, [long_text], options)))
            await wait_until(lambda: engine.active_sequences == 1)
            scheduler.runner.encoder.fail_next = True
            with pytest.raises(InferenceFailed, match="encoder failed.*injected failure"):
                await engine.translate(prepare(engine, ["t5 t6"], options))
            return await running, await engine.translate(prepare(engine, ["t5 t6"], options))
        finally:
            await engine.stop(1.0)

    running, after = run(main())
    assert len(running[0].hypotheses[0].token_ids) == 10 and after[0].hypotheses[0].token_ids


def test_stop_lets_in_flight_work_finish_within_grace_then_refuses(tiny, long_text):
    engine, _ = slow_engine(tiny, delay_s=0.002)

    async def main():
        await engine.start()
        task = asyncio.create_task(engine.translate(prepare(engine, [long_text], DecodeOptions(max_new_tokens=20))))
        await asyncio.sleep(0.01)
        await engine.stop(5.0)
        with pytest.raises(ShuttingDown):
            await engine.translate(prepare(engine, ["t5"], DecodeOptions()))
        return await task

    result = run(main())
    assert len(result[0].hypotheses[0].token_ids) == 20


def test_stop_fails_what_outlasts_the_grace_with_shutting_down(tiny, long_text):
    engine, _ = slow_engine(tiny, delay_s=0.01)

    async def main():
        await engine.start()
        task = asyncio.create_task(engine.translate(prepare(engine, [long_text], DecodeOptions())))
        await asyncio.sleep(0.03)
        await engine.stop(0.05)
        with pytest.raises(ShuttingDown, match="shut down before this translation finished"):
            await task

    run(main())


# --- streaming and sampling ------------------------------------------------------------------


@pytest.mark.parametrize("interval_ms", [0, 60_000])
@pytest.mark.parametrize("max_new_tokens", [7, MAX_TARGET_LEN])
def test_stream_deltas_add_up_to_the_translation(tiny, max_new_tokens, interval_ms):
    """Whatever the stream interval, the events add up to the translation; with one longer than
    the whole translation there are two: the first token at once, the rest with the finish."""
    texts = random_texts(6, seed=3)
    engine = tiny.engine(EngineSettings(stream_interval_ms=interval_ms))

    async def main():
        await engine.start()
        try:
            out = []
            for text in texts:
                options = DecodeOptions(max_new_tokens=max_new_tokens)
                events = [event async for event in engine.stream(prepare(engine, [text], options))]
                out.append((events, (await engine.translate(prepare(engine, [text], options)))[0].hypotheses[0]))
            return out
        finally:
            await engine.stop(1.0)

    for events, hyp in run(main()):
        assert "".join(e.delta for e in events) == hyp.text
        assert [t for e in events for t in e.token_ids] == hyp.token_ids
        assert [e.finish_reason for e in events[:-1]] == [None] * (len(events) - 1)
        assert events[-1].finish_reason == hyp.finish_reason
        if interval_ms:
            assert [len(e.token_ids) for e in events] == [1, len(hyp.token_ids) - 1][: len(hyp.token_ids)]


def _sample(tiny, texts, options):
    return [r.hypotheses[0].token_ids for r in translate_once(tiny.engine(), texts, options)]


def test_same_seed_same_sample_different_seed_different(tiny):
    text = random_texts(1, seed=4)[0]
    options = DecodeOptions(temperature=1.5, seed=123, max_new_tokens=20)
    first = _sample(tiny, [text, text], options)
    again = _sample(tiny, [text], options)
    other = _sample(tiny, [text], DecodeOptions(temperature=1.5, seed=321, max_new_tokens=20))
    assert first[0] == first[1] == again[0]
    assert other[0] != again[0]


@pytest.mark.parametrize("top_k, top_p", [(3, 1.0), (0, 0.6)])
def test_sampled_tokens_respect_top_k_and_top_p(tiny, top_k, top_p):
    """Teacher-force the PyTorch model on each sampled prefix: every token lies in the allowed set."""
    texts = random_texts(10, seed=8)
    temperature = 1.3
    samples = _sample(tiny, texts, DecodeOptions(temperature=temperature, top_k=top_k, top_p=top_p, seed=1))
    cfg = tiny.model.cfg
    checked = 0
    for text, tokens in zip(texts, samples):
        src = torch.tensor([tiny.tokenizer.encode(text).ids])
        tgt = torch.tensor([[cfg.bos_id] + tokens[:-1]])
        with torch.no_grad():
            logits = tiny.model(src, tgt)[0].double()  # (S, V)
        logits[:, [cfg.pad_id, cfg.bos_id]] = -np.inf
        for step, tok in enumerate(tokens):
            row = logits[step]
            if top_k:
                allowed = set(row.topk(top_k).indices.tolist())
            else:
                probs = torch.softmax(row / temperature, dim=0)
                order = probs.argsort(descending=True)
                cum = probs[order].cumsum(0)
                size = int((cum < top_p - 1e-4).sum()) + 2  # nucleus plus one for float slack at the edge
                allowed = set(order[:size].tolist())
            assert tok in allowed, (text, step, tok)
            checked += 1
    assert checked >= 40


def test_warmup_runs_before_start_and_counts_nothing(tiny):
    engine = tiny.engine()
    assert engine.warmup() > 0
    assert (engine.steps_total, engine.tokens_generated_total) == (0, 0)
    assert_idle(engine)


def test_an_encoder_run_that_fails_fails_only_the_texts_it_did_not_encode(tiny, long_text):
    # a short and a long newcomer join at one boundary: two encoder runs (short first); the long
    # one's run fails, the short one decodes on
    engine, _ = slow_engine(tiny, 0.002)
    scheduler = engine._scheduler
    encoder = scheduler.runner.encoder
    options = DecodeOptions(max_new_tokens=6)
    short, long = "t5 t6", " ".join(f"t{4 + i % 50}" for i in range(MAX_SOURCE_LEN - 2))
    calls = record_encoder_batches(engine)

    async def main():
        await engine.start()
        try:
            running = asyncio.create_task(
                engine.translate(prepare(engine, [long_text], DecodeOptions(max_new_tokens=30)))
            )
            await wait_until(lambda: engine.active_sequences == 1)
            scheduler.runner.encoder = SessionWrapper(encoder, fail_when=lambda shape: shape[1] >= 10)
            # both submitted in one loop iteration, while the scheduler decodes: one boundary admits both
            both = await asyncio.gather(
                engine.translate(prepare(engine, [short], options)),
                engine.translate(prepare(engine, [long], options)),
                return_exceptions=True,
            )
            await running
            return both
        finally:
            await engine.stop(1.0)

    (short_result, long_result) = run(main())
    shapes = scheduler.runner.encoder.shapes
    assert [s[0] for s in shapes] == [1, 1] and shapes[0][1] < 10 <= shapes[1][1]  # two runs, short first
    assert calls == [1, 2]  # the running text's boundary, then one boundary for both newcomers
    assert isinstance(long_result, InferenceFailed) and "injected failure" in str(long_result)
    src = torch.tensor([tiny.tokenizer.encode(short).ids])
    assert short_result[0].hypotheses[0].token_ids == greedy_decode(tiny.model, src, 6)[0].tokens
