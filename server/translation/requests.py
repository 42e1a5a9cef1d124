"""A translation request checked and tokenised once: :class:`Prepared`.

:meth:`RequestChecker.prepare` runs every check a request can fail before it costs a decoder
row (characters first, so a megabyte text is refused before it is tokenised; then the
options, the forced prefix, each text's tokens against the model's and the server's
limits) and returns the source ids that ``translate`` / ``stream`` decode. Every refusal is
an InvalidRequest with a message a person can act on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tokenizers import Tokenizer

from ..shared.errors import InvalidOption, InvalidRequest
from ..shared.text_limits import DocumentLimits
from .options import DecodeOptions, EngineSettings
from .sessions import ModelSpec
from .terms import constraints_cost

MAX_LENGTH_PENALTY = 10.0


@dataclass(frozen=True)
class Prepared:
    """A checked request: one source id list per text, the options, the effective max_new_tokens."""

    sources: list[list[int]]
    options: DecodeOptions
    max_new_tokens: int


class RequestChecker:
    """The limits of one model on one server, and the tokenizer that measures texts against them."""

    def __init__(
        self,
        settings: EngineSettings,
        tokenizer: Tokenizer,
        spec: ModelSpec,
        max_source_len: int,
        max_target_len: int,
        vocab_size: int,
    ) -> None:
        self.settings, self.tokenizer, self.spec = settings, tokenizer, spec
        self.max_source_len, self.max_target_len, self.vocab_size = max_source_len, max_target_len, vocab_size
        self.characters = DocumentLimits(settings.max_text_chars, settings.max_request_chars)

    def prepare(
        self,
        texts: list[str],
        options: DecodeOptions,
        tokenised: Sequence[Sequence[int]] | None = None,
        max_new_tokens: int | None = None,
    ) -> Prepared:
        """Validate and tokenise (once); raises InvalidRequest. ``tokenised``: the texts' ids from
        this tokenizer already (a document's sentences: the splitter measured them), not redone.
        ``max_new_tokens``: what :meth:`check_options` returned for a request checked already (the
        translation service's): the texts and options are trusted, only their tokens are measured."""
        if max_new_tokens is None:
            max_new_tokens = self.check_request(texts, options)
        max_new = max_new_tokens
        if tokenised is None:
            tokenised = [enc.ids for enc in self.tokenizer.encode_batch(list(texts))]
        elif len(tokenised) != len(texts):
            raise ValueError(f"{len(tokenised)} token id lists for {len(texts)} texts")
        ids = [list(options.source_prefix_ids) + list(src) for src in tokenised]
        for i, src in enumerate(ids):
            if len(src) > self.max_source_len:
                raise InvalidRequest(
                    f"text {i} is {len(src)} tokens long after tokenization; this model takes at most "
                    f"{self.max_source_len}: shorten or split it"
                )
            self._check_budgets(i, len(src), options, max_new)
        return Prepared(ids, options, max_new)

    def check_request(self, texts: Sequence[str], options: DecodeOptions) -> int:
        """The checks that need no tokens (count, characters, options, empty texts); returns the
        effective max_new_tokens."""
        limit = self.settings.max_texts_per_request
        if not texts:
            raise InvalidRequest("no texts to translate")
        if len(texts) > limit:
            raise InvalidRequest(f"{len(texts)} texts in one request; the limit is {limit}: split the request")
        # Characters first: a 1 MB text is refused before it is read, let alone tokenised.
        self.characters.check(texts)
        max_new = self.check_options(options)
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise InvalidRequest(f"text {i} is empty")
        return max_new

    def _check_budgets(self, i: int, source_tokens: int, options: DecodeOptions, max_new: int) -> None:
        """A text that could never be admitted is refused now rather than waiting forever."""
        s, budget = self.settings, self.settings.max_tokens_in_flight
        need = options.beam_size * (source_tokens + max_new)
        if need > budget:
            raise InvalidRequest(
                f"text {i} needs {need} tokens in flight (beam_size {options.beam_size} x ({source_tokens} source + "
                f"{max_new} new tokens)); this server allows {budget}: lower max_new_tokens or beam_size"
            )
        cache_bytes = need * self.spec.cache_bytes_per_token
        if s.max_cache_bytes and cache_bytes > s.max_cache_bytes:
            raise InvalidRequest(
                f"text {i} needs {cache_bytes:,} bytes of KV cache ({need} tokens); this server allows "
                f"{s.max_cache_bytes:,}: lower max_new_tokens or beam_size"
            )

    def check_options(self, options: DecodeOptions) -> int:
        """Validate ``options``; returns the effective max_new_tokens."""
        s = self.settings
        if not 1 <= options.beam_size <= s.max_beam_size:
            raise InvalidOption(
                f"beam_size must be in 1..{s.max_beam_size}, got {options.beam_size}", "beam_size", s.max_beam_size
            )
        if options.beam_size > s.max_active_sequences:
            raise InvalidRequest(
                f"beam_size {options.beam_size} needs {options.beam_size} batch rows; this server runs at most "
                f"{s.max_active_sequences}"
            )
        if not 1 <= options.num_hypotheses <= options.beam_size:
            raise InvalidRequest(
                f"num_hypotheses must be in 1..beam_size ({options.beam_size}), got {options.num_hypotheses}"
            )
        if not 0 <= options.max_new_tokens <= self.max_target_len:
            raise InvalidRequest(
                f"max_new_tokens must be in 0..{self.max_target_len} (0 = the model's limit, "
                f"{self.max_target_len}), got {options.max_new_tokens}"
            )
        # |length_penalty| <= 10 keeps len ** length_penalty finite at every target length (found by
        # tests/reliability/test_fuzz.py: 1e30 overflowed inside the decoder step, an INTERNAL).
        if not (math.isfinite(options.length_penalty) and abs(options.length_penalty) <= MAX_LENGTH_PENALTY):
            raise InvalidRequest(
                f"length_penalty must be in -{MAX_LENGTH_PENALTY:g}..{MAX_LENGTH_PENALTY:g} "
                f"(1.0 = average log-probability per token), got {options.length_penalty}"
            )
        if not (math.isfinite(options.temperature) and options.temperature >= 0):
            raise InvalidRequest(f"temperature must be >= 0 (0 = greedy), got {options.temperature}")
        if not 0 < options.top_p <= 1:
            raise InvalidRequest(f"top_p must be in (0, 1] (1 = off), got {options.top_p}")
        if options.top_k < 0:
            raise InvalidRequest(f"top_k must be >= 0 (0 = off), got {options.top_k}")
        if options.seed is not None and options.seed < 0:
            raise InvalidRequest(f"seed must be >= 0, got {options.seed}")
        if options.sampling and options.beam_size > 1:
            raise InvalidRequest(
                f"sampling (temperature {options.temperature}) works with beam_size 1 only, got {options.beam_size}"
            )
        max_new = options.max_new_tokens or self.max_target_len
        self._check_prefix(options, max_new)
        self._check_constraints(options, max_new)
        return max_new

    def _check_constraints(self, options: DecodeOptions, max_new: int) -> None:
        """Glossary terms: ids this model may generate, and room for all of them after the prefix."""
        if not options.constraints:
            return
        spec = self.spec
        banned = {*spec.never_ids, spec.pad_id, spec.eos_id}
        for c in options.constraints:
            for seq in c.term.variants:
                if not seq or any(not 0 <= t < self.vocab_size or t in banned for t in seq):
                    raise InvalidRequest(
                        f"glossary term {c.term.source!r}: its target cannot be generated by this model"
                    )
        need = constraints_cost(options.constraints) + len(options.prefix_ids)
        if need > max_new:
            terms = ", ".join(repr(c.term.source) for c in options.constraints)
            raise InvalidRequest(
                f"the glossary terms of this sentence ({terms}) take {need} tokens with the target prefix, more "
                f"than max_new_tokens ({max_new}): raise max_new_tokens or split the sentence"
            )

    def _check_prefix(self, options: DecodeOptions, max_new: int) -> None:
        """Forced prefix ids: known, not special, no longer than the output; hide_prefix within them."""
        prefix = options.prefix_ids
        if not prefix and not options.hide_prefix:
            return
        if len(prefix) > max_new:
            raise InvalidRequest(
                f"the forced target prefix is {len(prefix)} tokens, more than max_new_tokens ({max_new})"
            )
        spec = self.spec
        special = {t: "a token this model never generates" for t in spec.never_ids}
        special.update({spec.pad_id: "the padding token", spec.eos_id: "the end token"})
        for i, tok in enumerate(prefix):
            if not (isinstance(tok, int) and 0 <= tok < self.vocab_size):
                raise InvalidRequest(
                    f"prefix token {i} is {tok!r}; this model's token ids are 0..{self.vocab_size - 1}"
                )
            if tok in special:
                raise InvalidRequest(f"prefix token {i} is {special[tok]} ({tok}); it cannot be forced")
        if not 0 <= options.hide_prefix <= len(prefix):
            raise InvalidRequest(
                f"hide_prefix must be in 0..{len(prefix)} (the forced prefix's length), got {options.hide_prefix}"
            )
