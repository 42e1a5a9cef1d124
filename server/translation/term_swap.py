"""Surrogates out, targets in: a hypothesis's tokens with each span that paid a term written
through a surrogate (``terms.py``) replaced by the target's tokens.

The spans are found as the searches found them: a :class:`~.constraints.TermTracker` follows
the tokens, and where it counts an occurrence of a term as paid by one of its written forms,
those tokens make way for the target's (the spaced target for the spaced form, the initial for
the initial). Spans the tracker does not count (a term written more often than its source term
occurs) stay as the model wrote them.

:class:`TermSwap` works token by token, for streams: it holds back the tokens of a surrogate
match in progress until it completes (and gives the target's) or breaks off (and gives them
as they were), so a stream never shows a surrogate. :func:`swap` is the same over a finished
hypothesis, so a stream's tokens and the final hypothesis's agree.

A sentence's terms are swapped only when their spans cannot overlap (:func:`separable`: no
written form of a surrogate is inside another term's, or ends where another begins); the
service writes the terms of a sentence where they could as their targets instead.
"""

from __future__ import annotations

from .constraints import TermTracker
from .terms import Constraint, Tokens


class TermSwap:
    """Tokens in, output tokens out (see the module docstring). ``skip``: leading tokens passed
    on as they are (a forced prefix, which the searches do not match either)."""

    def __init__(self, constraints: tuple[Constraint, ...], skip: int = 0) -> None:
        self.tracker = TermTracker(constraints)
        # (constraint, variant) -> the tokens that replace it, for the written forms of surrogates
        self.outputs: dict[tuple[int, int], Tokens] = {
            (ci, vi): out
            for ci, c in enumerate(constraints)
            for vi in range(len(c.term.variants))
            if (out := c.term.output(vi)) is not None
        }
        self.skip = skip
        self.pending: list[int] = []  # tokens not given out yet: a surrogate match in progress

    def push(self, token: int) -> list[int]:
        """The output tokens that ``token`` makes final (maybe none, maybe several)."""
        if self.skip:
            self.skip -= 1
            return [token]
        before = self.tracker
        self.tracker = after = before.advance(token)
        self.pending.append(token)
        for ci, (owed, left) in enumerate(zip(before.left, after.left)):
            if left < owed and (paid := self._paid(before, ci, token)) is not None:
                seq, out = paid
                self.pending[len(self.pending) - len(seq) :] = out
        hold = max((k for ci, vi, k in after.partials if (ci, vi) in self.outputs), default=0)
        cut = len(self.pending) - hold
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out

    def flush(self) -> list[int]:
        """What is still held (a match the hypothesis ended inside): given out as it is."""
        out, self.pending = self.pending, []
        return out

    def _paid(self, before: TermTracker, ci: int, token: int) -> tuple[Tokens, Tokens] | None:
        """The written form of a surrogate that ``token`` completed for constraint ``ci`` and what
        replaces it; None when the term was paid otherwise (its target's own tokens)."""
        variants = before.variants[ci]
        for vi, seq in enumerate(variants):
            if (ci, vi) not in self.outputs or seq[-1] != token:
                continue
            if len(seq) == 1 or (ci, vi, len(seq) - 1) in before.partials:
                return seq, self.outputs[ci, vi]
        return None


def swap(constraints: tuple[Constraint, ...], tokens: list[int], skip: int = 0) -> list[int]:
    """``tokens`` with the surrogates' spans replaced (the module docstring); the same list when
    no term has a surrogate."""
    if not any(c.term.target_tokens is not None for c in constraints):
        return tokens
    swapper = TermSwap(constraints, skip)
    out = [t for token in tokens for t in swapper.push(token)]
    return out + swapper.flush()


def separable(constraints: tuple[Constraint, ...]) -> bool:
    """Whether the spans that pay the terms can never overlap where a surrogate's is swapped: no
    sequence pays two terms, and no written form of a surrogate lies inside another term's
    sequence (or it inside the form) or has a proper end that begins it (or the reverse).
    Within one term owed once, its forms may: the first span that pays it is the only one."""
    if not any(c.term.target_tokens is not None for c in constraints):
        return True
    owner: dict[Tokens, int] = {}
    for ci, c in enumerate(constraints):
        for v in c.term.variants:
            if owner.setdefault(v, ci) != ci:
                return False
    for ci, c in enumerate(constraints):
        if c.term.target_tokens is None:
            continue
        for a in c.term.variants:
            for b, bi in owner.items():
                if bi == ci and c.count == 1:
                    continue
                if (a != b and (_inside(a, b) or _inside(b, a))) or _overlap(a, b) or _overlap(b, a):
                    return False
    return True


def _inside(a: Tokens, b: Tokens) -> bool:
    return any(b[i : i + len(a)] == a for i in range(len(b) - len(a) + 1))


def _overlap(a: Tokens, b: Tokens) -> bool:
    """A proper suffix of ``a`` is a prefix of ``b``."""
    return any(a[-k:] == b[:k] for k in range(1, min(len(a) - 1, len(b)) + 1))
