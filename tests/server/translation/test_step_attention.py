"""The engine keeps each step's alignment-layer attention when asked (``DecodeOptions.
return_attention``): what the aligner graph would compute for the finished text, without running
it, in both cache layouts, in a batch shared with texts that do not ask, for sampling and for
every hypothesis of beam search (whose rows are re-chosen every step)."""

from __future__ import annotations

import numpy as np

from attnserve.contract.manifest import load_manifest
from attnserve.server.service.limits import prepare
from attnserve.server.shared.onnx_sessions import create_session
from attnserve.server.translation import DecodeOptions
from attnserve.server.translation.aligner import Aligner

from .conftest import random_texts, run, translate_once, translate_together


def _aligner(tiny) -> Aligner:
    manifest = load_manifest(tiny.path)
    aligner, encoder = (create_session(tiny.path / f, "cpu", 1) for f in ("aligner.onnx", "encoder.onnx"))
    return Aligner(aligner, manifest, encoder)


def _aligned(tiny, texts, results, hypothesis: int = 0) -> list[np.ndarray]:
    """The aligner graph's attention of each text's hypothesis ``hypothesis``, encoded again."""
    aligner = _aligner(tiny)
    pairs = [
        (tiny.tokenizer.encode(text).ids, aligner.decoder_inputs((), r.hypotheses[hypothesis].token_ids), None)
        for text, r in zip(texts, results)
    ]
    return aligner.attention(pairs)


def test_the_engine_keeps_each_steps_attention_only_when_asked(tiny_any):
    assert load_manifest(tiny_any.path).decoder_io().attention  # the export returns it
    texts = random_texts(16, seed=11)  # 1..23 tokens: rows of several source widths in one batch
    kept = translate_once(tiny_any.engine(), texts, DecodeOptions(return_attention=True, max_new_tokens=9))
    for text, result, expected in zip(texts, kept, _aligned(tiny_any, texts, kept)):
        steps, source = len(result.hypotheses[0].token_ids), len(tiny_any.tokenizer.encode(text).ids)
        assert result.attention is not None and result.attention.shape == (steps, source)
        np.testing.assert_allclose(result.attention.sum(axis=1), 1.0, atol=1e-5)
        np.testing.assert_allclose(result.attention, expected, atol=1e-5)
    plain = translate_once(tiny_any.engine(), texts, DecodeOptions(max_new_tokens=9))
    assert all(r.attention is None for r in plain)
    assert [r.hypotheses[0].token_ids for r in plain] == [r.hypotheses[0].token_ids for r in kept]


def test_texts_with_and_without_it_share_the_batch_with_beam_search_and_sampling(tiny):
    texts = random_texts(12, seed=13)
    kept, plain, beams, sampled = translate_together(
        tiny.engine(),
        (texts[:4], DecodeOptions(return_attention=True, max_new_tokens=7)),
        (texts[4:8], DecodeOptions(max_new_tokens=7)),
        (texts[8:], DecodeOptions(return_attention=True, beam_size=3, num_hypotheses=3)),
        (texts[:4], DecodeOptions(return_attention=True, temperature=0.8, seed=1)),
    )
    assert all(h.attention is None for r in plain for h in r.hypotheses)
    for group, done in ((texts[:4], kept), (texts[:4], sampled)):
        for result, expected in zip(done, _aligned(tiny, group, done)):
            np.testing.assert_allclose(result.attention, expected, atol=1e-5)
    assert all(len(r.hypotheses) == 3 for r in beams)
    for k in range(3):  # every hypothesis of beam search: its own steps, followed through the reorders
        for result, expected in zip(beams, _aligned(tiny, texts[8:], beams, k)):
            np.testing.assert_allclose(result.hypotheses[k].attention, expected, atol=1e-5)


def test_a_stream_keeps_it_on_its_last_event(tiny):
    engine = tiny.engine()
    text = random_texts(1, seed=17)[0]

    async def main():
        await engine.start()
        try:
            return [
                e
                async for e in engine.stream(
                    prepare(engine, [text], DecodeOptions(return_attention=True, max_new_tokens=8))
                )
            ]
        finally:
            await engine.stop(1.0)

    events = run(main())
    assert all(e.attention is None for e in events[:-1])
    tokens = [t for e in events for t in e.token_ids]
    aligner = _aligner(tiny)
    (expected,) = aligner.attention([(tiny.tokenizer.encode(text).ids, aligner.decoder_inputs((), tokens), None)])
    np.testing.assert_allclose(events[-1].attention, expected, atol=1e-5)
