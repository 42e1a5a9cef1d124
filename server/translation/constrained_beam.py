"""Beam search that writes every glossary term: dynamic beam allocation (Post & Vilar 2018).

Each step, besides the best ``2K`` (beam, token) candidates of plain beam search
(``search.BeamSearch``), every live beam that still owes a term offers the tokens that begin
an owed term and its own best token (Post & Vilar's three candidate sources). Three rules
of this implementation: a beam that has begun a term only continues it (Hokamp & Liu 2017),
and those continuing tokens add 0 to its score, since the term is given and the search should
rank the words around it; where a beam's candidate is the model's own word for an owed term
(``TermTokens.cues``), the term's first token takes its place, scored as that word; where it
is the end token, the term's first token too, scored as the end (a term the model never
proposes goes at the end, as greedy places it: scored by the model, that token was so unlikely
that beams which put off the end with babble won); a term begun elsewhere is scored by the model.
A candidate's *bank* is how many of the terms its hypothesis has written (Post & Vilar count
the terms' tokens; with a begun term always finished, its tokens need no banks of their own,
and ``K`` beams over a few banks leave room for hypotheses that have written no term yet, where
one bank per token starved them at small ``K``), and the ``K`` beams of the next step are
taken from the banks in turns, the most advanced bank first and each bank's best candidate
first, so hypotheses that have met more terms are kept beside the model's favourites instead
of being crowded out by them (the allocation of the paper, with the slots of an empty bank
going to the others). A candidate that could no longer write its owed terms within
``max_new_tokens`` is dropped, and the end token is a candidate only once every term is
written, so every hypothesis returned contains every term.

Finishing and stopping are plain beam search's (``models/decoding.py``): an end-token
candidate finishes when it is among the best ``K`` candidates of the top bank; the search
stops when no beam is live, when ``K`` have finished and the best live beam cannot beat them,
or after ``max_new_tokens``. Without terms the search is :class:`~.search.BeamSearch` itself
(``searches.make_search`` only picks this class for a row with terms).
"""

from __future__ import annotations

import numpy as np

from .constraints import TermTracker
from .search import BeamSearch, Finished, StepLogits, normalized_score
from .terms import Constraint

Entry = tuple[float, int, int, TermTracker, int]  # (score, parent beam, token, its tracker, bank)


class ConstrainedBeamSearch(BeamSearch):
    """Beam search of one source whose hypotheses must contain ``constraints`` (module docstring)."""

    def __init__(
        self,
        beam_size: int,
        max_new_tokens: int,
        length_penalty: float,
        num_hypotheses: int,
        eos_id: int,
        constraints: tuple[Constraint, ...],
        prefix: tuple[int, ...] = (),
        hidden: int = 0,
    ) -> None:
        super().__init__(beam_size, max_new_tokens, length_penalty, num_hypotheses, eos_id, prefix, hidden)
        self.top_n = 0  # it reads whole rows (choose)
        self.trackers = [TermTracker(constraints)]  # one per live beam, in beam order
        self.total = self.trackers[0].owed  # the top bank: every term written

    def choose(self, step: StepLogits, rows: np.ndarray) -> tuple[list[int], list[int]]:
        # every token may advance a term, so the banks read whole rows of log-probabilities
        parents, tokens = self.advance(step.logp(rows))
        return tokens, parents

    def advance(self, logp: np.ndarray) -> tuple[list[int], list[int]]:
        """One step; logp (K_live, V) float32. Returns (parents, tokens) as BeamSearch does."""
        if self.step < len(self.prefix):
            return self._force(logp)
        entries = self._entries(logp)
        K = self.beam_size
        alive: list[tuple[list[int], float]] = []
        parents: list[int] = []
        trackers: list[TermTracker] = []
        top_rank = 0  # rank among the candidates of the top bank
        for value, beam, tok, _, bank in entries:
            if bank != self.total:
                continue
            if tok == self.eos_id and top_rank < K:
                tokens = self.beams[beam][0] + [tok]
                score = normalized_score(value, len(tokens), self.length_penalty)
                self.finished.append(Finished(tokens, value, score, "eos"))
            top_rank += 1
        for value, beam, tok, tracker, _ in self._allocate([e for e in entries if e[2] != self.eos_id], K):
            alive.append((self.beams[beam][0] + [tok], value))
            parents.append(beam)
            trackers.append(tracker)
        step, self.step = self.step, self.step + 1
        if not alive or not self._can_improve(alive[0]):
            self.done = True
        elif step == self.max_new_tokens - 1:
            self.finished.extend(
                Finished(t, lp, normalized_score(lp, len(t), self.length_penalty), "length")
                for (t, lp), tracker in zip(alive, trackers)
                if tracker.met
            )
            self.done = True
        if self.done:
            return [], []
        self.beams, self.trackers = alive, trackers
        return parents, [t[-1] for t, _ in alive]

    def _entries(self, logp: np.ndarray) -> list[Entry]:
        """Every feasible candidate, best first (ties: the lower beam, then the lower token)."""
        K = self.beam_size
        left = self.max_new_tokens - self.step  # tokens still to come, this one included
        at_start = self.step == len(self.prefix)
        scores = np.asarray([lp for _, lp in self.beams], dtype=np.float32)[:, None] + logp  # (K_live, V)
        V = scores.shape[1]
        flat = scores.ravel()  # (K_live * V,)
        n = min(2 * K, flat.size)
        top = np.argpartition(-flat, n - 1)[:n] if n < flat.size else np.arange(flat.size)
        tokens: dict[int, set[int]] = {}  # beam -> its candidate tokens
        for index in top.tolist():
            beam, tok = divmod(index, V)
            tokens.setdefault(beam, set()).add(tok)
        best = scores.argmax(axis=1).tolist()  # each beam's own best token
        given: set[int] = set()  # beams continuing a begun term
        instead: dict[tuple[int, int], int] = {}  # (beam, term token) -> the token whose score it takes
        for beam, tracker in enumerate(self.trackers):
            if tracker.met:
                continue
            if begun := tracker.begun():  # a term once begun is finished (Hokamp & Liu 2017)
                tokens[beam] = begun
                given.add(beam)
                continue
            mine = tokens.setdefault(beam, set())
            mine.update(tracker.candidates(at_start))
            mine.add(best[beam])
            for tok in list(mine):  # the model's own word for an owed term, or its end token: the
                if tok == self.eos_id:  # term instead, scored as that token (its spelling may be
                    term = tracker.start_of(tracker.first_owed(), at_start)[0]  # one the model never saw)
                elif (term := tracker.cued(tok, at_start)) is None:
                    continue
                mine.discard(tok)
                mine.add(term)
                if instead.get((beam, term), -1) < 0 or scores[beam, tok] > scores[beam, instead[beam, term]]:
                    instead[beam, term] = tok
        pairs = [(beam, tok) for beam, toks in tokens.items() for tok in toks]
        rows, cols = np.array(pairs, dtype=np.int64).T  # (P,), (P,)
        values = scores[rows, cols].tolist()
        for (beam, term), tok in instead.items():
            instead[beam, term] = max(float(scores[beam, tok]), float(scores[beam, term]))
        entries: list[Entry] = []
        for (beam, tok), value in zip(pairs, values):
            tracker = self.trackers[beam]
            if beam in given:  # the term's own tokens are given: scored 0, so beams are ranked
                value = self.beams[beam][1]  # by the words around the terms
            elif (beam, tok) in instead:
                value = instead[beam, tok]
            if tok == self.eos_id:
                if tracker.met:
                    entries.append((value, beam, tok, tracker, self.total))
                continue
            after = tracker if tracker.met else tracker.advance(tok)
            if after.need() <= left - 1:  # it can still write every owed term
                entries.append((value, beam, tok, after, self.total - after.owed))
        entries.sort(key=lambda e: (-e[0], e[1], e[2]))
        return entries

    @staticmethod
    def _allocate(entries: list[Entry], K: int) -> list[Entry]:
        """``K`` entries taken from the banks in turns, the most advanced bank first, each
        bank's best first; then ordered best first (the module docstring)."""
        banks: dict[int, list[Entry]] = {}
        for entry in entries:  # best first within each bank
            banks.setdefault(entry[4], []).append(entry)
        queues = [banks[b][::-1] for b in sorted(banks, reverse=True)]  # popped from the end
        chosen: list[Entry] = []
        while len(chosen) < K and any(queues):
            for queue in queues:
                if queue and len(chosen) < K:
                    chosen.append(queue.pop())
        chosen.sort(key=lambda e: (-e[0], e[1], e[2]))
        return chosen
