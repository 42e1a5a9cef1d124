"""Per-segment results -> the document's n-best hypotheses.

n-best of a document: the ``k`` combinations of per-segment hypotheses (one per segment)
with the highest sum of per-segment scores, best first; the best is every segment's best.
A document hypothesis's score is that sum and its log-probability the sum of theirs (the
segments are translated independently); for a one-segment text both are the segment's own.
The streams of a document's segments are put in order by ``service.document_stream.DocumentEvents``.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence


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
