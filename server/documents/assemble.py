"""Per-segment results -> the document's: n-best hypotheses and streams.

n-best of a document: the ``k`` combinations of per-segment hypotheses (one per segment)
with the highest sum of per-segment scores, best first; the best is every segment's best.
A document hypothesis's score is that sum and its log-probability the sum of theirs (the
segments are translated independently); for a one-segment text both are the segment's own.

A stream of a document emits its text in order: the separator, then the first segment's
deltas as they are generated, its separator, the next segment (whatever of it was generated
meanwhile at once, the rest as it comes), and so on. Segments are decoded together, so a
later segment is often complete by the time its turn comes. html segments are emitted when
complete (their rendering escapes text and restores entity spellings, which a delta cannot
know). The emitted pieces add up to ``Document.join`` of the final translations.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from .document import Document


def best_combinations(scores: Sequence[Sequence[float]], k: int) -> list[tuple[int, ...]]:
    """The ``k`` index tuples (one hypothesis index per segment) with the highest sums of
    ``scores[segment][hypothesis]``, best first (ties: lower indices first)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if any(len(s) == 0 for s in scores):
        raise ValueError("every segment needs at least one hypothesis")
    order = [sorted(range(len(s)), key=lambda j, s=s: (-s[j], j)) for s in scores]  # best first per segment
    ranked = [[s[j] for j in o] for s, o in zip(scores, order)]
    start = (0,) * len(scores)
    heap = [(-sum(r[0] for r in ranked), start)]
    seen = {start}
    out: list[tuple[int, ...]] = []
    while heap and len(out) < k:
        negative, ranks = heapq.heappop(heap)
        out.append(tuple(o[r] for o, r in zip(order, ranks)))
        for i, r in enumerate(ranks):  # the next-best choice in one segment
            if r + 1 < len(ranked[i]):
                nxt = (*ranks[:i], r + 1, *ranks[i + 1 :])
                if nxt not in seen:
                    seen.add(nxt)
                    heapq.heappush(heap, (negative + ranked[i][r] - ranked[i][r + 1], nxt))
    return out


class DocumentStream:
    """Orders the deltas of a document's segments (see the module docstring). ``push`` and
    ``finish`` return the text that may be emitted now (maybe ""); with every segment finished,
    the returned pieces add up to ``document.join`` of the translations."""

    def __init__(self, document: Document) -> None:
        self.document = document
        self.live = not any(s.html for s in document.segments)  # html: whole segments
        n = len(document.segments)
        self._generated = [""] * n
        self._emitted = [0] * n  # characters of _generated[i] already emitted
        self._final: list[str | None] = [None] * n
        self._current = 0  # the first segment not yet complete and emitted
        self._started = False

    @property
    def done(self) -> bool:
        return self._started and self._current == len(self.document.segments)

    def start(self) -> str:
        """What comes before any segment: the first separator (all of a text without segments)."""
        return self._drain()

    def push(self, index: int, delta: str) -> str:
        self._generated[index] += delta
        return self._drain()

    def finish(self, index: int, translation: str) -> str:
        self._final[index] = translation
        return self._drain()

    def _drain(self) -> str:
        out = []
        if not self._started:
            self._started = True
            out.append(self.document.separators[0])
        while self._current < len(self._final):
            i = self._current
            if self.live:
                out.append(self._generated[i][self._emitted[i] :])
                self._emitted[i] = len(self._generated[i])
            final = self._final[i]
            if final is None:
                break
            if not self.live:
                out.append(self.document.segments[i].render(final))
            elif final.startswith(self._generated[i]):  # the deltas were a prefix: the rest
                out.append(final[self._emitted[i] :])
            out.append(self.document.separators[i + 1])
            self._current += 1
        return "".join(out)
