"""Every limit a translation request is checked against, and each refusal's wording: the
translation service's error catalogue (TGI's ``validation.rs``).

The service checks a request once, here, before anything below it runs: its texts (count,
characters per text and per request, empty ones: before any text is read), the forced target
prefix, the language codes, the text format and its markup rules, the glossary terms, what a stream or a pivot
cannot carry, and the decoding options against the model's limits (:func:`check_options`,
which returns the effective ``max_new_tokens``); the time limit every request runs under
(:func:`time_limit`). The doors
parse their parameters into types (``server/params.py``) and check nothing else. The engine
trusts what it receives: it measures only each text's tokens against its admission budgets
(``translation/prepared.py``: :func:`measure`), which need the tokens.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from attnserve.contract.deadline import Deadline

from ..documents import FORMATS, TAG_NAME, MarkupRules
from ..shared.config import Settings
from ..shared.errors import InvalidOption, InvalidRequest, LimitExceeded, UnknownFormat, echo
from ..translation import DecodeOptions, TranslationEngine
from ..translation.prepared import ModelLimits, Prepared
from ..translation.terms import constraints_cost

if TYPE_CHECKING:
    from .requests import TranslationRequest

MAX_LANGUAGE_CODE = 64  # characters: BCP 47 tags with every subtag are far shorter
MAX_LENGTH_PENALTY = 10.0
MAX_SEED = 2**64 - 1  # the seed of numpy's generator, and attnserve.v1's uint64


def check_texts(settings: Settings, texts: tuple[str, ...] | list[str]) -> None:
    """The server's limits on a request's texts, checked before anything is read. A blank text is
    not refused: it comes back as sent, without the model, as LibreTranslate and DeepL answer
    a batch with blank entries (clients send tables of strings, some of them empty)."""
    s = settings
    if not texts:
        raise InvalidRequest("no texts to translate")
    if len(texts) > s.max_texts_per_request:
        raise LimitExceeded(
            f"{len(texts)} texts in one request; the limit is {s.max_texts_per_request}: split the request",
            "max_texts_per_request", len(texts), s.max_texts_per_request,
        )  # fmt: skip
    for i, text in enumerate(texts):
        if len(text) > s.max_text_chars:
            raise LimitExceeded(
                f"text {i} is {len(text):,} characters; this server takes at most {s.max_text_chars:,} per "
                "text: split it",
                "max_text_chars", len(text), s.max_text_chars,
            )  # fmt: skip
    total = sum(map(len, texts))
    if total > s.max_request_chars:
        raise LimitExceeded(
            f"the texts of this request are {total:,} characters together; this server takes at most "
            f"{s.max_request_chars:,} per request: send them in several requests",
            "max_request_chars", total, s.max_request_chars,
        )  # fmt: skip


def check_prefix(settings: Settings, prefix: str) -> None:
    """A ``target_prefix`` is client text like the texts: at most ``max_text_chars``, checked
    before it is tokenised (4M characters would hold the event loop for seconds)."""
    limit = settings.max_text_chars
    if len(prefix) > limit:
        raise LimitExceeded(
            f"target_prefix is {len(prefix):,} characters; this server takes at most {limit:,} per text",
            "max_text_chars", len(prefix), limit,
        )  # fmt: skip


def time_limit(deadline: Deadline | None, seconds: float, file: bool = False) -> Deadline | None:
    """A request's deadline, or the server's time limit of ``seconds`` from now when that passes first
    (``--request-timeout-seconds``, a file's ``--file-timeout-seconds``; 0: none)."""
    per = " per file (--file-timeout-seconds)" if file else " (--request-timeout-seconds)"
    return Deadline.within(deadline, seconds, f"the server's time limit of {seconds:g} s{per}")


def check_language_codes(source: str, target: str) -> None:
    """Language codes are parsed (langcodes) and cached: one of megabytes is refused first."""
    for side, code in (("source", source), ("target", target)):
        if len(code) > MAX_LANGUAGE_CODE:
            raise InvalidRequest(
                f"{side}_language is {len(code):,} characters; a language code has at most {MAX_LANGUAGE_CODE}"
            )


# C0 and C1 control characters (tab and newlines among them) and Unicode's line and paragraph
# separators: a term holding one could not come out verbatim (DeepL's glossaries refuse them too).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def check_term_characters(source: str, target: str) -> None:
    """InvalidRequest when a glossary term holds a control character (:data:`_CONTROL`)."""
    for side, text in (("source", source), ("target", target)):
        if found := _CONTROL.search(text):
            raise InvalidRequest(
                f"glossary term {echo(source[:40])}: its {side} holds the control character "
                f"U+{ord(found.group()):04X}; terms are one line of printable text"
            )


def check_terms(entries: Sequence[tuple[str, str]], max_chars: int) -> None:
    """Each term of a glossary, sent with a request or stored: a source, one line of printable
    text on either side, each side within ``--max-glossary-term-chars``."""
    for source, target in entries:
        if not source.strip():
            raise InvalidRequest("a glossary term's source is empty")
        check_term_characters(source, target)
        for side, text in (("source", source), ("target", target)):
            if len(text) > max_chars:
                raise LimitExceeded(
                    f"glossary term {echo(source[:40])}: its {side} is {len(text):,} characters; this server "
                    f"takes at most {max_chars} per term (--max-glossary-term-chars)",
                    "max_glossary_term_chars", len(text), max_chars,
                )  # fmt: skip


def check_glossary(settings: Settings, entries: Sequence[tuple[str, str]]) -> None:
    """A request's own glossary entries against the server's limits (the default ones are the operator's)."""
    max_terms = settings.max_glossary_terms
    if len(entries) > max_terms:
        raise LimitExceeded(
            f"the glossary has {len(entries)} terms; this server takes at most {max_terms} per request",
            "max_glossary_terms", len(entries), max_terms,
        )  # fmt: skip
    check_terms(entries, settings.max_glossary_term_chars)


def check_format(format: str) -> None:
    if format not in FORMATS:
        raise UnknownFormat(format, FORMATS)


def check_markup(rules: MarkupRules) -> None:
    """The tags the markup rules name are tag names (the reader could never meet another, so a
    typo would silently do nothing), and none both splits and never splits."""
    for option in ("ignore_tags", "splitting_tags", "non_splitting_tags"):
        for name in sorted(getattr(rules, option)):
            if not TAG_NAME.match(name):
                raise InvalidRequest(
                    f"{option}: {echo(name)} is not a tag name (a letter, then letters, digits, '_', '-', '.' or ':')"
                )
    both = {rules.fold(n) for n in rules.splitting_tags} & {rules.fold(n) for n in rules.non_splitting_tags}
    if both:
        raise InvalidRequest(f"{echo(min(both))} is in both splitting_tags and non_splitting_tags: name it in one")


def check_pivot(alignments: bool, source: str, target: str, pivot: str) -> None:
    """What a pivot (two models) cannot carry: word alignments link one model's words."""
    if alignments:
        raise InvalidRequest(
            f"alignments link the words of one model's source and translation; {source} -> {target} goes "
            f"through {pivot} (two models): ask without alignments"
        )


def check_alternatives(alternatives: int) -> None:
    """How many distinct alternatives a request asks for (``alternatives.py``): none or some."""
    if alternatives < 0:
        raise InvalidRequest(f"distinct_alternatives must be 0 or more, got {alternatives}")


def check_stream(request: TranslationRequest) -> None:
    """What a stream cannot carry: one text's tokens as they come, greedy or sampling."""
    if len(request.texts) != 1:
        raise InvalidRequest(f"a stream translates one text, got {len(request.texts)}")
    if request.options.beam_size > 1:
        beam = request.options.beam_size
        raise InvalidRequest(f"streaming works with beam_size 1 (greedy or sampling), got {beam}")
    if request.alignments:
        raise InvalidRequest("alignments come with whole translations (Translate), not with a stream")
    if request.quality:
        raise InvalidRequest("quality scores come with whole translations (Translate), not with a stream")
    if request.distinct_alternatives:
        raise InvalidRequest("distinct alternatives come with whole translations (Translate), not with a stream")


def check_options(limits: ModelLimits, options: DecodeOptions) -> int:
    """Decoding options against the model's and the server's limits; returns the effective
    max_new_tokens (0: the model's limit)."""
    s = limits.settings
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
    if not 0 <= options.max_new_tokens <= limits.max_target_len:
        raise InvalidRequest(
            f"max_new_tokens must be in 0..{limits.max_target_len} (0 = the model's limit, "
            f"{limits.max_target_len}), got {options.max_new_tokens}"
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
    if options.seed is not None and options.seed > MAX_SEED:
        raise InvalidRequest(f"seed must be in 0..{MAX_SEED}, got {options.seed}")
    if options.sampling and options.beam_size > 1:
        raise InvalidRequest(
            f"sampling (temperature {options.temperature}) works with beam_size 1 only, got {options.beam_size}"
        )
    max_new = options.max_new_tokens or limits.max_target_len
    _check_prefix_ids(limits, options, max_new)
    _check_constraints(limits, options, max_new)
    return max_new


def _check_constraints(limits: ModelLimits, options: DecodeOptions, max_new: int) -> None:
    """Glossary terms: ids this model may generate, and room for all of them after the prefix."""
    if not options.constraints:
        return
    spec = limits.spec
    banned = {*spec.never_ids, spec.pad_id, spec.eos_id}
    for c in options.constraints:
        for seq in c.term.variants:
            if not seq or any(not 0 <= t < limits.vocab_size or t in banned for t in seq):
                raise InvalidRequest(f"glossary term {c.term.source!r}: its target cannot be generated by this model")
    need = constraints_cost(options.constraints) + len(options.prefix_ids)
    if need > max_new:
        terms = ", ".join(repr(c.term.source) for c in options.constraints)
        raise InvalidRequest(
            f"the glossary terms of this sentence ({terms}) take {need} tokens with the target prefix, more "
            f"than max_new_tokens ({max_new}): raise max_new_tokens or split the sentence"
        )


def _check_prefix_ids(limits: ModelLimits, options: DecodeOptions, max_new: int) -> None:
    """Forced prefix ids: known, not special, no longer than the output; hide_prefix within them."""
    prefix = options.prefix_ids
    if not prefix and not options.hide_prefix:
        return
    if len(prefix) > max_new:
        raise InvalidRequest(f"the forced target prefix is {len(prefix)} tokens, more than max_new_tokens ({max_new})")
    spec = limits.spec
    special = {t: "a token this model never generates" for t in spec.never_ids}
    special.update({spec.pad_id: "the padding token", spec.eos_id: "the end token"})
    for i, tok in enumerate(prefix):
        if not (isinstance(tok, int) and 0 <= tok < limits.vocab_size):
            raise InvalidRequest(f"prefix token {i} is {tok!r}; this model's token ids are 0..{limits.vocab_size - 1}")
        if tok in special:
            raise InvalidRequest(f"prefix token {i} is {special[tok]} ({tok}); it cannot be forced")
    if not 0 <= options.hide_prefix <= len(prefix):
        raise InvalidRequest(
            f"hide_prefix must be in 0..{len(prefix)} (the forced prefix's length), got {options.hide_prefix}"
        )


def prepare(engine: TranslationEngine, texts: Sequence[str], options: DecodeOptions) -> Prepared:
    """Texts and options the service made itself, or a benchmark's, checked and prepared for
    ``engine`` (the options here, the tokens by the engine)."""
    return engine.prepare(texts, options, None, check_options(engine.limits, options))
