"""The one place protocol layers call a translation engine, and where texts become documents.

attnserve.v1, KServe v2 (gRPC and REST) and the HTTP routes all translate through
:func:`translate` and :func:`stream`, so every protocol gets documents (issue 14) at once and
a change of the engine's API is a change here and nowhere else. Each sentence is tokenised
once, by the splitter that measures it against the source limit; the engine checks the
sentences with those ids (``engine.prepare``) and decodes them.

A text is a document: ``attnserve.server.documents`` splits it into lines and sentences,
normalises each sentence and cuts one longer than the model's source limit at clause
punctuation or whitespace; the engine translates the sentences, and the document is joined
back with its separators exactly as sent (newlines, blank lines, indentation, the spaces
between sentences, html markup). The checks come first: characters per text and per request
before anything is read, then the format, then the decoding options, so a bad request fails
with InvalidRequest before it costs a decoder row.

The sentences of all texts of a request go to the engine together, in calls of at most
``max_texts_per_request`` sentences (the engine's per-call limit; sentences with the same
options share a call, see :func:`sentence_options`) that run concurrently, so
they share decode steps in the continuous batcher with each other and with other requests. At
most half of the engine's queue (``max_queue_size``) is taken by one request at a time: a
50,000-character document (hundreds of sentences) does not fill the queue and refuse everyone
else; its later sentences are submitted as earlier ones finish.

Results per document (what attnserve.v1's ``Translation`` and KServe's ``TRANSLATION`` carry):

- the best hypothesis is every sentence's best, joined;
- n-best (``num_hypotheses`` k > 1, beam search): the k combinations of per-sentence
  hypotheses with the highest sums of per-sentence scores, best first
  (:func:`~attnserve.server.documents.assemble.best_combinations`); a one-sentence text gets
  exactly that sentence's k hypotheses. Fewer come back when fewer combinations exist;
- ``score`` and ``logprob`` of a document hypothesis: the sums over its sentences (each
  sentence's score is length-normalised on its own); ``token_ids``: the sentences' generated
  ids one after another (each sentence's ends with its eos); ``finish_reason``: ``length`` if
  any sentence hit ``max_new_tokens``, else ``eos``. ``max_new_tokens`` applies per sentence;
- ``source_tokens``: the sum over sentences; timing: the longest queue and decode time, the
  sum of encode times, the earliest first token.

A text with nothing to translate (only punctuation, symbols or markup) comes back as sent.
A forced target prefix (``DecodeOptions.prefix_ids``): its hidden part (a target-language
token) starts every sentence, its visible part (a user's target prefix) only the first
sentence of each text (:func:`sentence_options`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .documents import FORMATS, TEXT, DocumentLimits, DocumentSplitter, PreparedDocument, TokenBudget
from .documents.assemble import best_combinations
from .errors import InferenceFailed, InvalidRequest
from .translation import DecodeOptions, Hypothesis, StreamEvent, TranslationEngine, TranslationResult

# A sentence the engine validates the options against before any text is split.
_OPTIONS_PROBE = "1"
# Requests up to this many characters are split on the event loop (well under a millisecond).
INLINE_SPLIT_CHARS = 2_000
MAX_LANGUAGES = 64  # sentence splitters kept per engine, one per source language

# on_request(sentences, characters) of one request, for the metrics (Metrics.watch_engine).
RequestObserver = Callable[[int, int], None]


def segmenter_language(code: str | None) -> str:
    """A model's or request's language code -> sentencex's (ISO 639-1 style: "de" of "de",
    "de-AT", "deu_Latn" stays "deu"); sentencex reads a code it has no rules for with its
    default (English-like) rules. No code: "en"."""
    return (code or "en").replace("-", "_").split("_")[0].lower() or "en"


@dataclass
class _EngineDocuments:
    budget: TokenBudget
    language: str  # the model's source language, when it declares one
    on_request: RequestObserver | None = None
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
        languages = getattr(engine.manifest, "languages", None) if hasattr(engine, "manifest") else None
        sources = list(getattr(languages, "source", None) or [])
        language = segmenter_language(sources[0] if len(sources) == 1 else None)  # many: the request says
        docs = _per_engine[engine] = _EngineDocuments(TokenBudget(engine.tokenizer, engine.max_source_len), language)
    return docs


def watch(engine: TranslationEngine, on_request: RequestObserver | None) -> None:
    """Call ``on_request(sentences, characters)`` once per request that ``engine`` accepts."""
    _documents(engine).on_request = on_request


def _check(engine: TranslationEngine, texts: Sequence[str], options: DecodeOptions, format: str) -> None:
    """The cheap checks, in the order of the module docstring; nothing is split or tokenised."""
    settings = engine.settings
    if not texts:
        raise InvalidRequest("no texts to translate")
    if len(texts) > settings.max_texts_per_request:
        raise InvalidRequest(
            f"{len(texts)} texts in one request; the limit is {settings.max_texts_per_request}: split the request"
        )
    # Characters first: a 1 MB text is refused before it is read, let alone split or tokenised.
    DocumentLimits(settings.max_text_chars, settings.max_request_chars).check(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise InvalidRequest(f"text {i} is empty")
    if format not in FORMATS:
        raise InvalidRequest(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    engine.validate([_OPTIONS_PROBE], options)  # the options, before any sentence is queued


def _split(
    engine: TranslationEngine, texts: Sequence[str], format: str, language: str | None
) -> list[PreparedDocument]:
    docs = _documents(engine)
    splitter = docs.splitter(language)
    prepared = [splitter.split(text, format) for text in texts]
    if docs.on_request is not None:
        docs.on_request(sum(p.segments for p in prepared), sum(len(t) for t in texts))
    return prepared


async def _split_off_loop(
    engine: TranslationEngine, texts: Sequence[str], options: DecodeOptions, format: str
) -> list[PreparedDocument]:
    """Split on a worker thread unless the request is small: segmenting and tokenising 50,000
    characters takes a few hundred ms on a busy core (sentencex and tokenizers run in Rust
    without the GIL), which on the event loop would stall every other call."""
    language = getattr(options, "source_language", None)  # a request may name it (issue 13)
    if sum(len(t) for t in texts) <= INLINE_SPLIT_CHARS:
        return _split(engine, texts, format, language)
    return await asyncio.to_thread(_split, engine, texts, format, language)


def _window(engine: TranslationEngine) -> tuple[int, int]:
    """(sentences per engine call, calls in flight) for one request (see the module docstring)."""
    settings = engine.settings
    share = max(1, settings.max_queue_size // 2)  # of the queue, for one request at a time
    chunk = min(settings.max_texts_per_request, share)
    return chunk, max(1, share // chunk)


def sentence_options(options: DecodeOptions) -> tuple[Any, Any]:
    """(options of a document's first sentence, options of every later one).

    A forced target prefix has two parts (``DecodeOptions.prefix_ids``): the hidden leading
    ids (``hide_prefix``: a target-language token) start every sentence; the visible rest (a
    user's target prefix) starts the document, so only its first sentence."""
    prefix, hidden = getattr(options, "prefix_ids", ()), getattr(options, "hide_prefix", 0)
    if len(prefix) <= hidden:
        return options, options
    return options, dataclasses.replace(options, prefix_ids=tuple(prefix[:hidden]))


async def _translate_sentences(
    engine: TranslationEngine, work: list[tuple[str, Sequence[int], Any]]
) -> list[TranslationResult]:
    """One result per (sentence, its ids, options), in order: sentences of equal options go to
    the engine in calls of at most ``max_texts_per_request``; a failure or a cancel abandons
    every call."""
    chunk, in_flight = _window(engine)
    by_options: dict[Any, list[int]] = {}
    for i, (_, _, options) in enumerate(work):
        by_options.setdefault(options, []).append(i)
    calls = [(options, idx[j : j + chunk]) for options, idx in by_options.items() for j in range(0, len(idx), chunk)]
    if len(calls) == 1:
        return await engine.translate(_prepare(engine, work, range(len(work)), work[0][2]))
    gate = asyncio.Semaphore(in_flight)

    async def call(options: DecodeOptions, indices: list[int]) -> list[TranslationResult]:
        async with gate:
            return await engine.translate(_prepare(engine, work, indices, options))

    tasks = [asyncio.ensure_future(call(options, indices)) for options, indices in calls]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:  # cancelled, or one call failed: the others free their rows too
        pending = [t for t in tasks if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()
    results: list[Any] = [None] * len(work)
    for (_, indices), task in zip(calls, tasks):
        for i, result in zip(indices, task.result()):
            results[i] = result
    return results


def _prepare(engine: TranslationEngine, work: list[tuple[str, Sequence[int], Any]], indices: Sequence[int], options):
    """The engine's checks of some sentences, with the ids the splitter tokenised them to."""
    return engine.prepare([work[i][0] for i in indices], options, [work[i][1] for i in indices])


def _as_written(text: str) -> TranslationResult:
    """A text with nothing to translate: itself."""
    return TranslationResult([Hypothesis(text, [], 0.0, 0.0, "eos")], 0, 0.0, 0.0, 0.0, 0.0)


def document_result(prepared: PreparedDocument, results: Sequence[TranslationResult], k: int) -> TranslationResult:
    """The document's result from its sentences' (see the module docstring)."""
    document = prepared.document
    if not results:
        return _as_written(document.source)
    hypotheses = []
    for combination in best_combinations([[h.score for h in r.hypotheses] for r in results], k):
        chosen = [r.hypotheses[j] for r, j in zip(results, combination)]
        hypotheses.append(
            Hypothesis(
                text=document.join([h.text.strip() for h in chosen]),
                token_ids=[t for h in chosen for t in h.token_ids],
                logprob=sum(h.logprob for h in chosen),
                score=sum(h.score for h in chosen),
                finish_reason="length" if any(h.finish_reason == "length" for h in chosen) else "eos",
            )
        )
    return TranslationResult(
        hypotheses=hypotheses,
        source_tokens=sum(r.source_tokens for r in results),
        queue_ms=max(r.queue_ms for r in results),
        encode_ms=sum(r.encode_ms for r in results),
        decode_ms=max(r.decode_ms for r in results),
        first_token_ms=min(r.first_token_ms for r in results),
    )


async def translate(
    engine: TranslationEngine, texts: list[str], options: DecodeOptions, format: str = TEXT
) -> list[TranslationResult]:
    """One ``TranslationResult`` per text (document), in order; ``format``: "text" or "html"."""
    _check(engine, texts, options, format)
    prepared = await _split_off_loop(engine, texts, options, format)
    first, rest = sentence_options(options)
    work = [(s, ids, rest if i else first) for p in prepared for i, (s, ids) in enumerate(zip(p.sources, p.ids))]
    results = await _translate_sentences(engine, work) if work else []
    out, at = [], 0
    for p in prepared:
        out.append(document_result(p, results[at : at + p.segments], options.num_hypotheses))
        at += p.segments
    return out


def stream(
    engine: TranslationEngine, text: str, options: DecodeOptions, format: str = TEXT
) -> AsyncIterator[StreamEvent]:
    """``StreamEvent``s of one text (document); closing the iterator frees its decoder rows at the next step.

    Checks run now, before the iterator is returned. The sentences are decoded together; their
    events come out in document order (see :class:`DocumentEvents`): one event per batch of
    tokens the engine hands out (every token with ``stream_interval_ms`` 0, else the tokens of
    one interval) with their ids, the events of sentence k only after every sentence before it
    has finished. The deltas add up to the document ``translate`` returns.
    """
    if options.beam_size > 1:  # the engine's own check, raised now rather than at the first event
        raise InvalidRequest(f"streaming works with beam_size 1 (greedy or sampling), got {options.beam_size}")
    _check(engine, [text], options, format)
    return _stream(engine, text, options, format)


class DocumentEvents:
    """Orders the token events of a document's sentences.

    Events of the first unfinished sentence pass through as they come; those of later sentences
    wait until it finishes. Each separator travels in front of the next sentence's first event
    (the last one after the last event). A sentence's translation is trimmed of whitespace at
    its ends (the separators carry the document's own): leading whitespace is dropped, trailing
    whitespace held back until more text follows. ``text`` documents pass deltas on as
    generated. An html sentence's rendering escapes the text and restores entity spellings,
    which a delta cannot know, so its events carry empty deltas and its last event the whole
    rendered sentence: html streams sentence by sentence.
    """

    def __init__(self, prepared: PreparedDocument) -> None:
        self.document = prepared.document
        n = len(self.document.segments)
        self._waiting: list[list[StreamEvent]] = [[] for _ in range(n)]
        self._text = [""] * n  # generated so far, as the engine sent it
        self._held = [""] * n  # trailing whitespace not passed on yet
        self._started = [False] * n  # whether any non-whitespace has been passed on
        self._finished = [False] * n
        self._current = 0
        self._lead = self.document.separators[0]  # text to put in front of the next event out
        self._length = False

    def push(self, index: int, event: StreamEvent) -> list[StreamEvent]:
        """Events that may go out now (maybe none) after ``event`` of sentence ``index``."""
        final = event.finish_reason is not None
        self._text[index] += event.delta
        if self.document.segments[index].html:
            delta = self.document.segments[index].render(self._text[index].strip()) if final else ""
        else:
            delta = self._trimmed(index, event.delta, final)
        self._waiting[index].append(StreamEvent(delta, event.token_ids, None))
        if final:
            self._finished[index] = True
            self._length |= event.finish_reason == "length"
        out: list[StreamEvent] = []
        while self._current < len(self._waiting):
            i = self._current
            out += [self._out(e) for e in self._waiting[i]]
            self._waiting[i] = []
            if not self._finished[i]:
                break
            self._current += 1
            self._lead = self.document.separators[i + 1]
            if self._current == len(self._waiting):  # the last sentence: its separator and the finish reason
                last = out.pop()
                out.append(StreamEvent(last.delta + self._lead, last.token_ids, "length" if self._length else "eos"))
                self._lead = ""
        return out

    def finished(self, index: int) -> bool:
        """Whether sentence ``index`` has had its last event."""
        return self._finished[index]

    def _trimmed(self, index: int, delta: str, final: bool) -> str:
        text = self._held[index] + delta
        if not self._started[index]:
            text = text.lstrip()
            self._started[index] = bool(text)
        body = text.rstrip()
        self._held[index] = "" if final else text[len(body) :]
        return body

    def _out(self, event: StreamEvent) -> StreamEvent:
        delta, self._lead = self._lead + event.delta, ""
        return StreamEvent(delta, event.token_ids, None)


async def _stream(
    engine: TranslationEngine, text: str, options: DecodeOptions, format: str
) -> AsyncIterator[StreamEvent]:
    (prepared,) = await _split_off_loop(engine, [text], options, format)
    if not prepared.sources:
        yield StreamEvent(prepared.document.source, (), "eos")
        return
    order = DocumentEvents(prepared)
    queue: asyncio.Queue = asyncio.Queue()
    gate = asyncio.Semaphore(_window(engine)[0])

    first, rest = sentence_options(options)

    async def sentence(index: int, source: str, ids: Sequence[int]) -> None:
        async with gate:
            try:
                async for event in engine.stream(engine.prepare([source], rest if index else first, [ids])):
                    queue.put_nowait((index, event))
            except Exception as exc:
                queue.put_nowait((index, exc))
            else:
                queue.put_nowait((index, None))  # its stream has ended

    tasks = [
        asyncio.ensure_future(sentence(i, s, ids)) for i, (s, ids) in enumerate(zip(prepared.sources, prepared.ids))
    ]
    try:
        remaining = len(tasks)
        while remaining:
            index, item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            if item is None:
                remaining -= 1
                if not order.finished(index):  # never seen; a stream must not hang waiting for it
                    raise InferenceFailed(f"the stream of sentence {index} ended without a finish reason")
                continue
            for event in order.push(index, item):
                yield event
    finally:  # closed, cancelled or failed: every sentence still decoding leaves at the next step
        pending = [t for t in tasks if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
