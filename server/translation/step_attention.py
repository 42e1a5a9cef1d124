"""The attention a job's decoder steps kept (``DecodeOptions.return_attention``): each step's
row of the decoder's ``step_attention`` output (the cross-attention of the layer word alignments
read, heads averaged), over the job's own source tokens.

Row k of a hypothesis is the step that chose its k-th token (forced prefix included), which is
what the aligner graph computes for it teacher-forced. A search of one row (greedy, sampling)
has one hypothesis: a row per step. Beam search re-chooses its rows every step, so the rows are
kept per hypothesis prefix: the step run on a beam whose tokens were ``t`` gives every
hypothesis that continues ``t`` its rows up to there, those of ``t[:-1]`` and this step's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .search import Search


class StepAttention:
    """What a job's steps kept: see the module docstring. ``beams``: the job's search re-chooses
    its rows (beam search)."""

    __slots__ = ("rows", "by_prefix")

    def __init__(self, beams: bool) -> None:
        self.rows: list[np.ndarray] = []  # one row's search: a row per step
        self.by_prefix: dict[tuple[int, ...], list[np.ndarray]] | None = {} if beams else None

    def add(self, search: Search, attention: np.ndarray, rows: np.ndarray, length: int) -> None:
        """This step's rows: ``attention`` (B, 1, L) the step's output, ``rows`` the job's rows in
        the batch (in the order of its beams), ``length`` its source tokens."""
        if self.by_prefix is None:
            self.rows.append(attention[rows[0], -1, :length].copy())
            return
        for (tokens, _), row in zip(search.beams, rows.tolist()):  # type: ignore[attr-defined]
            key = tuple(tokens)
            before = self.by_prefix.get(key[:-1], []) if key else []
            self.by_prefix[key] = [*before, attention[row, -1, :length].copy()]

    def of(self, tokens: Sequence[int]) -> np.ndarray | None:
        """The (steps, L) attention of the hypothesis ``tokens`` (the ids the decoder was fed and
        chose, prefix included); None where the steps did not keep it."""
        rows = self.rows if self.by_prefix is None else self.by_prefix.get(tuple(tokens[:-1]))
        return np.stack(rows) if rows and len(rows) == len(tokens) else None
