"""Surrogates: a glossary term written, while decoding, as the model's own rendering of its source.

A constrained search that feeds the decoder a target the model never writes (``MÄRZ`` in
capitals, an English name kept in German) leaves a small model lost for the rest of the
sentence: it drops or garbles the words after the term. So the search writes the model's own
words for the source term instead (its surrogate; the decoder is only ever fed tokens it chose
itself), and the finished hypothesis, and a stream as it goes, has every span that paid the
term swapped for the target's tokens (``translation/term_swap.py``): the terms still come out
verbatim, every occurrence counted, and the rest of the sentence is what the model writes
around its own word.

A term's surrogate is its source translated alone by the same engine (greedy, with the
request's language tokens), decided the first time a request's sentence contains the term and
kept per model, language and target (:func:`bind`; a server's default glossary is decided once
per model, term by term as they turn up). It is used only when

- it is a sane short word sequence (:func:`rendering`): the model finished it (the end token),
  it has letters or digits, at most ``2 x`` the source term's tokens ``+ 2``, no token or run
  of tokens repeated back to back, and its edges hold no punctuation the source term's lack;
- and the target is foreign to the model: teacher-forced as the whole translation of the term
  alone, it scores :data:`FOREIGN` nats or more below the rendering (:func:`decide`).

Otherwise the search writes the target's own tokens, and so it does for every term
of a sentence whose surrogates' spans could overlap (``term_swap.separable``). Why only foreign
targets: a target the model writes itself is its own word (nothing to change), and a target
that is another ordinary word the model knows (it says "Monitor", the glossary "Bildschirm")
is better fed as it is, so the words after it can agree with it; only a target the model would
never write derails it. The renderings are no better than the model's words out of context: on
the bundled translator "Tuesday" alone is "zwölf", so a sentence's "Dienstag" is not taken for
the term, which then goes where the search places an unproposed term (at the end); the output
stays verbatim.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from functools import lru_cache

from tokenizers import Tokenizer

from attnserve.contract.target_text import target_side

from ..translation import DecodeOptions, Hypothesis, TermTokens, TranslationEngine
from ..translation.terms import Tokens
from .glossary import CompiledGlossary
from .requests import Deadline, ValidTranslation

log = logging.getLogger(__name__)

CACHED_PER_ENGINE = 16_384  # decisions kept per loaded model, the least recently used out
# A target at least e^FOREIGN times less likely than the model's own rendering of the term alone
# is foreign to the model. On the bundled translator, where a month's or weekday's rendering is
# not the model's German word itself, that word scores at most 1.1 nats below it (Tuesday:
# "zwölf"), the word in capitals 21.6 to 93.3 below and the English name 13.3 to 25.7 below.
FOREIGN = 6.0
SCORING_IN_FLIGHT = 16  # one-text engine calls that score renderings and targets at a time
RENDERED_PER_CALL = 64  # source terms one engine call renders
Language = tuple[tuple[int, ...], tuple[int, ...]]  # (source prefix ids, hidden target prefix ids)

# (language, source term, target's initial tokens) -> the surrogate's tokens, or None (none used)
_decided: weakref.WeakKeyDictionary[TranslationEngine, OrderedDict[tuple, Tokens | None]] = weakref.WeakKeyDictionary()


async def attach(valid: ValidTranslation, sentences: Iterable[str]) -> ValidTranslation:
    """``valid`` with its glossary's surrogates for the terms ``sentences`` contain (:func:`bind`)."""
    if valid.glossary is None:
        return valid
    glossary = await bind(valid.model.engine, valid.glossary, sentences, valid.options, valid.request.deadline)
    return dataclasses.replace(valid, glossary=glossary)


async def bind(
    engine: TranslationEngine,
    glossary: CompiledGlossary,
    sentences: Iterable[str],
    options: DecodeOptions,
    deadline: Deadline | None = None,
) -> CompiledGlossary:
    """``glossary`` with the surrogates of the terms ``sentences`` contain on ``engine`` in the
    language ``options`` ask for: terms not decided yet on this model and language are decided
    first (:func:`decide`, within ``deadline``)."""
    sources = sorted({term for sentence in sentences for term in glossary.found(sentence)})
    if not sources:
        return glossary
    language = (tuple(options.source_prefix_ids), tuple(options.prefix_ids[: options.hide_prefix]))
    keys = {s: (language, s, glossary.terms[s].initial) for s in sources}
    cache = _decided.setdefault(engine, OrderedDict())
    known = {s: cache[k] for s, k in keys.items() if k in cache}
    missing = [s for s in sources if s not in known]
    if missing:
        known |= dict(zip(missing, await decide(engine, [glossary.terms[s] for s in missing], language, deadline)))
    for source, key in keys.items():  # the most recently used last
        cache[key] = known[source]
        cache.move_to_end(key)
    while len(cache) > CACHED_PER_ENGINE:
        cache.popitem(last=False)
    surrogates = {}
    for source, tokens in known.items():
        term = glossary.terms[source]
        if tokens is not None and (surrogate := with_surrogate(engine.tokenizer, term, tokens)) is not term:
            surrogates[source] = surrogate
    return glossary.with_surrogates(surrogates)


async def decide(
    engine: TranslationEngine, terms: Sequence[TermTokens], language: Language, deadline: Deadline | None = None
) -> list[Tokens | None]:
    """Each term's surrogate: its source's rendering (:func:`render`) where that is sane and
    the target is foreign to the model (scored after the source term alone, :data:`FOREIGN`
    nats or more below the rendering), else None."""
    renderings = await render(engine, [t.source for t in terms], language, deadline)
    text = engine.tokenizer.decode
    fits = engine.max_target_len - len(language[1])  # a longer target is refused by the length check
    todo = [
        i
        for i, r in enumerate(renderings)
        if r is not None and text(list(r)).strip() != terms[i].target and len(terms[i].initial) <= fits
    ]
    pairs = [(terms[i].source, seq) for i in todo for seq in (renderings[i], terms[i].initial)]
    scores = await score(engine, pairs, language, deadline)
    out: list[Tokens | None] = [None] * len(terms)
    for j, i in enumerate(todo):
        own, target = scores[2 * j], scores[2 * j + 1]
        if target < own - FOREIGN:
            out[i] = renderings[i]
    return out


async def render(
    engine: TranslationEngine, sources: Sequence[str], language: Language, deadline: Deadline | None = None
) -> list[Tokens | None]:
    """Each source term's rendering by ``engine`` alone (greedy), or None where it is not sane
    (:func:`rendering`) or the term is longer than the model's source limit."""
    source_prefix, hidden = language
    ids = [enc.ids for enc in engine.tokenizer.encode_batch(list(sources))]
    fits = [i for i, src in enumerate(ids) if len(source_prefix) + len(src) <= engine.max_source_len]
    out: list[Tokens | None] = [None] * len(sources)
    if not fits:
        return out
    longest = max(len(ids[i]) for i in fits)
    limit = min(engine.max_target_len, len(hidden) + longest_rendering(longest) + 1)  # + the end token
    options = DecodeOptions(
        max_new_tokens=limit,
        return_scores=False,
        prefix_ids=hidden,
        hide_prefix=len(hidden),
        source_prefix_ids=source_prefix,
    )
    chunk = max(1, min(RENDERED_PER_CALL, engine.settings.max_queue_size // 2))  # never the whole queue
    for start in range(0, len(fits), chunk):
        part = fits[start : start + chunk]
        prepared = engine.prepare([sources[i] for i in part], options, [ids[i] for i in part])
        for i, result in zip(part, await engine.translate(prepared, deadline=deadline)):
            out[i] = rendering(engine.tokenizer, sources[i], result.hypotheses[0], len(ids[i]))
    log.debug("glossary renderings: %s", dict(zip(sources, out)))
    return out


async def score(
    engine: TranslationEngine, pairs: Sequence[tuple[str, Tokens]], language: Language, deadline: Deadline | None
) -> list[float]:
    """The model's log-probability of each ``(source, tokens)``: ``tokens`` as the whole
    translation of ``source`` so far (a forced prefix, no end token)."""
    source_prefix, hidden = language
    gate = asyncio.Semaphore(SCORING_IN_FLIGHT)

    async def one(source: str, tokens: Tokens) -> float:
        prefix = hidden + tokens
        options = DecodeOptions(
            max_new_tokens=min(len(prefix), engine.max_target_len),
            prefix_ids=prefix,
            hide_prefix=len(hidden),
            source_prefix_ids=source_prefix,
        )
        async with gate:
            (result,) = await engine.translate(engine.prepare([source], options), deadline=deadline)
        return result.hypotheses[0].logprob

    tasks = [asyncio.ensure_future(one(source, tokens)) for source, tokens in pairs]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()


def longest_rendering(source_tokens: int) -> int:
    """The most tokens a sane rendering of a source term of ``source_tokens`` tokens has."""
    return 2 * source_tokens + 2


def rendering(tokenizer: Tokenizer, source: str, hypothesis: Hypothesis, source_tokens: int) -> Tokens | None:
    """The tokens of a term's translation alone when they are a sane short word sequence (the
    module docstring), else None."""
    if hypothesis.finish_reason != "eos":
        return None
    tokens = list(hypothesis.token_ids[:-1])  # the end token off
    texts = tokenizer.decode_batch([[t] for t in tokens], skip_special_tokens=True)
    while tokens and source[-1:].isalnum() and not _has_alnum(texts[-1]):
        tokens.pop(), texts.pop()
    while tokens and source[:1].isalnum() and not _has_alnum(texts[0]):
        tokens.pop(0), texts.pop(0)
    if not tokens or len(tokens) > longest_rendering(source_tokens) or _stutters(tokens):
        return None
    text = tokenizer.decode(tokens, skip_special_tokens=True)
    if "\ufffd" in text or not _has_alnum(text):
        return None
    return tuple(tokens)


def _has_alnum(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


def _stutters(tokens: list[int]) -> bool:
    """A token or a run of tokens repeated back to back (a degenerate rendering: "FebruarFebruarte")."""
    n = len(tokens)
    return any(
        tokens[i : i + k] == tokens[i + k : i + 2 * k] for k in range(1, n // 2 + 1) for i in range(n - 2 * k + 1)
    )


@lru_cache(maxsize=8192)  # (tokenizer, term, rendering): a default glossary's terms once per model
def with_surrogate(tokenizer: Tokenizer, term: TermTokens, tokens: Tokens) -> TermTokens:
    """``term`` written as ``tokens`` (a rendering of its source) with its target's tokens to swap
    in; ``term`` itself where the rendering spells the target. The written forms: the rendering
    as the model wrote it (at the start of the output, and anywhere on a vocabulary whose word
    marker starts a word anywhere: SentencePiece), and on a byte-level vocabulary its text after a
    space, tokenised as a target is (``glossary.term_tokens``)."""
    text = tokenizer.decode(list(tokens), skip_special_tokens=True).strip()
    if text == term.target:
        return term
    if term.spaced == term.initial:
        spaced = tokens
    else:
        spaced = tuple(target_side(tokenizer).encode(" " + text, add_special_tokens=False).ids)
        if tokenizer.decode(list(spaced), skip_special_tokens=True).strip() != text:
            return term
    if (spaced, tokens) == (term.spaced, term.initial):
        return term
    targets = (term.spaced, term.initial)
    return dataclasses.replace(term, spaced=spaced, initial=tokens, surrogate=text, target_tokens=targets)
