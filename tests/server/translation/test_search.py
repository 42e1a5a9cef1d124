"""Token choice (sampling, beam search) on known logits, and incremental detokenization."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models

from attnserve.server.translation.detok import IncrementalDetokenizer
from attnserve.server.translation.search import BeamSearch, StepLogits, sample_token
from attnserve.server.translation.step_logits import log_normalizers, top_ids

PAD, BOS, EOS, A, B, C, D = range(7)


def logits_of(probs: dict[int, float], vocab: int = 7) -> np.ndarray:
    """(V,) float32 logits with the given probabilities; pad/bos at -inf as the scheduler leaves them."""
    x = np.full(vocab, -np.inf, dtype=np.float32)
    for tok, p in probs.items():
        x[tok] = math.log(p)
    return x


def draws(logits, n=4000, seed=0, **kw) -> Counter:
    rng = np.random.default_rng(seed)
    opts = dict(temperature=1.0, top_k=0, top_p=1.0) | kw
    return Counter(sample_token(logits, opts["temperature"], opts["top_k"], opts["top_p"], rng) for _ in range(n))


DIST = {A: 0.5, B: 0.3, C: 0.15, D: 0.05}


def test_plain_sampling_follows_the_distribution():
    counts = draws(logits_of(DIST))
    assert set(counts) == set(DIST)
    for tok, p in DIST.items():
        assert counts[tok] / 4000 == pytest.approx(p, abs=0.03)


def test_top_k_keeps_only_the_k_most_likely_and_renormalises():
    counts = draws(logits_of(DIST), top_k=2)
    assert set(counts) == {A, B}
    assert counts[A] / 4000 == pytest.approx(0.5 / 0.8, abs=0.03)


@pytest.mark.parametrize("top_p, nucleus", [(0.45, {A}), (0.75, {A, B}), (0.9, {A, B, C}), (1.0, {A, B, C, D})])
def test_top_p_keeps_the_smallest_set_reaching_p(top_p, nucleus):
    assert set(draws(logits_of(DIST), n=1500, top_p=top_p)) == nucleus


def test_top_p_on_a_wide_vocabulary_sorts_past_the_first_block():
    vocab = 2000  # flat: the nucleus of 0.5 is ~1000 tokens, beyond the first 64 sorted
    rng = np.random.default_rng(1)
    x = rng.normal(size=vocab).astype(np.float32)
    x[[PAD, BOS]] = -np.inf
    p = np.exp(x - x.max())
    p /= p.sum()
    order = np.argsort(-p)
    size = int(np.searchsorted(np.cumsum(p[order]), 0.5)) + 1
    seen = set(draws(x, n=600, top_p=0.5))
    assert seen <= set(order[:size].tolist()) and len(seen) > 64


@pytest.mark.parametrize("temperature", [0.25, 4.0])
def test_temperature_scales_the_logits(temperature):
    counts = draws(logits_of(DIST), temperature=temperature)
    tempered = {tok: p ** (1 / temperature) for tok, p in DIST.items()}
    total = sum(tempered.values())
    for tok, weight in tempered.items():
        assert counts[tok] / 4000 == pytest.approx(weight / total, abs=0.03)


def test_same_seed_same_draws():
    x = logits_of(DIST)
    assert draws(x, n=50, seed=7) == draws(x, n=50, seed=7)


def test_log_normalizers_equal_log_softmax():
    x = np.random.default_rng(0).normal(size=(3, 11)).astype(np.float32)
    m, ls = log_normalizers(x)
    expected = x - np.log(np.exp(x.astype(np.float64)).sum(axis=1, keepdims=True))
    np.testing.assert_allclose((x - m[:, None]) - ls[:, None], expected, atol=1e-6)


def test_log_normalizers_of_rows_wider_than_a_block_equal_log_softmax():
    x = np.random.default_rng(1).normal(size=(5, 300_000)).astype(np.float32) * 4  # a block holds fewer rows
    m, ls = log_normalizers(x)
    expected = np.log(np.exp(x.astype(np.float64) - m[:, None]).sum(axis=1))
    np.testing.assert_allclose(ls, expected, rtol=1e-5)
    np.testing.assert_array_equal(m, x.max(axis=1))


@pytest.mark.parametrize("V", [9, 17, 1000, 58101])  # fewer columns than blocks, a tail past the last block
@pytest.mark.parametrize("n", [1, 8])
def test_top_ids_are_each_rows_n_largest(V, n):
    x = np.random.default_rng(V + n).normal(size=(6, V)).astype(np.float32)
    x[0, -1] = 99  # the best in the columns past the last whole block
    x[1, :n] = 50  # the n best in one block
    got = np.sort(top_ids(x, n), axis=1)
    np.testing.assert_array_equal(got, np.sort(np.argsort(-x, axis=1, kind="stable")[:, :n], axis=1))


def test_beam_searches_sharing_a_step_choose_what_whole_rows_of_logp_choose():
    """Several beam jobs in one batch take their candidates from the step's one partition of
    the logits; every step they keep the beams, tokens and scores that the (K, V) log-probabilities
    of their rows give."""
    rng = np.random.default_rng(3)
    V, K, jobs, steps = 50, 4, 3, 6
    new = [BeamSearch(K, steps, 1.0, K, eos_id=EOS) for _ in range(jobs)]
    old = [BeamSearch(K, steps, 1.0, K, eos_id=EOS) for _ in range(jobs)]
    rows = [np.array([j], dtype=np.int64) for j in range(jobs)]
    for _ in range(steps):
        live = [(j, r) for j, r in enumerate(rows) if len(r)]
        if not live:
            break
        batch = rng.normal(size=(sum(len(r) for _, r in live), V)).astype(np.float32) * 3
        batch[:, EOS] -= 2
        at = 0
        for j, r in live:
            rows[j] = np.arange(at, at + len(r))
            at += len(r)
        step = StepLogits(batch.copy(), slice(PAD, BOS + 1), scores=True, argmax=False)
        for j, _ in live:
            tokens, parents = new[j].choose(step, rows[j])
            assert (parents, tokens) == old[j].advance(step.logp(rows[j]))
            assert [(t, lp) for t, lp in new[j].beams] == [(t, lp) for t, lp in old[j].beams]
            rows[j] = np.zeros(len(tokens), dtype=np.int64)
    for a, b in zip(new, old):
        assert [(h.tokens, h.logprob) for h in a.result()] == [(h.tokens, h.logprob) for h in b.result()]


@pytest.mark.parametrize("never", [slice(PAD, BOS + 1), np.array([PAD, D])], ids=["columns", "ids"])
def test_a_greedy_step_without_scores_masks_only_when_a_never_generated_token_wins(never):
    """The argmax taken before pad/start are masked (nothing else reads the logits) picks the
    tokens of masking first: when a never-generated token wins, ties the best allowed one, or loses."""
    ids = frozenset(np.arange(7)[never].tolist())
    known = [
        [9, 0, 1, 2, 3, 4, 5],  # pad wins
        [0, 9, 9, 2, 3, 4, 5],  # start ties with the end token
        [0, 1, 2, 8, 8, 4, 5],  # two allowed tokens tie: the lower id
        [5, 5, 1, 2, 3, 4, 5],  # pad, start and D tie
    ]
    rows = np.concatenate(
        [np.array(known, np.float32), np.random.default_rng(0).normal(size=(60, 7)).astype(np.float32)]
    )
    masked = StepLogits(rows.copy(), never, scores=False, argmax=True)
    lazy = StepLogits(rows.copy(), never, scores=False, argmax=True, never_ids=ids)
    assert lazy.best == masked.best == lazy.greedy.tolist()
    assert not ids & set(lazy.best)
    assert masked.best[:4] == ([D, EOS, A, D] if isinstance(never, slice) else [C, BOS, A, BOS])


def test_beam_search_finds_the_sequence_greedy_misses():
    """Greedy takes A (0.55) then EOS (0.4): p = 0.22; beam search finds B EOS: p = 0.405."""
    table = {BOS: {A: 0.55, B: 0.45}, A: {EOS: 0.4, A: 0.3, B: 0.3}, B: {EOS: 0.9, A: 0.05, B: 0.05}}
    search = BeamSearch(beam_size=2, max_new_tokens=5, length_penalty=1.0, num_hypotheses=2, eos_id=EOS)
    last = [BOS]
    while not search.done:
        logp = np.stack([np.log(np.maximum(np.exp(logits_of(table[t])), 1e-9)) for t in last])  # (K, V)
        parents, tokens = search.advance(logp.astype(np.float32))
        assert len(parents) == len(tokens)
        last = tokens
    best, second = search.result()
    assert best.tokens == [B, EOS] and best.finish_reason == "eos"
    assert best.logprob == pytest.approx(math.log(0.45 * 0.9), abs=1e-5)
    assert best.score == pytest.approx(best.logprob / 2)
    assert second.tokens == [A, EOS]


def test_beam_search_stops_at_max_new_tokens_with_length():
    search = BeamSearch(beam_size=2, max_new_tokens=2, length_penalty=1.0, num_hypotheses=2, eos_id=EOS)
    flat = np.log(np.full((1, 7), 0.2, dtype=np.float32))
    flat[:, [PAD, BOS, EOS]] = -np.inf
    parents, tokens = search.advance(flat)
    assert parents == [0, 0] and len(tokens) == 2
    assert search.advance(np.repeat(flat, 2, axis=0)) == ([], [])
    assert [h.finish_reason for h in search.result()] == ["length", "length"]
    assert all(len(h.tokens) == 2 for h in search.result())


# --- incremental detokenization -------------------------------------------------------------


def _byte_level_tokenizer() -> tuple[Tokenizer, dict[str, int]]:
    """Pieces in GPT-2's byte-to-unicode alphabet; 'é' is two byte tokens that only decode together."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    codes, extra = dict(zip(printable, printable)), 0
    for b in range(256):
        if b not in codes:
            codes[b], extra = 256 + extra, extra + 1
    ch = {b: chr(c) for b, c in codes.items()}
    pieces = ["<pad>", "<s>", "</s>", "Hello", ch[0x20] + "caf", ch[0xC3], ch[0xA9], ch[0x20] + "w", "orld", "!"]
    vocab = {p: i for i, p in enumerate(pieces)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<pad>", "<s>", "</s>"])
    return tok, vocab


def _metaspace_tokenizer() -> tuple[Tokenizer, dict[str, int]]:
    vocab = {p: i for i, p in enumerate(["<pad>", "<s>", "</s>", "▁Hello", "▁wor", "ld", "!", "▁", ","])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.decoder = decoders.Metaspace()
    tok.add_special_tokens(["<pad>", "<s>", "</s>"])
    return tok, vocab


@pytest.mark.parametrize(
    "make, pieces",
    [
        (_byte_level_tokenizer, ["Hello", "\u0120caf", "\u00c3", "\u00a9", "\u0120w", "orld", "!", "</s>"]),
        (_metaspace_tokenizer, ["▁Hello", "▁wor", "ld", "▁", ",", "!", "</s>"]),
    ],
)
def test_stream_deltas_add_up_to_the_final_text(make, pieces):
    tok, vocab = make()
    ids = [vocab[p] for p in pieces]
    detok = IncrementalDetokenizer(tok)
    deltas = [detok.push([i]) for i in ids]
    deltas[-1] += detok.flush()
    final = tok.decode(ids, skip_special_tokens=True)
    assert "".join(deltas) == final
    assert all("\ufffd" not in d for d in deltas), "half a UTF-8 sequence was given out"
    assert final.startswith(deltas[0]) and deltas[0]
