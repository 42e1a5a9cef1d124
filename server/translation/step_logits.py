"""One decoder step's logits as the searches read them (``search.py``): the log-softmax
normalisers and the argmax of every row, and the best candidates of every row for beam search,
each computed once per step for the whole batch and only when some job reads it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NEG_INF = np.float32(-np.inf)


@dataclass(frozen=True, slots=True)
class StepNeeds:
    """What the batch's searches read from each step's logits (set at every boundary)."""

    scores: bool = False  # some search needs log-probabilities
    argmax: bool = False  # some search takes the argmax
    top_n: int = 0  # how many best ids of each row the beam searches read (StepLogits.top)
    all_argmax: bool = False  # every search takes the argmax in place: it is the next input as is
    mask_when_won: frozenset[int] | None = None  # never_ids when only the argmax reads the logits
    screen: bool = False  # nothing but each row's argmax is read: a screening decoder may screen

    @classmethod
    def of(cls, searches: list, never_ids: frozenset[int]) -> StepNeeds:
        """The needs of ``searches`` (``search.Search``), ``never_ids`` the engine's never-generated ids."""
        scores = any(s.needs_scores for s in searches)
        all_argmax = all(s.uses_argmax and s.in_place for s in searches)
        return cls(
            scores=scores,
            argmax=any(s.uses_argmax for s in searches),
            top_n=max((s.top_n for s in searches), default=0),
            all_argmax=all_argmax,
            mask_when_won=never_ids if all_argmax and not scores else None,
            screen=all(s.argmax_only for s in searches),
        )


NORMALIZER_BLOCK_BYTES = 1 << 20  # rows exponentiated together: a block that stays in L2
TOP_BLOCKS = 256  # column blocks whose maxima point top_ids at the few worth reading
ONE_BLOCK = np.zeros(1, dtype=np.int64)  # block_starts of a whole row: its peak is its max


def log_normalizers(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row max and log-sum-exp of the shifted logits, torch's log_softmax split in two.

    logits: (R, V) float32 raw (pad/bos not masked yet) -> m (R,), ls (R,) float32 so
    that ``log_softmax = (logits - m) - ls``."""
    m, ls, _ = row_statistics(logits, ONE_BLOCK)
    return m, ls


def row_statistics(logits: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`log_normalizers` and the maxima of the column blocks beginning at ``starts`` (nb,)
    (the last runs to V), in one read of ``logits`` (R, V) float32: m (R,), ls (R,), peaks (R, nb).

    A block of rows at a time goes through one small buffer: its maxima bring it into L2, and
    the row max (the max of the peaks), the shifted exponentials and their sum read it there. A
    (R, V) temporary (30 MB at 128 beams of a 58k vocabulary) would cost page faults and a trip
    through memory on every step. Each row's sum is the same pairwise sum whatever the block,
    and the max of the peaks is the row's max, so the values do not depend on the blocks."""
    R, V = logits.shape
    m = np.empty(R, dtype=np.float32)  # (R,)
    s = np.empty(R, dtype=np.float32)  # (R,)
    peaks = np.empty((R, len(starts)), dtype=np.float32)  # (R, nb)
    block = max(1, min(R, NORMALIZER_BLOCK_BYTES // max(4 * V, 1)))
    work = np.empty((block, V), dtype=np.float32)
    for i in range(0, R, block):
        n = min(block, R - i)
        x, w = logits[i : i + n], work[:n]  # (n, V) each
        np.maximum.reduceat(x, starts, axis=1, out=peaks[i : i + n])
        peaks[i : i + n].max(axis=1, out=m[i : i + n])
        np.subtract(x, m[i : i + n, None], out=w)
        np.exp(w, out=w)
        w.sum(axis=1, out=s[i : i + n])
    return m, np.log(s), peaks  # (R,), (R,), (R, nb)


def top_layout(V: int, n: int) -> tuple[int, int]:
    """(blocks, width) of :func:`top_ids`'s column blocks for the ``n`` < V largest of V columns."""
    nb = max(n, min(TOP_BLOCKS, V // n))
    return nb, V // nb


def block_starts(nb: int, w: int) -> np.ndarray:
    """The first column of each of ``nb`` blocks of width ``w`` (nb,) int64; the last runs to V."""
    return np.arange(0, nb * w, w)


def top_ids(x: np.ndarray, n: int, peaks: np.ndarray | None = None) -> np.ndarray:
    """The column ids of the ``n`` largest values of every row of ``x`` (R, V), unordered:
    (R, n) int64; n < V. Which of several entries equal to a row's n-th value is kept is not
    specified (as with ``argpartition``). ``peaks``: the (R, nb) maxima of ``x``'s blocks of
    :func:`top_layout` (V, n), when already computed (:func:`row_statistics`).

    One pass over ``x`` and no (R, V) temporary (``argpartition`` writes a (R, V) index array,
    60 MB at 128 rows of a 58k vocabulary): the columns are cut into blocks; every entry outside
    a row's ``n`` blocks with the largest maxima is at most the n-th of those maxima, which ``n``
    entries reach, so the row's ``n`` largest lie in those blocks or in the columns past the last
    whole block, and only those few are read again."""
    R, V = x.shape
    nb, w = top_layout(V, n)
    if peaks is None:
        peaks = np.maximum.reduceat(x, block_starts(nb, w), axis=1)  # (R, nb); the last runs to V
    blocks = np.argpartition(peaks, nb - n, axis=1)[:, nb - n :]  # (R, n)
    vals = x[:, : nb * w].reshape(R, nb, w)[np.arange(R)[:, None], blocks].reshape(R, n * w)
    if nb * w < V:  # the columns past the last whole block are always read
        vals = np.concatenate([vals, x[:, nb * w :]], axis=1)  # (R, n * w + tail)
    best = np.argpartition(vals, vals.shape[1] - n, axis=1)[:, vals.shape[1] - n :]  # (R, n) places in vals
    block = np.take_along_axis(blocks, np.minimum(best // w, n - 1), axis=1)  # (R, n)
    return np.where(best < n * w, block * w + best % w, nb * w + (best - n * w))  # (R, n)


def mask_peaks(peaks: np.ndarray, x: np.ndarray, starts: np.ndarray, never: slice | np.ndarray) -> None:
    """Recompute, in place, the peaks (R, nb) of the blocks of ``x`` (R, V) (beginning at
    ``starts``) that hold a ``never`` column, after those columns were masked."""
    V = x.shape[1]
    nb = len(starts)
    cols = np.arange(V)[never]
    for b in np.unique(np.searchsorted(starts, cols, side="right") - 1).tolist():
        end = int(starts[b + 1]) if b + 1 < nb else V
        x[:, int(starts[b]) : end].max(axis=1, out=peaks[:, b])


class StepLogits:
    """One decoder step's logits as every search reads them.

    logits: (B, V) float32, raw from the decoder; pad and start tokens (``never``: columns) are
    set to -inf in place (never generated). The log-softmax normalisers (``scores``) and the
    argmax of every row (``argmax``, ties to the lowest id) are computed once, for the whole
    batch, and only when some job needs them. ``top``: the ``n`` of :meth:`top` the beam searches
    will ask for (0: none), whose block maxima then come with the normalisers' one read of the logits.

    ``never_ids``: given when nothing but the argmax reads this step (every row greedy, no
    scores). The argmax is then taken first and the columns masked (and the argmax taken
    again) only when one of those ids won, which a trained model all but never lets happen:
    the same tokens, ties included, without a write into the logits on every step (~7 us of a
    batch-1 step on the caches the decoder run had just flushed, benchmarks/README.md).
    """

    __slots__ = ("logits", "m", "ls", "greedy", "best", "_top", "_peaks", "_normalized")

    def __init__(
        self,
        logits: np.ndarray,
        never: slice | np.ndarray,
        scores: bool,
        argmax: bool,
        never_ids: frozenset[int] | None = None,
        top: int = 0,
    ) -> None:
        self.logits = logits
        self._top: tuple[int, np.ndarray] | None = None
        self._peaks: tuple[int, np.ndarray] | None = None  # (n, the block maxima of top_layout(V, n))
        self._normalized: tuple[int, np.ndarray] | None = None  # (n, the top ids' log-probabilities)
        self.m = self.ls = None
        if scores:  # the top ids' block maxima come with the normalisers' read of the logits
            V = logits.shape[1]
            starts = block_starts(*top_layout(V, top)) if 0 < top < V else ONE_BLOCK
            self.m, self.ls, peaks = row_statistics(logits, starts)  # (B,), (B,), (B, nb)
            logits[:, never] = NEG_INF
            if len(starts) > 1:
                mask_peaks(peaks, logits, starts, never)
                self._peaks = (top, peaks)
        elif never_ids is not None:
            self.greedy = logits.argmax(axis=1)  # (B,)
            self.best: list[int] = self.greedy.tolist()
            if never_ids.isdisjoint(self.best):
                return  # no row chose a never-generated token: the unmasked argmax is the masked one
            logits[:, never] = NEG_INF
        else:
            logits[:, never] = NEG_INF
        self.greedy = logits.argmax(axis=1) if argmax else None  # (B,)
        self.best = self.greedy.tolist() if argmax else []  # the same as ints, read per row

    @classmethod
    def of_argmax(cls, ids: np.ndarray) -> StepLogits:
        """A step whose decoder returned each row's argmax, pad and start excluded (a screened
        projection: ``runner.screen_ids``), for searches that read nothing else."""
        step = cls.__new__(cls)
        step.logits = step.m = step.ls = step._top = step._peaks = step._normalized = None
        step.greedy = ids  # (B,)
        step.best = ids.tolist()
        return step

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
            peaks = self._peaks[1] if self._peaks is not None and self._peaks[0] == n else None
            ids = np.broadcast_to(np.arange(V), self.logits.shape) if n >= V else top_ids(self.logits, n, peaks)
            self._top = (n, ids)
        return self._top[1]

    def candidates(self, rows: np.ndarray, n: int, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each of ``rows``' (K,) ``n`` best tokens and their scores ``base[k] + logp``: (K, n) ids
        and (K, n) float32, computed as ``logp`` computes them but only where they are read.

        A row's ``n`` best tokens by raw logit are its ``n`` best by ``base + logp`` (the same
        shift for the whole row), so the best ``n`` candidates of all rows are among them. Their
        log-probabilities are computed once per step for the whole batch."""
        ids = self.top(n)
        if self._normalized is None or self._normalized[0] != n:
            raw = np.take_along_axis(self.logits, ids, axis=1)  # (B, n)
            self._normalized = (n, (raw - self.m[:, None]) - self.ls[:, None])
        return ids[rows], base[:, None] + self._normalized[1][rows]  # (K, n), (K, n)
