"""One decoder step's logits as the searches read them (``search.py``): the log-softmax
normalisers and the argmax of every row, and the best candidates of every row for beam search,
each computed once per step for the whole batch and only when some job reads it."""

from __future__ import annotations

import numpy as np

NEG_INF = np.float32(-np.inf)


NORMALIZER_BLOCK_BYTES = 1 << 20  # rows exponentiated together: a block that stays in L2


def log_normalizers(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row max and log-sum-exp of the shifted logits, torch's log_softmax split in two.

    logits: (R, V) float32 raw (pad/bos not masked yet) -> m (R,), ls (R,) float32 so
    that ``log_softmax = (logits - m) - ls``.

    The exponentials go through one small buffer a block of rows at a time: a (R, V) temporary
    (30 MB at 128 beams of a 58k vocabulary) costs page faults and a trip through memory on
    every step. Each row's sum is the same pairwise sum whatever the block, so the values do
    not change.
    """
    R, V = logits.shape
    m = logits.max(axis=1)  # (R,)
    s = np.empty(R, dtype=np.float32)  # (R,)
    block = max(1, min(R, NORMALIZER_BLOCK_BYTES // max(4 * V, 1)))
    work = np.empty((block, V), dtype=np.float32)
    for i in range(0, R, block):
        n = min(block, R - i)
        w = work[:n]
        np.subtract(logits[i : i + n], m[i : i + n, None], out=w)
        np.exp(w, out=w)
        w.sum(axis=1, out=s[i : i + n])
    return m, np.log(s)  # (R,), (R,)


TOP_BLOCKS = 256  # column blocks whose maxima point top_ids at the few worth reading


def top_ids(x: np.ndarray, n: int) -> np.ndarray:
    """The column ids of the ``n`` largest values of every row of ``x`` (R, V), unordered:
    (R, n) int64; n < V. Which of several entries equal to a row's n-th value is kept is not
    specified (as with ``argpartition``).

    One pass over ``x`` and no (R, V) temporary (``argpartition`` writes a (R, V) index array,
    60 MB at 128 rows of a 58k vocabulary): the columns are cut into blocks; every entry outside
    a row's ``n`` blocks with the largest maxima is at most the n-th of those maxima, which ``n``
    entries reach, so the row's ``n`` largest lie in those blocks or in the columns past the last
    whole block, and only those few are read again."""
    R, V = x.shape
    nb = max(n, min(TOP_BLOCKS, V // n))
    w = V // nb
    body = x[:, : nb * w].reshape(R, nb, w)
    peaks = np.maximum.reduceat(x, np.arange(0, nb * w, w), axis=1)  # (R, nb); the last runs to V
    blocks = np.argpartition(peaks, nb - n, axis=1)[:, nb - n :]  # (R, n)
    rows = np.arange(R)[:, None]
    cols = (blocks[:, :, None] * w + np.arange(w)).reshape(R, n * w)  # (R, n * w)
    vals = body[rows, blocks].reshape(R, n * w)
    if nb * w < V:  # the columns past the last whole block are always read
        cols = np.concatenate([cols, np.broadcast_to(np.arange(nb * w, V), (R, V - nb * w))], axis=1)
        vals = np.concatenate([vals, x[:, nb * w :]], axis=1)
    best = np.argpartition(vals, vals.shape[1] - n, axis=1)[:, vals.shape[1] - n :]  # (R, n)
    return np.take_along_axis(cols, best, axis=1)


class StepLogits:
    """One decoder step's logits as every search reads them.

    logits: (B, V) float32, raw from the decoder; pad and start tokens (``never``: columns) are
    set to -inf in place (never generated). The log-softmax normalisers (``scores``) and the
    argmax of every row (``argmax``, ties to the lowest id) are computed once, for the whole
    batch, and only when some job needs them.

    ``never_ids``: given when nothing but the argmax reads this step (every row greedy, no
    scores). The argmax is then taken first and the columns masked (and the argmax taken
    again) only when one of those ids won, which a trained model all but never lets happen:
    the same tokens, ties included, without a write into the logits on every step (~7 us of a
    batch-1 step on the caches the decoder run had just flushed, benchmarks/README.md).
    """

    __slots__ = ("logits", "m", "ls", "greedy", "best", "_top")

    def __init__(
        self,
        logits: np.ndarray,
        never: slice | np.ndarray,
        scores: bool,
        argmax: bool,
        never_ids: frozenset[int] | None = None,
    ) -> None:
        self.m, self.ls = log_normalizers(logits) if scores else (None, None)  # (B,), (B,)
        self.logits = logits
        self._top: tuple[int, np.ndarray] | None = None
        if never_ids is not None:
            self.greedy = logits.argmax(axis=1)  # (B,)
            self.best: list[int] = self.greedy.tolist()
            if never_ids.isdisjoint(self.best):
                return  # no row chose a never-generated token: the unmasked argmax is the masked one
        logits[:, never] = NEG_INF
        self.greedy = logits.argmax(axis=1) if argmax else None  # (B,)
        self.best = self.greedy.tolist() if argmax else []  # the same as ints, read per row

    def logp(self, rows: np.ndarray) -> np.ndarray:
        """Log-probabilities of ``rows`` (K,): (K, V) float32, pad/start at -inf."""
        return (self.logits[rows] - self.m[rows, None]) - self.ls[rows, None]  # (K, V)

    def token_logp(self, row: int, token: int) -> float:
        return float((self.logits[row, token] - self.m[row]) - self.ls[row])

    def top(self, n: int) -> np.ndarray:
        """The ``n`` highest logits' ids of every row, unordered: (B, min(n, V)) int64.

        One partition of the whole batch, computed once per step for every beam search that
        asks (the largest ``n`` asked for is kept; a smaller ask reads its first columns only
        when they are the same partition, so it recomputes instead)."""
        if self._top is None or self._top[0] != n:
            V = self.logits.shape[1]
            ids = np.broadcast_to(np.arange(V), self.logits.shape) if n >= V else top_ids(self.logits, n)
            self._top = (n, ids)
        return self._top[1]

    def candidates(self, rows: np.ndarray, n: int, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each of ``rows``' (K,) ``n`` best tokens and their scores ``base[k] + logp``: (K, n) ids
        and (K, n) float32, computed as ``logp`` computes them but only where they are read.

        A row's ``n`` best tokens by raw logit are its ``n`` best by ``base + logp`` (the same
        shift for the whole row), so the best ``n`` candidates of all rows are among them."""
        ids = self.top(n)[rows]  # (K, n)
        raw = self.logits[rows[:, None], ids]  # (K, n)
        m, ls = self.m[rows, None], self.ls[rows, None]  # (K, 1)
        return ids, base[:, None] + ((raw - m) - ls)  # (K, n), (K, n)
