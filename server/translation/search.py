"""Choosing tokens from a decoder step's logits, in numpy: greedy, sampling, beam search.

Greedy and beam search follow ``attnserve.models.decoding`` (the PyTorch reference
whose tokens the server must reproduce) rule for rule:

- log-probabilities are ``log_softmax`` over the whole vocabulary, after which pad and
  start tokens are set to -inf (never generated); greedy needs only the argmax of the
  masked logits, so the log-softmax is computed only when scores are asked for;
- greedy: argmax, ties to the lowest id; score = logprob = sum of chosen log-probs;
- beam search (K beams): the best 2K (score, beam, token) candidates, best first; an end
  token finishes a hypothesis, any other candidate joins the next beams until there are
  K; stop at K finished hypotheses or ``max_new_tokens``; rank by
  ``logprob / len ** length_penalty``.

Sampling (no reference decoder): logits / temperature, then top-k, then top-p (the
smallest set of most likely tokens whose probability reaches ``top_p``, Holtzman et
al. 2020), then one draw from the renormalised distribution with the text's own
``numpy.random.Generator``. The reported logprob is the model's (untempered) one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NEG_INF = np.float32(-np.inf)


def normalized_score(logprob: float, length: int, length_penalty: float) -> float:
    """Length-normalised score (models/decoding.py; Wu et al. 2016)."""
    return logprob / (max(length, 1) ** length_penalty)


def log_normalizers(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row max and log-sum-exp of the shifted logits, torch's log_softmax split in two.

    logits: (R, V) float32 raw (pad/bos not masked yet) -> m (R,), ls (R,) float32 so
    that ``log_softmax = (logits - m) - ls``.
    """
    m = logits.max(axis=1)  # (R,)
    shifted = logits - m[:, None]  # (R, V)
    np.exp(shifted, out=shifted)
    return m, np.log(shifted.sum(axis=1))  # (R,), (R,)


@dataclass
class Finished:
    tokens: list[int]
    logprob: float
    score: float
    finish_reason: str  # "eos" | "length"


class GreedySearch:
    """One row; argmax (or a draw, when sampling) each step."""

    def __init__(self, eos_id: int, max_new_tokens: int) -> None:
        self.eos_id = eos_id
        self.max_new_tokens = max_new_tokens
        self.tokens: list[int] = []
        self.logprob = 0.0

    def push(self, token: int, logprob: float) -> bool:
        """Record one token; True when the sequence is complete."""
        self.tokens.append(token)
        self.logprob += logprob
        return token == self.eos_id or len(self.tokens) >= self.max_new_tokens

    def result(self) -> list[Finished]:
        reason = "eos" if self.tokens and self.tokens[-1] == self.eos_id else "length"
        return [Finished(self.tokens, self.logprob, self.logprob, reason)]


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


class BeamSearch:
    """Beam search of one source; its live beams are rows of the decode batch."""

    def __init__(
        self, beam_size: int, max_new_tokens: int, length_penalty: float, num_hypotheses: int, eos_id: int
    ) -> None:
        self.beam_size = beam_size
        self.max_new_tokens = max_new_tokens
        self.length_penalty = length_penalty
        self.num_hypotheses = num_hypotheses
        self.eos_id = eos_id
        self.beams: list[tuple[list[int], float]] = [([], 0.0)]  # (tokens, logprob); one beam at first
        self.finished: list[Finished] = []
        self.step = 0
        self.done = False

    def advance(self, logp: np.ndarray) -> tuple[list[int], list[int]]:
        """One step. logp: (K_live, V) float32 log-probs (pad/bos at -inf).

        Returns (parents, tokens) of the next live beams: row ``i`` continues beam
        ``parents[i]`` with token ``tokens[i]``. Empty when the search is done.
        """
        K = self.beam_size
        scores = np.asarray([lp for _, lp in self.beams], dtype=np.float32)[:, None] + logp  # (K_live, V)
        V = scores.shape[1]
        flat = scores.ravel()  # (K_live * V,)
        n = min(2 * K, flat.size)
        top = np.argpartition(-flat, n - 1)[:n] if n < flat.size else np.arange(flat.size)
        top = top[np.argsort(-flat[top], kind="stable")]  # (n,) best first, ties to the lower index
        alive: list[tuple[list[int], float]] = []
        parents: list[int] = []
        for rank, (index, value) in enumerate(zip(top.tolist(), flat[top].tolist())):
            beam, tok = divmod(index, V)
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
        if len(self.finished) >= K or not alive:
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

    def result(self) -> list[Finished]:
        ranked = sorted(self.finished, key=lambda h: h.score, reverse=True)
        return ranked[: self.num_hypotheses]
