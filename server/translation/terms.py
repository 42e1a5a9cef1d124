"""Glossary terms as the decoder sees them: target token sequences a translation must contain.

The translation service finds a request's terms in each sentence and tokenises their targets
(``server/service/glossary.py``); ``DecodeOptions.constraints`` carries them to the engine,
whose searches write every one (``constraints.py``, ``constrained_beam.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

Tokens = tuple[int, ...]


@dataclass(frozen=True)
class TermTokens:
    """A glossary term's target as token ids. ``spaced``: after a word boundary (a space
    before it), usable anywhere; ``initial``: at the start of the output (no space before;
    the same as ``spaced`` for a SentencePiece model, whose word marker is in both)."""

    source: str
    target: str
    spaced: Tokens
    initial: Tokens
    # Word-start tokens that spell the beginning of the source or the target term (case and
    # accents aside: "ĠMär" for March -> MÄRZ): where greedy search would write one of them,
    # it writes the term instead (``constraints.GuidedSearch``).
    cues: frozenset[int] = frozenset()
    initial_cues: frozenset[int] = frozenset()  # the same at the start of the output (no space marker)

    @property
    def variants(self) -> tuple[Tokens, ...]:
        return (self.spaced,) if self.initial == self.spaced else (self.spaced, self.initial)

    @property
    def cost(self) -> int:
        """Tokens it takes anywhere in the output (the spaced form)."""
        return len(self.spaced)


@dataclass(frozen=True)
class Constraint:
    """``term`` must appear ``count`` times in the output (its source term occurs that often)."""

    term: TermTokens
    count: int = 1


def constraints_cost(constraints: tuple[Constraint, ...]) -> int:
    """Tokens the terms take together at most: what must fit within max_new_tokens."""
    return sum(c.count * c.term.cost for c in constraints)
