"""Sentences longer than the model's source limit, cut into pieces that fit.

Counted in tokens of the model's own tokenizer, after normalisation, special tokens
included (the limit ``limits.max_source_len`` of model.json is on exactly that). A sentence
over the limit is cut at clause punctuation (", ", "; ", ": ", " – "), then at whitespace,
and only a single word longer than the limit (a URL, text without spaces) at token
boundaries; the pieces are packed greedily into as few pieces as fit. Every character
lands in a piece or in the whitespace between pieces: nothing is dropped or truncated.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence

from ..shared.errors import InvalidRequest, echo
from .sentences import translatable

# A match starts only where a whitespace run starts ((?<!\s)): from inside a run, \s+ followed by a
# lookahead that fails would retry every shorter run, quadratic in a run of spaces.
CLAUSE = re.compile(r"(?<=[,;:])\s+|(?<!\s)\s+(?=[\u2013\u2014]\s)")
WHITESPACE = re.compile(r"\s+")

Span = tuple[int, int]


class TokenBudget:
    """How many tokens a text takes in a ``tokenizers.Tokenizer``, and where its tokens start."""

    def __init__(self, tokenizer, max_tokens: int) -> None:
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.overhead = len(tokenizer.encode("").ids)  # special tokens every text gets (eos)
        if max_tokens <= self.overhead:
            raise ValueError(f"max_tokens {max_tokens} leaves no room next to {self.overhead} special tokens")

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        return [enc.ids for enc in self.tokenizer.encode_batch(list(texts))] if texts else []

    def token_starts(self, text: str) -> list[int]:
        """Character offsets where the (non-special) tokens of ``text`` start."""
        enc = self.tokenizer.encode(text)
        return [start for (start, _), special in zip(enc.offsets, enc.special_tokens_mask) if not special]


class SentenceFitter:
    """Cuts spans of one run's plain text until every piece's normalised text fits the budget."""

    def __init__(
        self,
        plain: str,
        normalize: Callable[[str], str],
        budget: TokenBudget,
        may_cut: Callable[[int], bool] = lambda p: True,
    ) -> None:
        self.plain, self.normalize, self.budget, self.may_cut = plain, normalize, budget, may_cut

    def fit(self, spans: Sequence[Span], ids: Sequence[list[int]] | None = None) -> list[tuple[Span, list[int]]]:
        """Every span, cut where needed, with the token ids of its normalised text (``ids``: those
        of the spans as they are, when the caller has them)."""
        if ids is None:
            ids = self.budget.encode([self.normalize(self.plain[s:e]) for s, e in spans])
        out: list[tuple[Span, list[int]]] = []
        for span, span_ids in zip(spans, ids):
            if len(span_ids) <= self.budget.max_tokens:
                out.append((span, span_ids))
            else:  # pieces with nothing to translate ("!" cut off a long word) stay as separators
                out += self.fit([(s, e) for s, e in self._cut(span) if translatable(self.plain[s:e])])
        return out

    def _cut(self, span: Span) -> list[Span]:
        for pattern in (CLAUSE, WHITESPACE):
            pieces = self._pieces(span, pattern)
            if len(pieces) > 1:
                packed = self._pack(pieces)
                return packed if len(packed) > 1 else pieces  # counts that did not add up: cut at every boundary
        return self._cut_tokens(span)

    def _pieces(self, span: Span, pattern: re.Pattern) -> list[Span]:
        start, end = span
        pieces, at = [], start
        for m in pattern.finditer(self.plain, start, end):
            if m.start() > at and self.may_cut(m.start()) and self.may_cut(m.end()):
                pieces.append((at, m.start()))
                at = m.end()
        pieces.append((at, end))
        return pieces

    def _pack(self, pieces: list[Span]) -> list[Span]:
        """Consecutive pieces merged while their token counts (without special tokens) add up to the
        budget; the count of a merge is checked again by ``fit``, which cuts further if it is over."""
        room = self.budget.max_tokens - self.budget.overhead
        counts = [
            len(ids) - self.budget.overhead
            for ids in self.budget.encode([self.normalize(self.plain[s:e]) for s, e in pieces])
        ]
        out, (start, end), used = [], pieces[0], counts[0]
        for (s, e), n in zip(pieces[1:], counts[1:]):
            if used + n <= room:
                end, used = e, used + n
            else:
                out.append((start, end))
                (start, end), used = (s, e), n
        out.append((start, end))
        return out

    def _cut_tokens(self, span: Span) -> list[Span]:
        """A span without whitespace, tokenized once and cut into pieces of ``room`` tokens each:
        before the first token that does not fit (never inside a character reference); halved
        when the tokenizer's offsets give no cut. One pass, however long the span (cutting one
        piece off and tokenizing the rest again would be quadratic in it)."""
        start, end = span
        room = self.budget.max_tokens - self.budget.overhead
        starts = [start + s for s in self.budget.token_starts(self.plain[start:end])]
        cuts, low = [], start
        while True:
            first = bisect.bisect_left(starts, low)  # the piece's first token
            if len(starts) - first <= room:
                break
            low = self._cut_near(low, starts[first + room], end)
            cuts.append(low)
        if not cuts:  # the counts did not add up (normalisation added tokens): halve
            cuts.append(self._cut_near(start, start + (end - start) // 2, end))
        bounds = [start, *cuts, end]
        return list(zip(bounds, bounds[1:]))

    def _cut_near(self, low: int, want: int, end: int) -> int:
        """The allowed cut nearest below ``want`` (above ``low``), else the nearest above it."""
        cut = next((p for p in range(want, low, -1) if self.may_cut(p)), None)
        cut = cut or next((p for p in range(want + 1, end) if self.may_cut(p)), None)
        if cut is None or not low < cut < end:  # one character over the limit: no cut can help
            raise InvalidRequest(
                f"{echo(self.plain[low:end])} alone is over this model's {self.budget.max_tokens} source tokens"
            )
        return cut
