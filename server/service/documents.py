"""Texts as documents on a translation engine: the translation service's only way to the engine.

:func:`translate` and :func:`.document_stream.stream` take a :class:`~.requests.ValidTranslation` (checked
once by the service: texts, characters, format, options) and its split documents. Each
sentence is tokenised once, by the splitter that measures it against the source limit; the
engine measures those ids against its limits (``engine.prepare(..., max_new_tokens=)``:
the request's checks are not run again) and decodes them, each job carrying the request's
deadline.

:func:`translate` returns whole results, :mod:`.document_stream` a document's events; both
read the same sentence events (:func:`.sentence_pipeline.decode`), each sentence's last one carrying its
whole result.

A text is a document: ``attnserve.server.documents`` splits it into lines and sentences,
normalises each sentence and cuts one longer than the model's source limit at clause
punctuation or whitespace; the engine translates the sentences, and the document is joined
back with its separators exactly as sent (newlines, blank lines, indentation, the spaces
between sentences, html markup). Sentences are split by the rules of the request's source
language (the model's, when it declares one source language; English rules otherwise).

The sentences of all texts of a request go to the engine together (:mod:`.sentences`, the one
pipeline of a unary call and a stream: :func:`translate_sentences` drains it), in calls of at most
``--max-texts-per-request`` sentences (``ValidTranslation.sentences_per_call``; sentences with the same
options share a call, see :func:`sentence_options`) that run concurrently, so
they share decode steps in the continuous batcher with each other and with other requests. At
most half of the engine's queue (``max_queue_size``) is taken by one request at a time: a
50,000-character document (hundreds of sentences) does not fill the queue and refuse everyone
else; its later sentences are submitted as earlier ones finish. A sentence repeated with the
same token ids and options is decoded once for the request (unary or stream) unless the options
sample: 45 KB of ``<b>a `` is one decode, not 9,000 rows of the decode batch.

Results per document: :mod:`.document_results`.

A text with nothing to translate (only punctuation, symbols or markup) comes back as sent.
A forced target prefix (``DecodeOptions.prefix_ids``): its hidden part (a target-language
token) starts every sentence, its visible part (a user's target prefix) only the first
sentence of each text (:func:`sentence_options`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field

from ..documents import HTML_RULES, DocumentSplitter, MarkupRules, PreparedDocument, TokenBudget
from ..documents.alignment import WordAlignment
from ..shared import stopping
from ..translation import DecodeOptions, TranslationEngine, TranslationResult
from .document_results import as_written, document_result, searched
from .languages import segmenter_language
from .requests import ValidTranslation
from .sentence_pipeline import Work, decode

# Requests up to this many characters are split on the event loop (well under a millisecond).
INLINE_SPLIT_CHARS = 2_000
INLINE_SEGMENTS = 64  # requests of up to this many segments are joined back on the event loop
MAX_LANGUAGES = 64  # sentence splitters kept per engine, one per source language
Progress = Callable[[int], None]  # told how many more of the documents' sentences are decoded
# told the positions (among the documents' sentences, in order) and results of sentences decoded
Decoded = Callable[[Sequence[int], Sequence[TranslationResult]], None]


@dataclass
class _EngineDocuments:
    budget: TokenBudget
    language: str  # the model's source language, when it declares one
    splitters: dict[str, DocumentSplitter] = field(default_factory=dict)

    def splitter(self, language: str | None = None) -> DocumentSplitter:
        """The splitter for ``language`` (a request's source language), else the model's."""
        language = segmenter_language(language) if language else self.language
        splitter = self.splitters.get(language)
        if splitter is None:
            first = next(iter(self.splitters.values()), None)
            normalize = first.normalize if first is not None else None  # parsed from tokenizer.json once
            splitter = DocumentSplitter(self.budget, normalize, language=language)
            if len(self.splitters) < MAX_LANGUAGES:  # codes come from requests: the cache stays bounded
                self.splitters[language] = splitter
        return splitter


_per_engine: weakref.WeakKeyDictionary[TranslationEngine, _EngineDocuments] = weakref.WeakKeyDictionary()


def _documents(engine: TranslationEngine) -> _EngineDocuments:
    """The splitters of ``engine``'s tokenizer and source limit, built once per engine and language."""
    docs = _per_engine.get(engine)
    if docs is None:
        languages = engine.manifest.languages if engine.manifest is not None else None
        sources = list(languages.source) if languages is not None else []
        language = segmenter_language(sources[0] if len(sources) == 1 else None)  # many: the request says
        docs = _per_engine[engine] = _EngineDocuments(TokenBudget(engine.tokenizer, engine.max_source_len), language)
    return docs


def split(
    engine: TranslationEngine,
    texts: Sequence[str],
    format: str,
    language: str = "",
    place_inline: bool = False,
    styled: Sequence[Sequence[tuple[int, int]]] | None = None,
    markup: MarkupRules = HTML_RULES,
) -> list[PreparedDocument]:
    """Each text as a document of sentences in ``language``'s rules ("": the model's);
    ``place_inline``: inline markup kept inside its sentence, to be placed by alignment;
    ``styled``: a file's paragraphs' styled stretches (``DocumentSplitter.split_many``);
    ``markup``: how html's tags are read (the request's ``MarkupRules``)."""
    splitter = _documents(engine).splitter(language or None)
    return splitter.split_many(texts, format, place_inline, styled, markup)


def normalizer(engine: TranslationEngine):
    """How ``engine``'s sentences are normalised before they are tokenised (glossary terms are too)."""
    return _documents(engine).splitter().normalize


def with_terms(valid: ValidTranslation, sentence: str, options: DecodeOptions) -> DecodeOptions:
    """``options`` with the glossary terms ``sentence`` contains (``glossary.py``)."""
    if valid.glossary is None:
        return options
    return valid.glossary.options(sentence, options, valid.max_new_tokens)


async def split_documents(
    valid: ValidTranslation,
    pool: Executor,
    place_inline: bool = False,
    styled: Sequence[Sequence[tuple[int, int]]] | None = None,
) -> list[PreparedDocument]:
    """The request's documents, split on ``pool`` unless the request is small: segmenting and
    tokenising 50,000 characters takes a few hundred ms on a busy core (sentencex and tokenizers
    run in Rust without the GIL), which on the event loop would stall every other call."""
    request, engine = valid.request, valid.model.engine
    args = (engine, request.texts, request.format, valid.source_language, place_inline, styled, request.markup)
    if sum(len(t) for t in request.texts) <= INLINE_SPLIT_CHARS:
        return split(*args)
    return await stopping.run(pool, split, *args)  # a cancel stops it at the next text or line


def sentence_options(options: DecodeOptions) -> tuple[DecodeOptions, DecodeOptions]:
    """(options of a document's first sentence, options of every later one).

    A forced target prefix has two parts (``DecodeOptions.prefix_ids``): the hidden leading
    ids (``hide_prefix``: a target-language token) start every sentence; the visible rest (a
    user's target prefix) starts the document, so only its first sentence."""
    prefix, hidden = options.prefix_ids, options.hide_prefix
    if len(prefix) <= hidden:
        return options, options
    return options, dataclasses.replace(options, prefix_ids=tuple(prefix[:hidden]))


def sentence_work(
    valid: ValidTranslation, prepared: Sequence[PreparedDocument], keep_for_alignment: Iterable[int] = ()
) -> tuple[Work, list[int]]:
    """(the sentences to decode, the index in it of every sentence of the documents, in order):
    the one way a request's sentences become engine work, whole results or a stream. Each
    sentence's options are its place's (:func:`sentence_options`) with the glossary terms it
    contains; those at the positions ``keep_for_alignment`` keep what word alignments read.
    A sentence repeated with the same ids and options is decoded once unless the options
    sample (greedy and beam search give it the same result each time): a document of 9,000
    ``<b>a`` pieces is one decode, not 9,000 rows of the decode batch."""
    distinct, order = _distinct(valid, prepared)
    steps = valid.model.engine.step_attention
    for i in {order[p] for p in keep_for_alignment}:
        sentence, ids, options = distinct[i]
        distinct[i] = (sentence, ids, options.for_alignment(steps))
    return distinct, order


def piece_work(valid: ValidTranslation, prepared: Sequence[PreparedDocument]) -> Work:
    """Every sentence of the documents, in order, with its options: its place's
    (:func:`sentence_options`) with the glossary terms it contains."""
    first, rest = sentence_options(searched(valid.options))
    return [
        (s, ids, with_terms(valid, s, rest if i else first))
        for p in prepared
        for i, (s, ids) in enumerate(zip(p.sources, p.ids))
    ]


async def work_of(valid: ValidTranslation, prepared: Sequence[PreparedDocument], pool: Executor | None) -> Work:
    """:func:`piece_work`, on ``pool`` for many sentences (see :func:`_off_loop`)."""
    return await _off_loop(prepared, pool)(piece_work, valid, prepared)


def _distinct(valid: ValidTranslation, prepared: Sequence[PreparedDocument]) -> tuple[Work, list[int]]:
    work = piece_work(valid, prepared)
    if valid.options.sampling:
        return work, list(range(len(work)))
    index: dict[tuple[tuple[int, ...], DecodeOptions], int] = {}  # (ids, options) -> its place in distinct
    distinct: Work = []
    order = []
    for sentence, ids, options in work:
        at = index.setdefault((tuple(ids), options), len(distinct))
        if at == len(distinct):
            distinct.append((sentence, ids, options))
        order.append(at)
    return distinct, order


def _join(
    valid: ValidTranslation,
    prepared: Sequence[PreparedDocument],
    results: Sequence[TranslationResult],
    alignments: Sequence[Sequence[Sequence[WordAlignment]]] | None,
) -> list[TranslationResult]:
    out, at = [], 0
    for i, p in enumerate(prepared):
        placed = alignments[i] if alignments is not None else None
        out.append(document_result(p, results[at : at + p.segments], valid.options.num_hypotheses, placed))
        at += p.segments
    return out


def _off_loop(prepared: Sequence[PreparedDocument], pool: Executor | None):
    """Runs a function on ``pool`` when the documents have over ``INLINE_SEGMENTS`` segments:
    deduplicating or joining back 9,000 html pieces takes a busy core about 100 ms of Python,
    which on the event loop would stall every other call."""
    inline = pool is None or sum(p.segments for p in prepared) <= INLINE_SEGMENTS

    async def run(fn, *args):
        return fn(*args) if inline else await stopping.run(pool, fn, *args)

    return run


async def translate(
    valid: ValidTranslation,
    prepared: list[PreparedDocument],
    pool: Executor | None = None,
    progress: Progress | None = None,
) -> list[TranslationResult]:
    """One ``TranslationResult`` per document, in order (:func:`translate_sentences`, then
    :func:`join`)."""
    return await join(valid, prepared, await translate_sentences(valid, prepared, pool, progress), None, pool)


async def translate_sentences(
    valid: ValidTranslation,
    prepared: list[PreparedDocument],
    pool: Executor | None = None,
    progress: Progress | None = None,
    decoded: Decoded | None = None,
    keep_for_alignment: Iterable[int] = (),
    known: Mapping[str, str] | None = None,
) -> list[TranslationResult]:
    """One ``TranslationResult`` per sentence of every document, one document after another.
    ``progress(n)``: n more of the documents' sentences decoded (a sentence decoded once for
    its repeats counts for each of them), as engine calls finish; ``decoded(positions,
    results)``: those sentences and their results, likewise. ``keep_for_alignment``: the positions of
    the sentences whose results keep what word alignments read (``DecodeOptions.for_alignment``:
    each hypothesis's steps' attention, or where the decoder lacks it the encoder's output).
    ``known``: sentences already translated (an interrupted file job's), not sent to the engine
    unless kept for alignment (what alignment reads is not stored); told to ``progress`` first."""
    keep_for_alignment = list(keep_for_alignment)
    distinct, order = await _off_loop(prepared, pool)(sentence_work, valid, prepared, keep_for_alignment)
    kept = {order[p] for p in keep_for_alignment}
    reused = {i: as_written(known[s]) for i, (s, _, _) in enumerate(distinct) if known and s in known and i not in kept}
    todo = [i for i in range(len(distinct)) if i not in reused]
    finished = None
    if progress is not None or decoded is not None:
        positions: dict[int, list[int]] = {}  # distinct sentence -> the documents' sentences it is
        for position, i in enumerate(order):
            positions.setdefault(i, []).append(position)
        if progress is not None and reused:
            progress(sum(len(positions[i]) for i in reused))

        def finished(indices: Sequence[int], results: Sequence[TranslationResult]) -> None:
            indices = [todo[i] for i in indices]
            if decoded is not None:  # first: a file job stores its sentences before their progress
                pairs = [(p, r) for i, r in zip(indices, results) for p in positions[i]]
                decoded([p for p, _ in pairs], [r for _, r in pairs])
            if progress is not None:
                progress(sum(len(positions[i]) for i in indices))

    work = [distinct[i] for i in todo]
    done: dict[int, TranslationResult] = dict(reused)
    if work:  # the sentences' one pipeline, drained: each sentence's last event carries its result
        async with contextlib.aclosing(decode(valid, work, stepped=finished is not None)) as events:
            async for indices, last in events:
                results = [event.result for event in last]
                if finished is not None:
                    finished(indices, results)
                done.update((todo[i], result) for i, result in zip(indices, results))
    return [done[i] for i in order]


async def join(
    valid: ValidTranslation,
    prepared: list[PreparedDocument],
    results: Sequence[TranslationResult],
    alignments: Sequence[Sequence[Sequence[WordAlignment]]] | None = None,
    pool: Executor | None = None,
) -> list[TranslationResult]:
    """The documents' results from their sentences' (:func:`translate_sentences`); ``alignments``
    per document, per sentence, per hypothesis place inline markup (documents split with
    ``place_inline``)."""
    return await _off_loop(prepared, pool)(_join, valid, prepared, results, alignments)
