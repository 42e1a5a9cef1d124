"""Reference decoders: greedy and beam search, using only ``encode`` / ``decode`` with the cache.

These define the tokens the server's onnxruntime decoder must reproduce, so the rules
are spelled out:

- Output tokens exclude the start token; an end token, when generated, is the last
  token and ends the hypothesis (``finish = "eos"``); otherwise ``finish = "length"``
  after ``max_new_tokens`` tokens (the end token counts as a token).
- The pad and start tokens are never generated (their log-probabilities are set to
  -inf before choosing, as Marian's ``bad_words_ids`` does for pad), except a start
  token that is also the end token (M2M100 / NLLB start from ``</s>``):
  ``TranslationConfig.never_generate``.
- A forced ``prefix`` (M2M100 / NLLB's target-language token, a user's target prefix)
  is fed before any choice; its tokens are part of the output. The first ``hide_prefix``
  of them (the language token, which the server hides) have log-probability 0, as
  transformers' ``forced_bos_token_id`` gives it; the others keep the model's
  log-probability, as CTranslate2 counts a target prefix's.
- Greedy: argmax at each step; ties go to the lowest token id. ``score`` is the sum of
  the chosen tokens' log-probabilities.
- Beam search (``beam_size`` K): at each step every live beam's log-probabilities are
  added to its score and the best 2K (score, beam, token) candidates are scanned from
  best to worst; a candidate ending in the end token becomes a finished hypothesis
  when it is among the best K candidates (ignored otherwise, as transformers does),
  any other joins the next live beams until there are K. Hypotheses are ranked by
  ``logprob / len(tokens) ** length_penalty`` (the normalisation of CTranslate2 and
  Hugging Face; Wu et al. 2016 motivate it) and the best ``num_hypotheses`` returned.
  The search stops when no beam is live, when K hypotheses have finished and the best
  live beam, scored at its current length, is no better than the K-th best of them, or
  after ``max_new_tokens`` steps, when the live beams finish with ``finish = "length"``.
  This is transformers' default beam search (``early_stopping=False``). Stopping as soon
  as K have finished (``early_stopping=True``) let two unlikely early end tokens end the
  search with a live beam far better than both: with K = 2 the bundled translator
  answered "January 9" with "9" instead of "9. Januar".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .attention import KV
from .translation import TranslationTransformer


@dataclass(frozen=True)
class Hypothesis:
    tokens: list[int]  # generated ids, no start token; ends with the end token when finish == "eos"
    logprob: float  # sum of the tokens' log-probabilities
    score: float  # the ranking score (greedy: logprob; beam: length-normalised)
    finish: str  # "eos" | "length"


def normalized_score(logprob: float, length: int, length_penalty: float) -> float:
    return logprob / (max(length, 1) ** length_penalty)


def can_improve(finished: list, beam_size: int, best_alive: tuple[list[int], float], length_penalty: float) -> bool:
    """Whether beam search goes on: fewer than ``beam_size`` hypotheses have finished, or the
    best live beam (``(tokens, logprob)``, scored at its current length) still beats the
    ``beam_size``-th best finished one (transformers' default, ``early_stopping=False``)."""
    if len(finished) < beam_size:
        return True
    worst_kept = sorted((h.score for h in finished), reverse=True)[beam_size - 1]
    tokens, logprob = best_alive
    return normalized_score(logprob, len(tokens), length_penalty) > worst_kept


class _Session:
    """Encoder output and decoder cache for a batch of rows."""

    def __init__(self, model: TranslationTransformer, src: torch.Tensor, src_mask: torch.Tensor) -> None:
        self.model = model
        memory = model.encode(src, src_mask)  # (B, L, C)
        self.cross = model.cross_kv(memory)  # per layer 2 x (B, H, L, D)
        self.src_mask = src_mask  # (B, L)
        self.past: list[KV] | None = None
        self.steps = 0

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per row. tokens: (R,) int64 -> log-probs (R, V) float32."""
        R = tokens.shape[0]
        positions = torch.full((R, 1), self.steps, dtype=torch.long)  # (R, 1)
        tgt_mask = torch.ones(R, self.steps + 1, dtype=torch.bool)  # (R, P + 1)
        hidden, self.past = self.model.decode(
            tokens[:, None], positions, tgt_mask, self.cross, self.src_mask, self.past, use_cache=True
        )  # (R, 1, C)
        self.steps += 1
        logp = self.model.logits(hidden[:, -1]).float().log_softmax(dim=-1)  # (R, V)
        logp[:, list(self.model.cfg.never_generate)] = float("-inf")  # see the module docstring
        return logp

    def reorder(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` (R',) int64 of the cache and the source, in that order."""
        self.past = [(k[rows], v[rows]) for k, v in self.past]
        self.cross = [(k[rows], v[rows]) for k, v in self.cross]
        self.src_mask = self.src_mask[rows]


def _forced(logp: torch.Tensor, token: int, hidden: bool) -> torch.Tensor:
    """(R, V) log-probs where every id but ``token`` is impossible; ``token`` keeps its
    log-probability, or 0 when ``hidden``."""
    forced = torch.full_like(logp, float("-inf"))  # (R, V)
    forced[:, token] = 0.0 if hidden else logp[:, token]
    return forced


def _source_mask(model: TranslationTransformer, src: torch.Tensor) -> torch.Tensor:
    if src.dim() != 2:
        raise ValueError(f"src must be (B, L) token ids, got shape {tuple(src.shape)}")
    return src != model.cfg.pad_id  # (B, L)


@torch.no_grad()
def greedy_decode(
    model: TranslationTransformer,
    src: torch.Tensor,
    max_new_tokens: int = 64,
    prefix: list[int] | None = None,
    hide_prefix: int = 0,
) -> list[Hypothesis]:
    """Greedy decoding of a batch. src: (B, L) int64, right-padded with pad_id; ``prefix``: ids
    every row starts with (forced, counted in ``max_new_tokens``; the first ``hide_prefix``
    with log-probability 0, see the module docstring)."""
    cfg = model.cfg
    prefix = list(prefix or [])
    session = _Session(model, src, _source_mask(model, src))
    B = src.shape[0]
    tokens = torch.full((B,), cfg.bos_id, dtype=torch.long)  # (B,)
    out: list[list[int]] = [[] for _ in range(B)]
    logprob = [0.0] * B
    done = [False] * B
    for step in range(max_new_tokens):
        logp = session.step(tokens)  # (B, V)
        if step < len(prefix):
            logp = _forced(logp, prefix[step], step < hide_prefix)  # (B, V)
        tokens = logp.argmax(dim=-1)  # (B,)
        for b in range(B):
            if not done[b]:
                tok = int(tokens[b])
                out[b].append(tok)
                logprob[b] += float(logp[b, tok])
                done[b] = tok == cfg.eos_id
        if all(done):
            break
    return [Hypothesis(out[b], logprob[b], logprob[b], "eos" if done[b] else "length") for b in range(B)]


@torch.no_grad()
def beam_search(
    model: TranslationTransformer,
    src: torch.Tensor,
    beam_size: int = 4,
    max_new_tokens: int = 64,
    length_penalty: float = 1.0,
    num_hypotheses: int = 1,
    prefix: list[int] | None = None,
    hide_prefix: int = 0,
) -> list[list[Hypothesis]]:
    """Beam search of each source row independently; returns ``num_hypotheses`` per row, best first.
    ``prefix`` / ``hide_prefix``: ids every hypothesis starts with, as in :func:`greedy_decode`."""
    if not 1 <= num_hypotheses <= beam_size:
        raise ValueError(f"num_hypotheses must be in 1..beam_size ({beam_size}), got {num_hypotheses}")
    return [
        _beam_search_one(
            model,
            src[b : b + 1],
            beam_size,
            max_new_tokens,
            length_penalty,
            num_hypotheses,
            list(prefix or []),
            hide_prefix,
        )
        for b in range(src.shape[0])
    ]


def _beam_search_one(
    model: TranslationTransformer,
    src: torch.Tensor,
    beam_size: int,
    max_new_tokens: int,
    length_penalty: float,
    num_hypotheses: int,
    prefix: list[int],
    hide_prefix: int,
) -> list[Hypothesis]:
    cfg = model.cfg
    session = _Session(model, src, _source_mask(model, src))
    beams: list[tuple[list[int], float]] = [([], 0.0)]  # (tokens, logprob); one beam at the start
    last = torch.tensor([cfg.bos_id])  # (K,)
    finished: list[Hypothesis] = []
    for step in range(max_new_tokens):
        logp = session.step(last)  # (K, V)
        if step < len(prefix):
            logp = _forced(logp, prefix[step], step < hide_prefix)  # (K, V)
        scores = torch.tensor([lp for _, lp in beams])[:, None] + logp  # (K, V)
        V = scores.shape[1]
        top = scores.flatten().topk(min(2 * beam_size, scores.numel()))  # 2K candidates, best first
        alive: list[tuple[list[int], float]] = []
        rows, next_tokens = [], []
        for rank, (value, flat) in enumerate(zip(top.values.tolist(), top.indices.tolist())):
            beam, tok = divmod(flat, V)
            tokens = beams[beam][0] + [tok]
            if value == float("-inf"):  # only impossible continuations are left (a forced step)
                break
            if tok == cfg.eos_id:
                if rank < beam_size:  # only the best K candidates may finish (transformers' rule)
                    finished.append(
                        Hypothesis(tokens, value, normalized_score(value, len(tokens), length_penalty), "eos")
                    )
            else:
                alive.append((tokens, value))
                rows.append(beam)
                next_tokens.append(tok)
            if len(alive) == beam_size:
                break
        if not alive or not can_improve(finished, beam_size, alive[0], length_penalty):
            break
        if step == max_new_tokens - 1:
            finished.extend(
                Hypothesis(t, lp, normalized_score(lp, len(t), length_penalty), "length") for t, lp in alive
            )
            break
        beams = alive
        session.reorder(torch.tensor(rows))
        last = torch.tensor(next_tokens)
    finished.sort(key=lambda h: h.score, reverse=True)
    return finished[:num_hypotheses]
