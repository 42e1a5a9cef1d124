"""The reference decoders that define the server's expected tokens."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attnserve.models import TranslationConfig, beam_search, greedy_decode

PAD, BOS, EOS, A, B = 0, 1, 2, 3, 4


class MarkovModel(nn.Module):
    """A stand-in translator whose next-token distribution depends only on the last token.

    It speaks the encode/cross_kv/decode/logits seams, cache included, so the decoders
    run unchanged; the log-probabilities are set by hand.
    """

    def __init__(self, probs: dict[int, dict[int, float]]) -> None:
        super().__init__()
        self.cfg = TranslationConfig(vocab_size=5, d_model=4, num_heads=1, pad_id=PAD, bos_id=BOS, eos_id=EOS, unk_id=A)
        table = torch.full((5, 5), 1e-9)
        for prev, row in probs.items():
            for tok, p in row.items():
                table[prev, tok] = p
        self.register_buffer("log_table", table.log())

    def encode(self, src, src_mask):
        return torch.zeros(src.shape[0], src.shape[1], 1)

    def cross_kv(self, memory):
        return [(memory[:, None], memory[:, None])]

    def decode(self, tgt, positions, tgt_mask, cross_kv, src_mask, past=None, use_cache=False):
        R, S = tgt.shape
        P = 0 if past is None else past[0][0].shape[2]
        assert tgt_mask.shape == (R, P + S), "the decoder must be given a mask over cache + new tokens"
        assert torch.equal(positions[:, -1], torch.full((R,), P + S - 1)), "positions must count steps"
        hidden = nn.functional.one_hot(tgt, 5).float()  # (R, S, V)
        cache = torch.zeros(R, 1, P + S, 1)
        return hidden, [(cache, cache)]

    def logits(self, hidden):
        return hidden @ self.log_table  # (R, S, V)


# Greedy takes A (0.55) then EOS (0.4): p = 0.22. The best sequence is B EOS: p = 0.405.
TRAP = {BOS: {A: 0.55, B: 0.45}, A: {EOS: 0.4, A: 0.3, B: 0.3}, B: {EOS: 0.9, A: 0.05, B: 0.05}}


def test_beam_search_finds_the_known_best_sequence_greedy_misses():
    model = MarkovModel(TRAP)
    src = torch.tensor([[3, 4]])
    greedy = greedy_decode(model, src, max_new_tokens=5)[0]
    assert greedy.tokens == [A, EOS]
    assert greedy.logprob == pytest.approx(math.log(0.55 * 0.4), abs=1e-4)
    hyps = beam_search(model, src, beam_size=2, max_new_tokens=5, length_penalty=1.0, num_hypotheses=2)[0]
    assert [h.tokens for h in hyps] == [[B, EOS], [A, EOS]]
    assert hyps[0].logprob == pytest.approx(math.log(0.45 * 0.9), abs=1e-4)
    assert hyps[0].score == pytest.approx(math.log(0.45 * 0.9) / 2, abs=1e-4)
    assert all(h.finish == "eos" for h in hyps)


def test_length_limit_finishes_with_length():
    loop = {BOS: {A: 0.9, EOS: 0.1}, A: {A: 0.9, EOS: 0.1}}
    model = MarkovModel(loop)
    src = torch.tensor([[3]])
    greedy = greedy_decode(model, src, max_new_tokens=4)[0]
    assert greedy.tokens == [A, A, A, A] and greedy.finish == "length"
    best = beam_search(model, src, beam_size=1, max_new_tokens=4)[0][0]
    assert best.tokens == [A, A, A, A] and best.finish == "length"
    # Two beams: [EOS] and [A, EOS] finish first, but the live [A, A] (log 0.81 / 2) beats both
    # (log 0.1, log 0.09 / 2), so the search goes on; at the limit the live beam finishes with
    # "length" and ranks first (log 0.9^4 / 4), then [A, A, A, EOS] (log(0.9^3 x 0.1) / 4).
    hyps = beam_search(model, src, beam_size=2, max_new_tokens=4, length_penalty=1.0, num_hypotheses=2)[0]
    assert [h.tokens for h in hyps] == [[A, A, A, A], [A, A, A, EOS]]
    assert [h.finish for h in hyps] == ["length", "eos"]


# A likely path A B EOS (p = 0.97^3), and early end tokens just likely enough to rank among
# the best K = 2 candidates: [EOS] (0.02) at the first step, [A, EOS] (0.97 x 0.02) at the second.
EARLY_ENDS = {
    BOS: {A: 0.97, EOS: 0.02, B: 0.01},
    A: {B: 0.97, EOS: 0.02, A: 0.01},
    B: {EOS: 0.97, A: 0.02, B: 0.01},
}


def test_beam_search_goes_on_while_a_live_beam_beats_the_finished_ones():
    """Two hypotheses finished after two steps, both far worse than the live [A, B]: stopping
    there (transformers' early_stopping=True) answered [A, EOS]; the search goes on and finds
    [A, B, EOS], greedy's answer too."""
    model = MarkovModel(EARLY_ENDS)
    src = torch.tensor([[3, 4]])
    assert greedy_decode(model, src, max_new_tokens=8)[0].tokens == [A, B, EOS]
    hyps = beam_search(model, src, beam_size=2, max_new_tokens=8, length_penalty=1.0, num_hypotheses=2)[0]
    assert hyps[0].tokens == [A, B, EOS] and hyps[0].finish == "eos"
    assert hyps[0].logprob == pytest.approx(3 * math.log(0.97), abs=1e-4)
    assert hyps[1].score < hyps[0].score


def test_length_penalty_zero_prefers_short_hypotheses():
    loop = {BOS: {A: 0.6, EOS: 0.4}, A: {A: 0.95, EOS: 0.05}}
    model = MarkovModel(loop)
    # A^n has p = 0.6 x 0.95^(n-1): still above [EOS]'s 0.4 up to n = 8, below it from n = 9 on
    best = beam_search(model, torch.tensor([[3]]), beam_size=2, max_new_tokens=12, length_penalty=0.0)[0][0]
    assert best.tokens == [EOS]


def test_greedy_equals_beam_search_of_size_one(tiny_translator):
    src = torch.randint(4, 97, (4, 6))
    src[2, 3:] = tiny_translator.cfg.pad_id
    greedy = greedy_decode(tiny_translator, src, max_new_tokens=12)
    beams = beam_search(tiny_translator, src, beam_size=1, max_new_tokens=12)
    for g, b in zip(greedy, beams):
        assert g.tokens == b[0].tokens
        assert g.logprob == pytest.approx(b[0].logprob, abs=1e-4)


def test_batched_greedy_equals_one_row_at_a_time(tiny_translator):
    src = torch.randint(4, 97, (3, 7))
    src[0, 4:] = tiny_translator.cfg.pad_id
    batched = greedy_decode(tiny_translator, src, max_new_tokens=10)
    for b in range(3):
        row = src[b : b + 1, : int((src[b] != 0).sum())]
        assert greedy_decode(tiny_translator, row, max_new_tokens=10)[0].tokens == batched[b].tokens


def test_bad_arguments_raise():
    model = MarkovModel(TRAP)
    with pytest.raises(ValueError, match="num_hypotheses"):
        beam_search(model, torch.tensor([[3]]), beam_size=2, num_hypotheses=3)
