"""A per-job forced prefix (``DecodeOptions.prefix_ids`` / ``hide_prefix``): M2M100's target
language token or a user's target prefix. Every hypothesis starts with it, whatever the
search; the rest is what the model continues with after it; texts without one in the same
batch are untouched."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import torch
from tokenizers import Tokenizer

from attnserve.contract.manifest import load_manifest
from attnserve.export.modeldir import placeholder_tokenizer, write_translation_dir
from attnserve.models import TranslationTransformer, beam_search, greedy_decode
from attnserve.server.service.limits import prepare
from attnserve.server.shared.errors import InvalidRequest
from attnserve.server.translation import DecodeOptions, EngineSettings

from .conftest import MAX_TARGET_LEN, TINY, TinyModel, random_texts, run

PREFIX = (17, 5, 33)


def source(tiny, text: str) -> torch.Tensor:
    return torch.tensor([tiny.tokenizer.encode(text).ids])  # (1, L)


def translate(tiny, texts, options, settings=None):
    engine = tiny.engine(settings)

    async def go():
        await engine.start()
        try:
            return await engine.translate(prepare(engine, texts, options))
        finally:
            await engine.stop(1.0)

    return run(go())


def stream(tiny, text, options, settings=None):
    engine = tiny.engine(settings)

    async def go():
        await engine.start()
        try:
            return [event async for event in engine.stream(prepare(engine, [text], options))]
        finally:
            await engine.stop(1.0)

    return run(go())


def test_greedy_forces_the_prefix_then_continues_like_the_reference_decoder(tiny):
    texts = random_texts(4, seed=3)
    results = translate(tiny, texts, DecodeOptions(prefix_ids=PREFIX, max_new_tokens=20))
    for text, result in zip(texts, results):
        (ref,) = greedy_decode(tiny.model, source(tiny, text), 20, prefix=list(PREFIX))
        (h,) = result.hypotheses
        assert tuple(h.token_ids[: len(PREFIX)]) == PREFIX
        assert h.token_ids == ref.tokens
        # forced tokens are certain: they add nothing to the log-probability (models/decoding.py)
        assert h.logprob == pytest.approx(ref.logprob, abs=1e-3)
        assert h.text == tiny.tokenizer.decode(ref.tokens, skip_special_tokens=True)


def test_beam_search_forces_the_prefix_then_expands_like_the_reference_decoder(tiny):
    texts = random_texts(3, seed=5)
    options = DecodeOptions(beam_size=4, num_hypotheses=3, prefix_ids=PREFIX, max_new_tokens=12)
    for text, result in zip(texts, translate(tiny, texts, options)):
        ref = beam_search(tiny.model, source(tiny, text), 4, 12, 1.0, 3, prefix=list(PREFIX))[0]
        assert [h.token_ids for h in result.hypotheses] == [h.tokens for h in ref]
        assert len({tuple(h.token_ids) for h in result.hypotheses}) == 3  # beams expanded after the prefix
        for h, r in zip(result.hypotheses, ref):
            assert tuple(h.token_ids[: len(PREFIX)]) == PREFIX
            assert h.score == pytest.approx(r.score, abs=1e-3)


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
            plain = engine.translate(prepare(engine, texts[:3], DecodeOptions(prefix_ids=())))
            forced = engine.translate(prepare(engine, texts[3:], DecodeOptions(prefix_ids=PREFIX)))
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
    assert [t for e in events for t in e.token_ids] == result.hypotheses[0].token_ids
    assert events[0].token_ids == (PREFIX[2],)
    assert "".join(e.delta for e in events) == result.hypotheses[0].text


def test_with_a_stream_interval_the_first_shown_token_goes_at_once(tiny):
    """The hidden prefix does not use up the stream's first event: the first token the client
    sees is not held for the interval."""
    (text,) = random_texts(1, seed=21)
    options = DecodeOptions(prefix_ids=PREFIX, hide_prefix=2, max_new_tokens=12)
    events = stream(tiny, text, options, EngineSettings(stream_interval_ms=60_000))
    (result,) = translate(tiny, [text], options)
    tokens = result.hypotheses[0].token_ids
    assert [e.token_ids for e in events] == [(PREFIX[2],), tuple(tokens[1:])]
    assert "".join(e.delta for e in events) == result.hypotheses[0].text


@pytest.mark.parametrize(
    "options, message",
    [
        (DecodeOptions(prefix_ids=(5, TINY.eos_id)), "prefix token 1 is the end token"),
        (DecodeOptions(prefix_ids=(TINY.vocab_size,)), "prefix token 0 is 64; this model's token ids are 0..63"),
        (DecodeOptions(prefix_ids=(5, 6), hide_prefix=3), "hide_prefix must be in 0..2"),
        (DecodeOptions(prefix_ids=(5, 6, 7), max_new_tokens=2), "prefix is 3 tokens, more than max_new_tokens"),
    ],
)
def test_a_bad_prefix_is_refused_with_a_message(tiny, options, message):
    engine = tiny.engine()
    with pytest.raises(InvalidRequest, match=message):
        prepare(engine, ["t5 t6"], options)


def test_max_new_tokens_ending_inside_a_hidden_prefix_returns_an_empty_text(tiny):
    options = DecodeOptions(prefix_ids=PREFIX, hide_prefix=3, max_new_tokens=3)
    (result,) = translate(tiny, ["t5 t6"], options)
    h = result.hypotheses[0]
    assert (h.token_ids, h.text, h.finish_reason) == ([], "", "length")
    events = stream(tiny, "t5 t6", options)
    assert [(e.delta, e.finish_reason) for e in events] == [("", "length")]


@pytest.fixture(scope="module")
def m2m_like(tmp_path_factory):
    """A tiny model that starts decoding from its end token (M2M100 / NLLB): model.json says
    decoder_start_id = eos and never_generate_ids = [pad], so the end token stays choosable."""
    cfg = dataclasses.replace(TINY, bos_id=TINY.eos_id)
    torch.manual_seed(1)
    model = TranslationTransformer(cfg).eval()
    with torch.no_grad():
        model.logits_bias[cfg.eos_id] = 1.0  # ends at different steps
    path = tmp_path_factory.mktemp("m2m-like") / "tiny-m2m"
    write_translation_dir(
        model, path, placeholder_tokenizer(cfg.vocab_size), name="tiny-m2m", max_source_len=24, max_target_len=16
    )
    manifest = load_manifest(path)
    assert (manifest.tokenizer.start_id, manifest.tokenizer.never_generate) == (cfg.eos_id, [cfg.pad_id])
    return TinyModel(model, path, manifest, Tokenizer.from_file(str(path / "tokenizer.json")))


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_model_that_starts_from_its_end_token_decodes_like_its_reference(m2m_like, beam_size):
    """The language token forced and hidden, as importers set it up for M2M100 / NLLB."""
    texts = random_texts(6, seed=17)
    language = (40,)
    options = DecodeOptions(beam_size=beam_size, prefix_ids=language, hide_prefix=1, max_new_tokens=16)
    results = translate(m2m_like, texts, options)
    ended = 0
    for text, result in zip(texts, results):
        src = source(m2m_like, text)
        if beam_size == 1:
            ref = greedy_decode(m2m_like.model, src, 16, prefix=list(language), hide_prefix=1)[0]
        else:
            ref = beam_search(m2m_like.model, src, beam_size, 16, 1.0, 1, prefix=list(language), hide_prefix=1)[0][0]
        assert result.hypotheses[0].token_ids == ref.tokens[1:]  # the language token hidden
        ended += ref.finish == "eos"
    assert ended, "no text ended with the end token: the test would not see it banned"
