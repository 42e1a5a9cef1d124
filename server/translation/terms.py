"""Glossary terms as the decoder sees them: target token sequences a translation must contain.

The translation service finds a request's terms in each sentence and tokenises their targets
(``server/service/glossary.py``); ``DecodeOptions.constraints`` carries them to the engine,
whose searches write every one (``constraints.py``, ``constrained_beam.py``).

A term may be written through a *surrogate* (``server/service/surrogates.py``): the search
writes the model's own rendering of the source term (``spaced`` / ``initial``), so the decoder
is only ever fed words it writes itself, and the finished hypothesis has each span that paid
the term replaced by the target's tokens (``term_swap.py``). A model that was never trained on
the target's spelling (capitals, an English name kept in German) goes on after the term as it
would after its own word, instead of losing the thread.
"""

from __future__ import annotations

from dataclasses import dataclass

Tokens = tuple[int, ...]


@dataclass(frozen=True)
class TermTokens:
    """A glossary term as the search writes it. ``spaced``: after a word boundary (a space
    before it), usable anywhere; ``initial``: at the start of the output (no space before;
    the same as ``spaced`` for a SentencePiece model, whose word marker is in both). They are
    the target's tokens, or its surrogate's (``target_tokens`` set)."""

    source: str
    target: str
    spaced: Tokens
    initial: Tokens
    # Word-start tokens that spell the beginning of the source or the target term (case and
    # accents aside: "ĠMär" for March -> MÄRZ): where greedy search would write one of them,
    # it writes the term instead (``constraints.GuidedSearch``).
    cues: frozenset[int] = frozenset()
    initial_cues: frozenset[int] = frozenset()  # the same at the start of the output (no space marker)
    # With a surrogate: its text, and the target's own (spaced, initial) tokens, which replace a
    # span of ``spaced`` / ``initial`` that paid the term. Only the surrogate pays it: it is used
    # where the model would not write the target by itself (``server/service/surrogates.py``).
    surrogate: str = ""
    target_tokens: tuple[Tokens, Tokens] | None = None

    @property
    def variants(self) -> tuple[Tokens, ...]:
        """The sequences the search writes and that pay the term (spaced, and initial where it differs)."""
        return (self.spaced,) if self.initial == self.spaced else (self.spaced, self.initial)

    def output(self, variant: int) -> Tokens | None:
        """What replaces ``variants[variant]`` in the finished hypothesis (None: it stays)."""
        if self.target_tokens is None:
            return None
        return self.target_tokens[variant]  # the spaced target for the spaced form, the initial for the initial

    @property
    def cost(self) -> int:
        """Tokens the search takes to write it anywhere (the spaced form)."""
        return len(self.spaced)

    @property
    def growth(self) -> int:
        """Tokens the output gains at most where a written form is replaced by the target's."""
        if self.target_tokens is None:
            return 0
        return max(0, *(len(self.target_tokens[v]) - len(form) for v, form in enumerate(self.variants)))


@dataclass(frozen=True)
class Constraint:
    """``term`` must appear ``count`` times in the output (its source term occurs that often)."""

    term: TermTokens
    count: int = 1


def constraints_cost(constraints: tuple[Constraint, ...]) -> int:
    """Tokens the terms take together at most in the output (each the longer of its written form
    and what replaces it): what must fit within max_new_tokens."""
    return sum(c.count * (c.term.cost + c.term.growth) for c in constraints)


def constraints_growth(constraints: tuple[Constraint, ...]) -> int:
    """Tokens the output gains at most when the surrogates are replaced: the search writes that
    many fewer than max_new_tokens, so the finished output keeps within it."""
    return sum(c.count * c.term.growth for c in constraints)
