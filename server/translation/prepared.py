"""A translation request as the engine takes it (:class:`Prepared`), and one model's limits on one
server (:class:`ModelLimits`).

The translation service checks a request once (``server/service/limits.py``: its texts, options,
forced prefix and glossary terms against these limits); the engine trusts what it receives and
only measures what it alone can, each text's tokens against its admission budgets
(:func:`measure`): a text that could never be admitted is refused before it costs a decoder row,
rather than waiting forever.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..shared.errors import InvalidRequest
from .options import DecodeOptions, EngineSettings
from .sessions import ModelSpec


@dataclass(frozen=True)
class Prepared:
    """A checked request: one source id list per text, the options, the effective max_new_tokens."""

    sources: list[list[int]]
    options: DecodeOptions
    max_new_tokens: int


@dataclass(frozen=True)
class ModelLimits:
    """The limits of one model on one server: the manifest's lengths and vocabulary, the special
    ids it never generates, and the engine's budgets."""

    settings: EngineSettings
    spec: ModelSpec
    max_source_len: int
    max_target_len: int
    vocab_size: int


def measure(limits: ModelLimits, sources: Sequence[Sequence[int]], options: DecodeOptions, max_new: int) -> None:
    """Each text's source ids (its source prefix included) against the model's source length and
    the engine's token and KV-cache budgets; raises InvalidRequest."""
    s = limits.settings
    for i, src in enumerate(sources):
        if len(src) > limits.max_source_len:
            raise InvalidRequest(
                f"text {i} is {len(src)} tokens long after tokenization; this model takes at most "
                f"{limits.max_source_len}: shorten or split it"
            )
        need, budget = options.beam_size * (len(src) + max_new), s.max_tokens_in_flight
        if need > budget:
            raise InvalidRequest(
                f"text {i} needs {need} tokens in flight (beam_size {options.beam_size} x ({len(src)} source + "
                f"{max_new} new tokens)); this server allows {budget}: lower max_new_tokens or beam_size"
            )
        cache_bytes = need * limits.spec.cache_bytes_per_token
        if s.max_cache_bytes and cache_bytes > s.max_cache_bytes:
            raise InvalidRequest(
                f"text {i} needs {cache_bytes:,} bytes of KV cache ({need} tokens); this server allows "
                f"{s.max_cache_bytes:,}: lower max_new_tokens or beam_size"
            )
