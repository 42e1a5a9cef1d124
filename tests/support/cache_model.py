"""A model of a decode cache's slots for the cache tests (tests/server/translation): random joins,
leaves, beam copies and compactions applied to a cache (the left-padded ``KVCache`` or the
in-place ``InPlaceCache``) and to a plain list of what each slot should hold, so a test checks
the cache against the list after every action."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from attnserve.server.translation.cache import NewRows


def new_rows(lengths: list[int], tag: float, heads: int, head_dim: int) -> NewRows:
    """Joining rows of those source lengths: every valid source slot of row i holds ``tag + i``."""
    n, L = len(lengths), max(lengths)
    mask = np.zeros((n, L), np.int32)
    cross = np.zeros((n, heads, L, head_dim), np.float32)
    for i, length in enumerate(lengths):
        mask[i, :length] = 1
        cross[i, :, :length] = tag + i
    return NewRows([cross, cross.copy()], mask, np.array(lengths))


class SlotModel:
    """What every slot of ``cache`` should hold: ``history[slot]``, the values written at each of
    its steps (None: a free slot), and ``source[slot]``, its cross K/V tag."""

    def __init__(self, cache, heads: int, head_dim: int) -> None:
        self.cache, self.heads, self.head_dim = cache, heads, head_dim
        self.history: list[list[float] | None] = []
        self.source: list[float | None] = []
        self.next_value, self.next_tag, self.compactions = 1.0, 100.0, 0

    def live(self) -> list[int]:
        return [i for i, h in enumerate(self.history) if h is not None]

    def join(self, rng: np.random.Generator, check: Callable[[list[int], int], None] | None = None) -> None:
        """One or two rows join into free slots, a compaction making room when there are too few;
        ``check(lengths, width before)`` after the cache assigned them (not at its start)."""
        cache, history = self.cache, self.history
        lengths = rng.integers(1, 12, size=rng.integers(1, 3)).tolist()
        rows = new_rows(lengths, self.next_tag, self.heads, self.head_dim)
        if not history:
            cache.start(rows)
            self.history, self.source = [[] for _ in lengths], [self.next_tag + i for i in range(len(lengths))]
        else:
            free = [i for i, h in enumerate(history) if h is None]
            if len(free) < len(lengths):
                keep = self.live()
                cache.compact(np.array(keep, dtype=np.int64), extra=len(lengths))
                self._keep(keep, len(lengths))
                free = list(range(len(keep), len(self.history)))
            slots = np.array(free[: len(lengths)])
            width = cache.L
            cache.assign(slots, rows)
            if check is not None:
                check(lengths, width)
            for i, slot in enumerate(slots.tolist()):
                self.history[slot], self.source[slot] = [], self.next_tag + i
        self.next_tag += 10

    def leave(self, rng: np.random.Generator) -> None:
        """Some rows leave (no copy)."""
        gone = rng.permutation(self.live())[: rng.integers(1, len(self.live()) + 1)]
        self.cache.free(gone)
        for slot in gone.tolist():
            self.history[slot] = self.source[slot] = None

    def copy(self, rng: np.random.Generator) -> None:
        """Beam search: some live rows become copies of others."""
        rows = self.live()
        dst = rng.permutation(rows)[: rng.integers(1, len(rows) + 1)]
        src = rng.choice(rows, size=len(dst))
        self.cache.copy_rows(dst, src)
        copied = [(list(self.history[s]), self.source[s]) for s in src.tolist()]
        for d, (h, tag) in zip(dst.tolist(), copied):
            self.history[d], self.source[d] = h, tag

    def compact(self, rng: np.random.Generator) -> None:
        """A compaction, in a random order, with spare slots."""
        keep, extra = rng.permutation(self.live()).tolist(), int(rng.integers(0, 3))
        self.cache.compact(np.array(keep, dtype=np.int64), extra)
        self._keep(keep, extra)
        self.compactions += 1

    def _keep(self, keep: list[int], extra: int) -> None:
        self.history = [self.history[k] for k in keep] + [None] * extra
        self.source = [self.source[k] for k in keep] + [None] * extra

    def act(
        self,
        rng: np.random.Generator,
        step: Callable[[], None],
        actions: int = 5,
        join_check: Callable[[list[int], int], None] | None = None,
        compact_check: Callable[[], None] | None = None,
    ) -> None:
        """One random action of ``actions`` (5 and up; those past 4 are decoder steps too): a join
        (always while no row is live), a leave, a beam copy, a compaction or a decoder step
        (``step``, which appends to every live history)."""
        action = rng.integers(actions)
        if action == 0 or not self.live():
            self.join(rng, join_check)
        elif action == 1:
            self.leave(rng)
        elif action == 2:
            self.copy(rng)
        elif action == 3:
            self.compact(rng)
            if compact_check is not None:
                compact_check()
        else:
            step()
