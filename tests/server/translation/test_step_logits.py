"""A decoder step's logits as beam search reads them: the normalisers, the block maxima read with
them and the candidates taken from them, against whole-row log-probabilities."""

from __future__ import annotations

import numpy as np
import pytest

from attnserve.server.translation.step_logits import StepLogits, block_starts, row_statistics, top_layout

PAD, BOS = 0, 1


def random_logits(rows: int, vocab: int, seed: int) -> np.ndarray:
    """(rows, vocab) float32 with ties (rounded values) and -inf columns, as a step may give."""
    rng = np.random.default_rng(seed)
    x = np.round(rng.normal(size=(rows, vocab)) * 3).astype(np.float32)  # many ties
    x[:, rng.integers(2, vocab, 3)] = -np.inf
    return x


@pytest.mark.parametrize("V", [9, 40, 2049, 58101])  # fewer columns than blocks, a tail past the last block
def test_row_statistics_give_the_log_softmax_and_each_blocks_max(V):
    x = random_logits(7, V, V)
    nb, w = top_layout(V, 4)
    starts = block_starts(nb, w)
    m, ls, peaks = row_statistics(x, starts)
    ends = [*starts[1:].tolist(), V]
    expected = [[x[r, a:b].max() for a, b in zip(starts.tolist(), ends)] for r in range(len(x))]
    np.testing.assert_array_equal(peaks, np.array(expected, np.float32))
    np.testing.assert_array_equal(m, x.max(axis=1))
    reference = np.log(np.exp(x.astype(np.float64) - m[:, None]).sum(axis=1))
    np.testing.assert_allclose(ls, reference, rtol=1e-5, atol=1e-6)


def whole_rows(x: np.ndarray, rows: np.ndarray, n: int, base: np.ndarray) -> np.ndarray:
    """The ``n`` best ``base + logp`` of ``rows``, best first, from whole (K, V) rows of log-probabilities."""
    m = x.max(axis=1, keepdims=True)
    ls = np.log(np.exp(x - m).sum(axis=1, keepdims=True, dtype=np.float32))
    masked = x.copy()
    masked[:, PAD : BOS + 1] = -np.inf
    scores = base[:, None] + ((masked[rows] - m[rows]) - ls[rows])  # (K, V)
    return -np.sort(-scores, axis=1)[:, :n]


@pytest.mark.parametrize("V", [12, 300, 58101])
@pytest.mark.parametrize("n", [2, 8])
def test_candidates_are_each_rows_best_of_the_masked_log_probabilities(V, n):
    """Pad and start hold the best logits (masked after the block maxima were read): no block of
    theirs may take the place of one that holds a row's best allowed tokens."""
    x = random_logits(40, V, V + n)
    x[::3, PAD] = 99.0
    x[1::3, BOS] = 99.0
    rows = np.arange(0, 40, 3)
    base = np.random.default_rng(n).normal(size=len(rows)).astype(np.float32)
    step = StepLogits(x.copy(), slice(PAD, BOS + 1), scores=True, argmax=False, top=n)
    ids, scores = step.candidates(rows, n, base)  # (K, n) each
    assert not np.isin(ids, [PAD, BOS]).any()
    assert all(len(set(row)) == n for row in ids.tolist())
    np.testing.assert_array_equal(-np.sort(-scores, axis=1), whole_rows(x, rows, n, base))
    # the scores are the step's own log-probabilities of those ids
    np.testing.assert_array_equal(scores, base[:, None] + np.take_along_axis(step.logp(rows), ids, axis=1))


def test_a_search_asking_for_other_candidates_than_the_step_read_gets_them():
    x = random_logits(6, 3000, 5)
    step = StepLogits(x.copy(), slice(PAD, BOS + 1), scores=True, argmax=False, top=8)
    rows, base = np.arange(6), np.zeros(6, np.float32)
    ids, scores = step.candidates(rows, 4, base)  # not the 8 the step's block maxima were read for
    np.testing.assert_array_equal(-np.sort(-scores, axis=1), whole_rows(x, rows, 4, base))
