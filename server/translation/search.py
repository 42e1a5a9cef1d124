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
each job's search the step's logits (:class:`StepLogits`, log-normalisers and the batch's
argmax computed once for every row) and the job's rows; the search returns the next input
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

from .options import DecodeOptions
from .terms import constraints_growth

NEG_INF = np.float32(-np.inf)


def normalized_score(logprob: float, length: int, length_penalty: float) -> float:
    """Length-normalised score (models/decoding.py; Wu et al. 2016)."""
    return logprob / (max(length, 1) ** length_penalty)


NORMALIZER_BLOCK_BYTES = 1 << 20  # rows exponentiated together: a block that stays in L2


def log_normalizers(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row max and log-sum-exp of the shifted logits, torch's log_softmax split in two.

    logits: (R, V) float32 raw (pad/bos not masked yet) -> m (R,), ls (R,) float32 so
    that ``log_softmax = (logits - m) - ls``.

    The exponentials go through one small buffer a block of rows at a time: a (R, V) temporary
    (30 MB at 128 beams of a 58k vocabulary) costs page faults and a trip through memory on
    every step. Each row's sum is the same pairwise sum whatever the block, so the values do
    not change.
    """
    R, V = logits.shape
    m = logits.max(axis=1)  # (R,)
    s = np.empty(R, dtype=np.float32)  # (R,)
    block = max(1, min(R, NORMALIZER_BLOCK_BYTES // max(4 * V, 1)))
    work = np.empty((block, V), dtype=np.float32)
    for i in range(0, R, block):
        n = min(block, R - i)
        w = work[:n]
        np.subtract(logits[i : i + n], m[i : i + n, None], out=w)
        np.exp(w, out=w)
        w.sum(axis=1, out=s[i : i + n])
    return m, np.log(s)  # (R,), (R,)


TOP_BLOCKS = 256  # column blocks whose maxima point top_ids at the few worth reading


def top_ids(x: np.ndarray, n: int) -> np.ndarray:
    """The column ids of the ``n`` largest values of every row of ``x`` (R, V), unordered:
    (R, n) int64; n < V. Which of several entries equal to a row's n-th value is kept is not
    specified (as with ``argpartition``).

    One pass over ``x`` and no (R, V) temporary (``argpartition`` writes a (R, V) index array,
    60 MB at 128 rows of a 58k vocabulary): the columns are cut into blocks; every entry outside
    a row's ``n`` blocks with the largest maxima is at most the n-th of those maxima, which ``n``
    entries reach, so the row's ``n`` largest lie in those blocks or in the columns past the last
    whole block, and only those few are read again."""
    R, V = x.shape
    nb = max(n, min(TOP_BLOCKS, V // n))
    w = V // nb
    body = x[:, : nb * w].reshape(R, nb, w)
    peaks = np.maximum.reduceat(x, np.arange(0, nb * w, w), axis=1)  # (R, nb); the last runs to V
    blocks = np.argpartition(peaks, nb - n, axis=1)[:, nb - n :]  # (R, n)
    rows = np.arange(R)[:, None]
    cols = (blocks[:, :, None] * w + np.arange(w)).reshape(R, n * w)  # (R, n * w)
    vals = body[rows, blocks].reshape(R, n * w)
    if nb * w < V:  # the columns past the last whole block are always read
        cols = np.concatenate([cols, np.broadcast_to(np.arange(nb * w, V), (R, V - nb * w))], axis=1)
        vals = np.concatenate([vals, x[:, nb * w :]], axis=1)
    best = np.argpartition(vals, vals.shape[1] - n, axis=1)[:, vals.shape[1] - n :]  # (R, n)
    return np.take_along_axis(cols, best, axis=1)


@dataclass
class Finished:
    tokens: list[int]
    logprob: float
    score: float
    finish_reason: str  # "eos" | "length"
    written: list[int] | None = None  # the tokens the decoder was fed, where glossary surrogates were swapped out


class StepLogits:
    """One decoder step's logits as every search reads them.

    logits: (B, V) float32, raw from the decoder; pad and start tokens (``never``: columns) are
    set to -inf in place (never generated). The log-softmax normalisers (``scores``) and the
    argmax of every row (``argmax``, ties to the lowest id) are computed once, for the whole
    batch, and only when some job needs them.

    ``never_ids``: given when nothing but the argmax reads this step (every row greedy, no
    scores). The argmax is then taken first and the columns masked (and the argmax taken
    again) only when one of those ids won, which a trained model all but never lets happen:
    the same tokens, ties included, without a write into the logits on every step (~7 us of a
    batch-1 step on the caches the decoder run had just flushed, benchmarks/README.md).
    """

    __slots__ = ("logits", "m", "ls", "greedy", "best", "_top")

    def __init__(
        self,
        logits: np.ndarray,
        never: slice | np.ndarray,
        scores: bool,
        argmax: bool,
        never_ids: frozenset[int] | None = None,
    ) -> None:
        self.m, self.ls = log_normalizers(logits) if scores else (None, None)  # (B,), (B,)
        self.logits = logits
        self._top: tuple[int, np.ndarray] | None = None
        if never_ids is not None:
            self.greedy = logits.argmax(axis=1)  # (B,)
            self.best: list[int] = self.greedy.tolist()
            if never_ids.isdisjoint(self.best):
                return  # no row chose a never-generated token: the unmasked argmax is the masked one
        logits[:, never] = NEG_INF
        self.greedy = logits.argmax(axis=1) if argmax else None  # (B,)
        self.best = self.greedy.tolist() if argmax else []  # the same as ints, read per row

    def logp(self, rows: np.ndarray) -> np.ndarray:
        """Log-probabilities of ``rows`` (K,): (K, V) float32, pad/start at -inf."""
        return (self.logits[rows] - self.m[rows, None]) - self.ls[rows, None]  # (K, V)

    def token_logp(self, row: int, token: int) -> float:
        return float((self.logits[row, token] - self.m[row]) - self.ls[row])

    def top(self, n: int) -> np.ndarray:
        """The ``n`` highest logits' ids of every row, unordered: (B, min(n, V)) int64.

        One partition of the whole batch, computed once per step for every beam search that
        asks (the largest ``n`` asked for is kept; a smaller ask reads its first columns only
        when they are the same partition, so it recomputes instead)."""
        if self._top is None or self._top[0] != n:
            V = self.logits.shape[1]
            ids = np.broadcast_to(np.arange(V), self.logits.shape) if n >= V else top_ids(self.logits, n)
            self._top = (n, ids)
        return self._top[1]

    def candidates(self, rows: np.ndarray, n: int, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each of ``rows``' (K,) ``n`` best tokens and their scores ``base[k] + logp``: (K, n) ids
        and (K, n) float32, computed as ``logp`` computes them but only where they are read.

        A row's ``n`` best tokens by raw logit are its ``n`` best by ``base + logp`` (the same
        shift for the whole row), so the best ``n`` candidates of all rows are among them."""
        ids = self.top(n)[rows]  # (K, n)
        raw = self.logits[rows[:, None], ids]  # (K, n)
        m, ls = self.m[rows, None], self.ls[rows, None]  # (K, 1)
        return ids, base[:, None] + ((raw - m) - ls)  # (K, n), (K, n)


class Search:
    """A job's token choice. ``in_place``: it holds one row that continues itself (greedy,
    sampling); otherwise each step says which row every next row continues (beam search)."""

    in_place = True
    streams = True  # its tokens are final as they come (a stream can show them)
    needs_scores = True  # the step must compute log-probabilities
    uses_argmax = False  # the step must compute the batch's argmax
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


def make_search(options: DecodeOptions, max_new_tokens: int, eos_id: int) -> Search:
    """The search ``options`` ask for: beam search, sampling (seeded per job) or greedy."""
    prefix = tuple(options.prefix_ids)
    if options.constraints:  # glossary terms: the constrained searches (they build on these classes)
        return _constrained_search(options, max_new_tokens, eos_id)
    if options.beam_size > 1:
        return BeamSearch(
            options.beam_size,
            max_new_tokens,
            options.length_penalty,
            options.num_hypotheses,
            eos_id,
            prefix,
            options.hide_prefix,
        )
    chooser = _chooser(options)
    return SingleSearch(chooser, eos_id, max_new_tokens, prefix, options.return_scores, options.hide_prefix)


def _constrained_search(options: DecodeOptions, max_new_tokens: int, eos_id: int) -> Search:
    from .constrained_beam import ConstrainedBeamSearch  # they subclass this module's searches
    from .constraints import GuidedSearch

    prefix, terms = tuple(options.prefix_ids), options.constraints
    # terms written through surrogates may make the output longer once swapped (term_swap.py)
    limit = max_new_tokens - constraints_growth(terms)
    if options.beam_size > 1:
        o = options
        return ConstrainedBeamSearch(
            o.beam_size, limit, o.length_penalty, o.num_hypotheses, eos_id, terms, prefix, o.hide_prefix
        )
    chooser = _chooser(options)
    return GuidedSearch(chooser, eos_id, limit, terms, prefix, options.return_scores, options.hide_prefix)


def _chooser(options: DecodeOptions) -> Argmax | Sampler:
    if options.sampling:
        return Sampler(options.temperature, options.top_k, options.top_p, np.random.default_rng(options.seed))
    return Argmax()


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
        self.beams: list[tuple[list[int], float]] = [([], 0.0)]  # (tokens, logprob); one beam at first
        self.finished: list[Finished] = []
        self.step = 0
        self.done = False

    def choose(self, step: StepLogits, rows: np.ndarray) -> tuple[list[int], list[int]]:
        if self.step < len(self.prefix):
            parents, tokens = self._force(step.logp(rows[:1]))
        else:  # the 2K best of each row from the step's one partition; logp only for those
            base = np.asarray([lp for _, lp in self.beams], dtype=np.float32)  # (K_live,)
            ids, scores = step.candidates(rows, 2 * self.beam_size, base)  # (K_live, n) each
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
