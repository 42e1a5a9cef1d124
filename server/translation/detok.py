"""Incremental detokenization for streams: text deltas whose concatenation is the final text.

Subword pieces merge (SentencePiece ``▁`` words, byte-level BPE, byte fallback), so a
token's own text is not its contribution. We decode the whole prefix each time and
emit what was added since the last emission, holding back what may still change: a
trailing incomplete UTF-8 sequence (decoded as U+FFFD) and trailing whitespace (a
cleanup step may drop a space before punctuation). :meth:`IncrementalDetokenizer.flush`
emits the rest at the end, so the deltas add up to ``decode(ids,
skip_special_tokens=True)`` exactly, which is the final hypothesis text.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

log = logging.getLogger(__name__)

_HOLD_BACK = "\ufffd \t\n\r"


class IncrementalDetokenizer:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.emitted = ""  # text given out so far

    def _delta(self, text: str) -> str:
        if not text.startswith(self.emitted):
            # A later token rewrote text already given out; nothing can be taken back,
            # so wait: the final flush emits whatever still extends the emitted text.
            return ""
        delta = text[len(self.emitted) :]
        self.emitted = text
        return delta

    def push(self, token_ids: Sequence[int]) -> str:
        """Add generated tokens (one decode however many); returns the new stable text (maybe "")."""
        self.ids.extend(token_ids)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        stable = text.rstrip(_HOLD_BACK)
        if len(stable) <= len(self.emitted):
            return ""
        return self._delta(stable)

    def flush(self) -> str:
        """Everything not yet emitted; call once after the last token."""
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if not text.startswith(self.emitted):
            log.warning("stream text diverged from the final text (%r vs %r)", self.emitted, text)
            return ""
        return self._delta(text)
