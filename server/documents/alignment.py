"""Word alignments from subword cross-attention.

Words are the whitespace-separated tokens of a sentence, 0-based, as fast_align numbers them;
a link ``i-j`` says source word i and target word j translate each other.

The model attends over subword tokens. For each target word, the attention rows of its
subwords (each a distribution over the source tokens) are **averaged**, so the word's row is
still a distribution; a source word's column is the **sum** over its subwords, the whole
attention mass that lands on the word: a word split into three pieces spreads its mass over
them, and the maximum of any one piece would favour words that happen to be one piece.
Special tokens (the end token, a language token) carry no word; they are dropped and the rows
renormalised (the end token is where attention rests when a target token has no source word,
Kobayashi et al. 2020, so it would otherwise win most rows). Each target word is then linked
to its most attended source word: one link per target word, the attention-argmax rule of
Garg et al. 2019 (``benchmarks/alignment_aer.py`` measures it against the gold set).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_WORD = re.compile(r"\S+")


def word_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) character offsets of the whitespace-separated words of ``text``."""
    return [m.span() for m in _WORD.finditer(text)]


def word_of_offsets(text: str, offsets: Sequence[tuple[int, int]]) -> list[int | None]:
    """The word of ``text`` each token falls in, from the tokens' character offsets into it; None
    for a token that covers no character (a special token)."""
    spans = word_spans(text)
    starts = [s for s, _ in spans]
    out: list[int | None] = []
    for start, end in offsets:
        if end <= start:
            out.append(None)
            continue
        word = bisect.bisect_right(starts, start) - 1
        if word < 0 or start >= spans[word][1]:  # starts in the whitespace before the next word
            word += 1
        out.append(word if 0 <= word < len(spans) else None)
    return out


def word_of_prefixes(pieces: Sequence[str]) -> list[int | None]:
    """The word each generated token belongs to, from the text of every prefix of the output
    (``pieces[k]``: the decoded text of its first k + 1 tokens); None for a token that adds no
    character (the end token). Decoding prefixes is how the detokenizer sees the output too
    (byte-level BPE and SentencePiece pieces only make words together)."""
    out: list[int | None] = []
    before = ""
    for text in pieces:
        added = text[len(before) :] if text.startswith(before) else text  # a completed UTF-8 character rewrites
        out.append(len(word_spans(text)) - 1 if added.strip() else None)  # the word its last character ends
        before = text
    return out


@dataclass(frozen=True)
class WordAlignment:
    """One sentence's alignment: the links ``(source word, target word)`` in target order, the
    words' character spans in the sentence and its translation, and the word-level attention
    (target words x source words, rows summing to 1) the links were read from."""

    source: str
    target: str
    links: tuple[tuple[int, int], ...]
    source_spans: tuple[tuple[int, int], ...]
    target_spans: tuple[tuple[int, int], ...]
    attention: np.ndarray  # (target words, source words) float32

    def pharaoh(self) -> str:
        """``"0-0 1-2 ..."``: fast_align's (Pharaoh) format."""
        return " ".join(f"{i}-{j}" for i, j in self.links)


def word_attention(
    attention: np.ndarray,
    source_words: Sequence[int | None],
    target_words: Sequence[int | None],
    shape: tuple[int, int],
) -> np.ndarray:
    """Subword attention (T, S) -> word attention (target words, source words), see the module
    docstring. ``source_words`` (S) and ``target_words`` (T): each token's word or None."""
    n_target, n_source = shape
    columns = np.zeros((attention.shape[0], n_source), dtype=np.float32)  # (T, source words)
    for s, word in enumerate(source_words):
        if word is not None and word < n_source:
            columns[:, word] += attention[:, s]
    rows = np.zeros((n_target, n_source), dtype=np.float32)  # (target words, source words)
    counts = np.zeros(n_target, dtype=np.float32)
    for t, word in enumerate(target_words):
        if word is not None and word < n_target and t < columns.shape[0]:
            rows[word] += columns[t]
            counts[word] += 1
    rows /= np.maximum(counts, 1)[:, None]
    total = rows.sum(axis=1, keepdims=True)  # (target words, 1)
    return np.divide(rows, total, out=np.zeros_like(rows), where=total > 0)


def align_words(
    source: str,
    target: str,
    attention: np.ndarray,
    source_words: Sequence[int | None],
    target_words: Sequence[int | None],
) -> WordAlignment:
    """The alignment of ``source`` and its translation ``target`` from the subword attention
    (T, S) of the step that generated each target token, see the module docstring."""
    source_spans, target_spans = word_spans(source), word_spans(target)
    words = word_attention(attention, source_words, target_words, (len(target_spans), len(source_spans)))
    links = tuple((int(np.argmax(row)), j) for j, row in enumerate(words) if source_spans and float(row.sum()) > 0)
    return WordAlignment(source, target, links, tuple(source_spans), tuple(target_spans), words)
