"""Choosing tokens from a decoder step's logits, in numpy: greedy, sampling, beam search.

Greedy and beam search follow ``attnserve.models.decoding`` (the PyTorch reference
whose tokens the server must reproduce) rule for rule:

- log-probabilities are ``log_softmax`` over the whole vocabulary, after which pad and
  start tokens are set to -inf (never generated); greedy needs only the argmax of the
  masked logits, so the log-softmax is computed only when scores are asked for;
- greedy: argmax, ties to the lowest id; score = logprob = sum of chosen log-probs;
- beam search (K beams): the best 2K (score, beam, token) candidates, best first; an end
  token among the best K finishes a hypothesis (one below them is dropped), any other
  candidate joins the next beams until there are K; rank by ``logprob / len **
  length_penalty``; stop when no beam is live, when K hypotheses have finished and the best
  live beam (scored at its current length) is no better than the K-th best of them
  (transformers' default, ``early_stopping=False``), or at ``max_new_tokens``.

Forced prefix (``DecodeOptions.prefix_ids``): while a hypothesis is shorter than its
prefix, every search takes the next prefix token instead of choosing one (no draw from
the sampler's generator). The first ``hide_prefix`` forced ids (M2M100 / NLLB's
target-language token, which the server does not return) add 0 to the log-probability, as
transformers' ``forced_bos_token_id`` gives them; the others (a user's ``target_prefix``) add
the model's log-probability, as CTranslate2 counts a target prefix's; the reference decoder in
``models/decoding.py`` scores them the same way, so beam search ranks hypotheses exactly as the
reference does. Beam search keeps its single start beam through the prefix and expands after
it. With an empty prefix nothing changes.

One interface for all three (:class:`Search`): after a decoder step the scheduler hands
each job's search the step's logits (:class:`StepLogits`: log-normalisers, the batch's argmax
and each row's best beam candidates, computed once for every row) and the job's rows; the search returns the next input
token of each row and, for beam search, which row each one continues. Greedy and sampling
are one :class:`SingleSearch` with the token chooser injected (:class:`Argmax`,
:class:`Sampler`), so the step never branches on the mode.

Sampling (no reference decoder): logits / temperature, then top-k, then top-p (the
smallest set of most likely tokens whose probability reaches ``top_p``, Holtzman et
al. 2020), then one draw from the renormalised distribution with the text's own
``numpy.random.Generator``. The reported logprob is the model's (untempered) one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .step_logits import StepLogits


def normalized_score(logprob: float, length: int, length_penalty: float) -> float:
    """Length-normalised score (models/decoding.py; Wu et al. 2016)."""
    return logprob / (max(length, 1) ** length_penalty)


@dataclass
class Finished:
    tokens: list[int]
    logprob: float
    score: float
    finish_reason: str  # "eos" | "length"
    written: list[int] | None = None  # the tokens the decoder was fed, where glossary surrogates were swapped out


class Search:
    """A job's token choice. ``in_place``: it holds one row that continues itself (greedy,
    sampling); otherwise each step says which row every next row continues (beam search)."""

    in_place = True
    streams = True  # its tokens are final as they come (a stream can show them)
    needs_scores = True  # the step must compute log-probabilities
    uses_argmax = False  # the step must compute the batch's argmax
    argmax_only = False  # nothing but its rows' argmax (pad and start excluded) is read from a step
    top_n = 0  # how many best ids of each row it reads (StepLogits.top); 0: none
    done = False

    def choose(self, step: StepLogits, rows: np.ndarray) -> tuple[list[int], list[int] | None]:
        """(next input token per row, parents or None when rows continue in place)."""
        raise NotImplementedError

    def result(self) -> list[Finished]:
        raise NotImplementedError


class Argmax:
    """Greedy: the most likely token (the batch's argmax, computed once per step)."""

    uses_argmax = True

    def choose(self, step: StepLogits, row: int) -> int:
        return step.best[row]


class Sampler:
    """A draw from temperature / top-k / top-p filtered logits with the job's own generator."""

    uses_argmax = False

    def __init__(self, temperature: float, top_k: int, top_p: float, rng: np.random.Generator) -> None:
        self.temperature, self.top_k, self.top_p, self.rng = temperature, top_k, top_p, rng

    def choose(self, step: StepLogits, row: int) -> int:
        return sample_token(step.logits[row], self.temperature, self.top_k, self.top_p, self.rng)


class SingleSearch(Search):
    """One row: the forced prefix, then the chooser's token, until the end token or max_new_tokens."""

    def __init__(
        self,
        chooser: Argmax | Sampler,
        eos_id: int,
        max_new_tokens: int,
        prefix: tuple[int, ...] = (),
        scores=True,
        hidden: int = 0,
    ) -> None:
        self.chooser = chooser
        self.hidden = hidden  # leading prefix ids scored 0 (the hidden language token)
        self.eos_id = eos_id
        self.max_new_tokens = max_new_tokens
        self.prefix = prefix
        self.needs_scores = scores
        self.uses_argmax = chooser.uses_argmax
        self.argmax_only = chooser.uses_argmax and not scores
        self.tokens: list[int] = []
        self.logprob = 0.0
        self.done = False

    def forced(self) -> int | None:
        """The next token when it is forced (still inside the prefix), else None."""
        n = len(self.tokens)
        return self.prefix[n] if n < len(self.prefix) else None

    def choose(self, step: StepLogits, rows: np.ndarray) -> tuple[list[int], None]:
        return [self.next(step, int(rows[0]))], None

    def next(self, step: StepLogits, row: int) -> int:
        """The token for ``row`` (its only row, continuing in place), recorded: what ``choose``
        returns, without the lists (the scheduler's per-step path calls this once per job)."""
        n = len(self.tokens)
        if n < len(self.prefix):  # forced: scored as the module docstring says
            tok = self.prefix[n]
            scored = self.needs_scores and n >= self.hidden
        else:
            tok = self.chooser.choose(step, row)
            scored = self.needs_scores
        self.push(tok, step.token_logp(row, tok) if scored else 0.0)
        return tok

    def push(self, token: int, logprob: float) -> bool:
        """Record one token; True when the sequence is complete."""
        self.tokens.append(token)
        self.logprob += logprob
        self.done = token == self.eos_id or len(self.tokens) >= self.max_new_tokens
        return self.done

    @property
    def finish_reason(self) -> str:
        return "eos" if self.tokens and self.tokens[-1] == self.eos_id else "length"

    def result(self) -> list[Finished]:
        return [Finished(self.tokens, self.logprob, self.logprob, self.finish_reason)]


def sample_token(logits: np.ndarray, temperature: float, top_k: int, top_p: float, rng: np.random.Generator) -> int:
    """One draw from ``logits`` (V,) float32 with pad/bos already at -inf."""
    x = logits.astype(np.float64) / temperature  # (V,)
    V = x.shape[0]
    if 0 < top_k < V:
        cand = np.argpartition(-x, top_k - 1)[:top_k]  # (k,) the k most likely, unordered
    else:
        cand = np.flatnonzero(x > -np.inf)  # (V',)
    xc = x[cand]
    if top_p < 1.0:
        cand, xc = _nucleus(cand, xc, top_p)
    p = np.exp(xc - xc.max())  # (n,)
    c = np.cumsum(p)
    j = int(np.searchsorted(c, rng.random() * c[-1], side="right"))
    return int(cand[min(j, len(cand) - 1)])


def _nucleus(cand: np.ndarray, xc: np.ndarray, top_p: float) -> tuple[np.ndarray, np.ndarray]:
    """The smallest most-likely prefix of ``cand`` whose probability reaches ``top_p``.

    Sorts only the top ``n`` candidates, doubling ``n`` until their mass reaches top_p,
    so a peaked distribution costs O(V) rather than a full sort.
    """
    total = np.exp(xc - xc.max()).sum()
    n = min(64, len(cand))
    while True:
        top = np.argpartition(-xc, n - 1)[:n] if n < len(cand) else np.arange(len(cand))
        top = top[np.argsort(-xc[top], kind="stable")]  # (n,) best first
        cum = np.cumsum(np.exp(xc[top] - xc.max())) / total  # (n,)
        if cum[-1] >= top_p or n == len(cand):
            keep = min(int(np.searchsorted(cum, top_p, side="left")) + 1, n)
            return cand[top[:keep]], xc[top[:keep]]
        n = min(2 * n, len(cand))


class BeamSearch(Search):
    """Beam search of one source; its live beams are rows of the decode batch."""

    in_place = False
    streams = False

    def __init__(
        self,
        beam_size: int,
        max_new_tokens: int,
        length_penalty: float,
        num_hypotheses: int,
        eos_id: int,
        prefix: tuple[int, ...] = (),
        hidden: int = 0,
    ) -> None:
        self.prefix = prefix
        self.hidden = hidden  # leading prefix ids scored 0 (the hidden language token; models/decoding.py)
        self.beam_size = beam_size
        self.max_new_tokens = max_new_tokens
        self.length_penalty = length_penalty
        self.num_hypotheses = num_hypotheses
        self.eos_id = eos_id
        self.top_n = 2 * beam_size
        self.beams: list[tuple[list[int], float]] = [([], 0.0)]  # (tokens, logprob); one beam at first
        self.finished: list[Finished] = []
        self.step = 0
        self.done = False

    def choose(self, step: StepLogits, rows: np.ndarray) -> tuple[list[int], list[int]]:
        if self.step < len(self.prefix):
            parents, tokens = self._force(step.logp(rows[:1]))
        else:  # the 2K best of each row from the step's one partition; logp only for those
            base = np.asarray([lp for _, lp in self.beams], dtype=np.float32)  # (K_live,)
            ids, scores = step.candidates(rows, self.top_n, base)  # (K_live, n) each
            parents, tokens = self._expand(ids, scores)
        return tokens, parents

    def advance(self, logp: np.ndarray) -> tuple[list[int], list[int]]:
        """One step. logp: (K_live, V) float32 log-probs (pad/bos at -inf).

        Returns (parents, tokens) of the next live beams: row ``i`` continues beam
        ``parents[i]`` with token ``tokens[i]``. Empty when the search is done.
        """
        if self.step < len(self.prefix):
            return self._force(logp)
        scores = np.asarray([lp for _, lp in self.beams], dtype=np.float32)[:, None] + logp  # (K_live, V)
        ids = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
        return self._expand(ids, scores)

    def _expand(self, ids: np.ndarray, scores: np.ndarray) -> tuple[list[int], list[int]]:
        """The step after the prefix: ids (K_live, n) candidate tokens of each live beam, scores
        (K_live, n) float32 their beam's log-probability plus theirs (every token a live beam could
        take among its ``n`` best)."""
        K = self.beam_size
        flat = scores.ravel()  # (K_live * n,)
        n = min(2 * K, flat.size)
        top = np.argpartition(-flat, n - 1)[:n] if n < flat.size else np.arange(flat.size)
        beams, toks = np.divmod(top, ids.shape[1])
        toks = ids[beams, toks]  # (n,)
        # best first, ties to the lower beam then the lower token (the order of the (K_live, V) scores)
        order = np.lexsort((toks, beams, -flat[top]))
        alive: list[tuple[list[int], float]] = []
        parents: list[int] = []
        ranked = zip(beams[order].tolist(), toks[order].tolist(), flat[top[order]].tolist())
        for rank, (beam, tok, value) in enumerate(ranked):
            tokens = self.beams[beam][0] + [tok]
            if tok == self.eos_id:
                if rank < K:  # only the best K candidates may finish (models/decoding.py, transformers)
                    score = normalized_score(value, len(tokens), self.length_penalty)
                    self.finished.append(Finished(tokens, value, score, "eos"))
            else:
                alive.append((tokens, value))
                parents.append(beam)
            if len(alive) == K:
                break
        step, self.step = self.step, self.step + 1
        if not alive or not self._can_improve(alive[0]):
            self.done = True
        elif step == self.max_new_tokens - 1:
            self.finished.extend(
                Finished(t, lp, normalized_score(lp, len(t), self.length_penalty), "length") for t, lp in alive
            )
            self.done = True
        if self.done:
            return [], []
        self.beams = alive
        return parents, [t[-1] for t, _ in alive]

    def _can_improve(self, best_alive: tuple[list[int], float]) -> bool:
        """Fewer than K hypotheses have finished, or the best live beam, scored at its current
        length, beats the K-th best finished one (the module docstring)."""
        K = self.beam_size
        if len(self.finished) < K:
            return True
        worst_kept = sorted((h.score for h in self.finished), reverse=True)[K - 1]
        tokens, logprob = best_alive
        return normalized_score(logprob, len(tokens), self.length_penalty) > worst_kept

    def _force(self, logp: np.ndarray) -> tuple[list[int], list[int]]:
        """A prefix step: the single beam takes the forced token (see the module docstring)."""
        tok = self.prefix[self.step]
        tokens, lp = self.beams[0]
        gain = 0.0 if self.step < self.hidden else logp[0, tok]
        value = float(np.float32(lp) + gain)  # float32 like a searched step's scores
        tokens = tokens + [tok]
        step, self.step = self.step, self.step + 1
        if step == self.max_new_tokens - 1:
            self.finished.append(
                Finished(tokens, value, normalized_score(value, len(tokens), self.length_penalty), "length")
            )
            self.done = True
            return [], []
        self.beams = [(tokens, value)]
        return [0], [tok]

    def result(self) -> list[Finished]:
        ranked = sorted(self.finished, key=lambda h: h.score, reverse=True)
        return ranked[: self.num_hypotheses]
