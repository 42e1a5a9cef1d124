"""A toy decoder for the search tests: ten tokens, logits as a function of the prefix, and the
loops that drive a greedy or beam search over it (tests/server/translation)."""

from __future__ import annotations

import numpy as np

from attnserve.server.translation.step_logits import StepLogits, log_normalizers
from attnserve.server.translation.terms import TermTokens

PAD, BOS, EOS, A, B, C, D, E, F, G = range(10)
V = 10
NEVER = slice(PAD, BOS + 1)


def model(reference: list[int]):
    """A toy decoder: it wants ``reference`` token by token, then the end token; any other
    token is 4 nats less likely, and D..G 6 less (rare words, as a glossary's often are)."""

    def logits(prefix: list[int]) -> np.ndarray:
        x = np.full(V, -4.0, dtype=np.float32)
        x[D:] = -6.0
        x[[PAD, BOS]] = -np.inf
        n = len(prefix)
        x[reference[n] if n < len(reference) else EOS] = 0.0
        return x

    return logits


def random_model(seed: int):
    """Logits drawn per prefix: a model with no idea of the terms, sometimes eager to end."""

    def logits(prefix: list[int]) -> np.ndarray:
        rng = np.random.default_rng([seed, *prefix])
        x = (rng.normal(size=V) * 3).astype(np.float32)
        x[[PAD, BOS]] = -np.inf
        return x

    return logits


def greedy(search, want) -> list[int]:
    while not search.done:
        logits = want(search.tokens)[None, :].copy()  # (1, V)
        search.next(StepLogits(logits, NEVER, True, True), 0)
    return search.tokens


def beam(search, want) -> list[list[int]]:
    while not search.done:
        logits = np.stack([want(tokens) for tokens, _ in search.beams])  # (K, V)
        m, ls = log_normalizers(logits.copy())
        search.advance((logits - m[:, None]) - ls[:, None])
    return [h.tokens for h in search.result()]


def occurrences(tokens: list[int], seq: tuple[int, ...]) -> int:
    return sum(tuple(tokens[i : i + len(seq)]) == seq for i in range(len(tokens) - len(seq) + 1))


def term(*spaced: int, initial: tuple[int, ...] | None = None, name: str = "t", cues=()) -> TermTokens:
    """A glossary term of the toy vocabulary, its target's tokens ``spaced`` (and ``initial``)."""
    first = tuple(initial) if initial is not None else tuple(spaced)
    return TermTokens(name, name, tuple(spaced), first, frozenset(cues))
