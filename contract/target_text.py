"""Target-language text through a model's tokenizer.json.

tokenizer.json's normaliser is the *source* side's: the bundled translator's lower-cases its
English, folds runs of whitespace and trims. Text in the target language (a request's
``target_prefix``, training targets) is encoded with the same vocabulary but without those
source-only steps, so German keeps its capitals; Unicode steps (NFC, NFKC, Precompiled,
replacements of special spaces) stay.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from tokenizers import Tokenizer

SOURCE_ONLY_STEPS = frozenset({"Lowercase", "Strip"})  # tokenizers' normaliser types


def _target_normalizer(normalizer: dict[str, Any] | None) -> dict[str, Any] | None:
    if not normalizer:
        return normalizer
    kind = normalizer.get("type")
    if kind in SOURCE_ONLY_STEPS:
        return None
    if kind == "Replace" and "Regex" in normalizer.get("pattern", {}) and normalizer.get("content") == " ":
        return None  # a whitespace fold ("\\s+" -> " ")
    if kind == "Sequence":
        steps = [t for t in (_target_normalizer(n) for n in normalizer.get("normalizers", [])) if t is not None]
        return {**normalizer, "normalizers": steps}
    return normalizer


@lru_cache(maxsize=64)  # one per loaded tokenizer (keyed by identity)
def target_side(tokenizer: Tokenizer) -> Tokenizer:
    """``tokenizer`` without its source-only normaliser steps; the same object when it has none."""
    data = json.loads(tokenizer.to_str())
    normalizer = _target_normalizer(data.get("normalizer"))
    if normalizer == data.get("normalizer"):
        return tokenizer
    return Tokenizer.from_str(json.dumps({**data, "normalizer": normalizer}))
