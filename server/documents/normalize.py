"""Normalisation of a sentence before it is tokenised (never of the separators around it).

The Unicode form is the one the model's tokenizer was built for, read from its own
normaliser in tokenizer.json: ``NFKC`` for a SentencePiece model (a ``Precompiled``
charsmap, which is ``nmt_nfkc``: Marian / OPUS-MT), ``NFC`` for the bundled translator's
byte-level BPE, none when the tokenizer has no Unicode normaliser (then the text is left
in the form it came in, as at training). Runs of whitespace become one space: a model
trained on single-spaced sentences turns "Monday,   March  3" into nonsense; invisible format
characters (:data:`_INVISIBLE`) are dropped.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

FORMS = ("NFC", "NFD", "NFKC", "NFKD")
# Two or more whitespace characters, or one that is not a plain space but a tab, a vertical tab,
# a form feed or a line break; a lone no-break or thin space stays (tokenizers know them).
_WHITESPACE_RUN = re.compile(r"\s{2,}|[\t\n\v\f\r\x1c-\x1f\x85\u2028\u2029]")
# Characters that show nothing and that a model trained on plain sentences never saw, pasted in
# from word processors and web pages: a byte-order mark, zero-width space, word joiner, soft
# hyphen, bidirectional marks and embeddings. "\ufeffMonday" translated as a different word. (The
# zero-width joiner and non-joiner stay: Persian, Indic scripts and emoji sequences need them.)
_INVISIBLE = re.compile("[\u00ad\u200b\u200e\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff]")


def unicode_form(normalizer: dict[str, Any] | None) -> str | None:
    """The Unicode normalisation form a tokenizer.json ``normalizer`` applies, or None."""
    if not normalizer:
        return None
    kind = normalizer.get("type")
    if kind in FORMS:
        return kind
    if kind == "Precompiled":  # SentencePiece's nmt_nfkc rules, compiled
        return "NFKC"
    if kind == "Sequence":
        for step in normalizer.get("normalizers", []):
            form = unicode_form(step)
            if form is not None:
                return form
    return None


@dataclass(frozen=True)
class Normalizer:
    form: str | None = None  # one of FORMS, or None to keep the text's own form

    def __post_init__(self) -> None:
        if self.form is not None and self.form not in FORMS:
            raise ValueError(f"unicode form must be one of {', '.join(FORMS)} or None, got {self.form!r}")

    @classmethod
    def for_tokenizer(cls, tokenizer) -> Normalizer:
        """From a ``tokenizers.Tokenizer``: the form its own normaliser applies."""
        return cls(unicode_form(json.loads(tokenizer.to_str()).get("normalizer")))

    def __call__(self, text: str) -> str:
        if self.form is not None:
            text = unicodedata.normalize(self.form, text)
        return _WHITESPACE_RUN.sub(" ", _INVISIBLE.sub("", text)).strip()
