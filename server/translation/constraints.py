"""Positive lexical constraints: target terms every hypothesis must contain (glossaries).

A :class:`~.terms.Constraint` is one glossary term a sentence's translation must contain ``count``
times (once per occurrence of its source term), as one of its token sequences
(:class:`~.terms.TermTokens`: the target after a space, and at the very start of the output,
where a byte-level BPE spells it without the space marker; the service tokenises them,
``server/service/glossary.py``). The decoder's own tokens are matched against them as they
are generated, so a term the model writes by itself counts; the searches make sure every
term is written before the hypothesis ends:

- :class:`TermTracker` follows one hypothesis: the occurrences still owed, the partial
  matches in progress (an incremental multi-pattern match over the generated tokens), and
  ``need``, the fewest tokens that can still pay every term. ``need`` falls by one with the
  right token (:meth:`TermTracker.forcing`), so a search that writes no token after which
  ``need`` exceeds the tokens left (that one instead) meets every term within
  ``max_new_tokens`` (the service refuses a sentence whose terms cannot fit;
  ``tests/server/translation/test_constraints.py`` checks it on random models).
- Greedy and sampling (:class:`GuidedSearch`): the chooser's token, except that a term,
  once begun, is continued to its end (Hokamp & Liu 2017: a constraint once started is
  finished); an owed term is begun where the model is about to write its own word for it
  (``TermTokens.cues``: "ĠMär" for March -> MÄRZ, "Montag" for Monday kept as Monday) or
  finds the term's first token nearly as likely as its own choice (``PLAUSIBLE``); the end
  token is never chosen while a term is owed (the term is begun instead, so a term the model
  never proposes comes at the end); and where the token it would write leaves too few tokens
  for the terms owed (``need`` after it over the tokens left), it writes the one that lowers
  ``need`` instead.
- Beam search (:class:`~.constrained_beam.ConstrainedBeamSearch`): Post & Vilar 2018's dynamic
  beam allocation.

Terms are matched on token ids, so a term found in the output decodes to its exact target
string (checked when the term is tokenised).
"""

from __future__ import annotations

import numpy as np

from .search import Argmax, Sampler, SingleSearch, StepLogits
from .terms import Constraint, Tokens

# Greedy begins an owed term where its first token's logit is within this of the chosen token's
# (e^-2: at least 0.14 times as likely): where the model would nearly write it itself, rather
# than at the end. On the bundled translator, whose distributions are peaked, margins from 0 to
# 5 gave the same outputs (benchmarks/glossary.py's quality rows): its terms are placed by the
# cues; the margin is for models that spread their probability more.
PLAUSIBLE = 2.0
Partial = tuple[int, int, int]  # (constraint index, variant index, tokens matched so far)


class TermTracker:
    """Which terms one hypothesis still owes (see the module docstring). Immutable states
    (``left``, ``partials``) so that beams can share their parents' without copies."""

    __slots__ = ("constraints", "variants", "cost", "firsts", "left", "partials", "_need")

    def __init__(self, constraints: tuple[Constraint, ...]) -> None:
        self.constraints = constraints
        self.variants = [c.term.variants for c in constraints]
        self.cost = [c.term.cost for c in constraints]
        firsts: dict[int, list[tuple[int, int]]] = {}
        for ci, variants in enumerate(self.variants):
            for vi, seq in enumerate(variants):
                firsts.setdefault(seq[0], []).append((ci, vi))
        self.firsts = firsts  # first token -> the (constraint, variant) pairs it begins
        self.left: tuple[int, ...] = tuple(c.count for c in constraints)  # occurrences still owed
        self.partials: tuple[Partial, ...] = ()
        self._need: int | None = None  # computed once per state

    def copy(self) -> TermTracker:
        other = object.__new__(TermTracker)
        other.constraints, other.variants, other.cost, other.firsts = (
            self.constraints,
            self.variants,
            self.cost,
            self.firsts,
        )
        other.left, other.partials, other._need = self.left, self.partials, None
        return other

    @property
    def met(self) -> bool:
        return not any(self.left)

    @property
    def owed(self) -> int:
        """Occurrences of terms still to write."""
        return sum(self.left)

    def need(self) -> int:
        """The fewest tokens that still pay every owed term: each at its cost, less what the
        most advanced partial match saves by being finished rather than begun again."""
        if self._need is None:
            total = sum(n * c for n, c in zip(self.left, self.cost))
            self._need = total - self._best_saving()[0] if total else 0
        return self._need

    def _best_saving(self) -> tuple[int, Partial | None]:
        best, which = 0, None
        for ci, vi, k in self.partials:
            saving = self.cost[ci] - (len(self.variants[ci][vi]) - k)
            if saving > best:
                best, which = saving, (ci, vi, k)
        return best, which

    def advance(self, token: int) -> TermTracker:
        """The state after ``token`` (a new tracker; this one is unchanged)."""
        left = list(self.left)
        done: set[int] = set()  # constraints paid by this token (once each)
        partials: list[Partial] = []
        for ci, vi, k in self.partials:
            seq = self.variants[ci][vi]
            if seq[k] != token:
                continue
            if k + 1 == len(seq):
                done.add(ci)
            else:
                partials.append((ci, vi, k + 1))
        for ci, vi in self.firsts.get(token, ()):
            if not left[ci]:
                continue
            if len(self.variants[ci][vi]) == 1:
                done.add(ci)
            else:
                partials.append((ci, vi, 1))
        for ci in done:
            if left[ci]:
                left[ci] -= 1
        other = self.copy()
        other.left = tuple(left)
        other.partials = tuple(p for p in partials if left[p[0]])
        return other

    def forcing(self, at_start: bool) -> int:
        """A token that lowers ``need`` by one (some term is owed): the next token of the most
        advanced partial match, else the first of the first owed term (its start-of-output
        form at the start, when shorter)."""
        saving, partial = self._best_saving()
        if partial is not None:
            ci, vi, k = partial
            return self.variants[ci][vi][k]
        return self.start_of(self.first_owed(), at_start)[0]

    def first_owed(self) -> int:
        return next(ci for ci, n in enumerate(self.left) if n)

    def start_of(self, ci: int, at_start: bool) -> Tokens:
        term = self.constraints[ci].term
        return term.initial if at_start and len(term.initial) <= len(term.spaced) else term.spaced

    def begun(self) -> set[int]:
        """The next tokens of the owed terms this hypothesis has begun (empty: none begun)."""
        return {self.variants[ci][vi][k] for ci, vi, k in self.partials}

    def cued(self, token: int, at_start: bool) -> int | None:
        """The first token of the first owed term that ``token`` is a cue of (``TermTokens.cues``:
        the model's own word for it), or None."""
        for ci, n in enumerate(self.left):
            term = self.constraints[ci].term
            if n and (token in term.cues or (at_start and token in term.initial_cues)):
                tokens = self.start_of(ci, at_start)
                return tokens[0] if tokens[0] != token else None
        return None

    def candidates(self, at_start: bool) -> set[int]:
        """Every token that begins or continues an owed term (beam search's extra candidates)."""
        out = {self.variants[ci][vi][k] for ci, vi, k in self.partials}
        for ci, n in enumerate(self.left):
            if n:
                out.add(self.constraints[ci].term.spaced[0])
                if at_start:
                    out.add(self.constraints[ci].term.initial[0])
        return out


class GuidedSearch(SingleSearch):
    """Greedy or sampling that writes every term (see the module docstring). After the forced
    prefix: a begun term is continued to its end; the end token is replaced by the start of
    the first owed term; a term is begun when ``need`` reaches the tokens left."""

    def __init__(
        self,
        chooser: Argmax | Sampler,
        eos_id: int,
        max_new_tokens: int,
        constraints: tuple[Constraint, ...],
        prefix: tuple[int, ...] = (),
        scores: bool = True,
        hidden: int = 0,
    ) -> None:
        super().__init__(chooser, eos_id, max_new_tokens, prefix, scores, hidden)
        self.argmax_only = False  # the terms read the row's logits beyond its argmax (guide)
        self.terms = TermTracker(constraints)
        self.begun: Tokens = ()  # the rest of a term being written

    def next(self, step: StepLogits, row: int) -> int:
        n = len(self.tokens)
        if n < len(self.prefix):
            return super().next(step, row)
        chosen = self.chooser.choose(step, row)
        tok, self.terms = self.guide(chosen, step.logits[row], self.max_new_tokens - n, n == len(self.prefix))
        self.push(tok, step.token_logp(row, tok) if self.needs_scores else 0.0)
        return tok

    def guide(self, chosen: int, logits: np.ndarray, left: int, at_start: bool) -> tuple[int, TermTracker]:
        """The token to write and the terms' state after it, given the chooser's ``chosen``, the
        row's ``logits`` (V,) and ``left`` tokens to go (this one included)."""
        terms = self.terms
        if terms.met:
            return chosen, terms
        tok = self._preferred(chosen, logits, at_start)
        after = terms.advance(tok)
        if after.need() > left - 1:  # it would leave too few tokens for the terms
            self.begun = ()
            tok = terms.forcing(at_start)  # the token that lowers need by one
            after = terms.advance(tok)
        return tok, after

    def _preferred(self, chosen: int, logits: np.ndarray, at_start: bool) -> int:
        terms = self.terms
        if self.begun:
            tok, self.begun = self.begun[0], self.begun[1:]
            return tok
        if chosen == self.eos_id:  # not before every term is written: begin the first owed one
            tokens = terms.start_of(terms.first_owed(), at_start)
            self.begun = tokens[1:]
            return tokens[0]
        for ci, vi in terms.firsts.get(chosen, ()):
            if terms.left[ci]:  # the model begins a term by itself: it is finished (Hokamp & Liu)
                self.begun = terms.variants[ci][vi][1:]
                return chosen
        floor = logits[chosen] - PLAUSIBLE
        for ci, n in enumerate(terms.left):
            if not n:
                continue
            tokens = terms.start_of(ci, at_start)
            # the model is about to write its own word for the term, or finds the term nearly as likely
            term = terms.constraints[ci].term
            cued = chosen in term.cues or (at_start and chosen in term.initial_cues)
            if cued or logits[tokens[0]] >= floor:
                self.begun = tokens[1:]
                return tokens[0]
        return chosen
