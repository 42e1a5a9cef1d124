"""The translation service: every door's translation requests, from the model they go to
down to the engine and back.

Owned here, once (docs/architecture.md, "A request's way"):

- model resolution and language routing (``routing``: one policy), a source language to
  detect (``auto``), the model version a KServe request names;
- the limits (texts per request, characters per text and per request, empty texts), the
  text format and the decoding options, checked once into a :class:`ValidTranslation`;
- n distinct alternatives of every text (``alternatives``): a beam of n + 1, widened for the
  texts whose beam held fewer;
- documents (``documents``): split by the rules of the request's source language, off the
  event loop on the bounded work pool when large;
- the deadline, the request's own or the server's ``--request-timeout-seconds`` when that
  passes first: handed to the engine, whose scheduler fails the request's jobs and frees
  their rows when it passes, and awaited here, so a caller gets DEADLINE_EXCEEDED on time
  even while a decoder step runs;
- bookkeeping and metrics: the call's model, items answered and queue time (KServe's
  statistics), ``attnserve_queue_time_seconds``, ``attnserve_request_sentences`` and
  ``attnserve_request_characters``, the same for every door and for streams;
- the characters each client has had translated this month, and its quota (``usage``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import sys
from collections.abc import AsyncIterator, Awaitable, Sequence
from concurrent.futures import Executor
from typing import TypeVar

from attnserve.contract.kinds import TRANSLATION

from ..documents import TEXT, PreparedDocument
from ..runtime.registry import LoadedModel, ModelRegistry
from ..shared.config import Settings
from ..shared.errors import DeadlineExceeded, ModelNotFound, echo
from ..shared.metrics import Metrics
from ..translation import DecodeOptions, StreamEvent
from . import alignments, alternatives, document_stream, documents, limits, mixed, pivot, quality, surrogates
from .detection import make_detector
from .glossary import DefaultGlossaries, compile_glossary
from .languages import apply
from .requests import (
    AUTO,
    MODEL_VERSION,
    Deadline,
    Detection,
    Event,
    Translated,
    TranslationRequest,
    ValidTranslation,
)
from .routing import Route, ServedLanguages
from .source_detection import SourceDetection
from .stored_glossaries import StoredGlossaries, with_stored_glossary
from .translation_cache import MB, TranslationCache
from .usage import Usage

T = TypeVar("T")


async def bounded(awaitable: Awaitable[T], deadline: Deadline | None) -> T:
    """``await awaitable`` until ``deadline``; then (or when the engine's own copy of it fires
    first) DeadlineExceeded in the deadline's words, the awaited work cancelled. A stream
    awaits each event this way: ``asyncio.timeout`` (3.11+) arms one timer on the running
    task, where ``wait_for`` would wrap every event in a task of its own."""
    if deadline is None:
        return await awaitable
    try:
        if sys.version_info >= (3, 11):
            async with asyncio.timeout(deadline.remaining()):
                return await awaitable
        return await asyncio.wait_for(awaitable, deadline.remaining())
    except (asyncio.TimeoutError, DeadlineExceeded):
        raise DeadlineExceeded(deadline.message) from None


def check_version(model: LoadedModel, version: str) -> None:
    if version not in ("", MODEL_VERSION):
        raise ModelNotFound(f"model {model.name!r} has no version {echo(version)}; it serves version {MODEL_VERSION}")


class TranslationService:
    """Translation for every door (see the module docstring); one per server."""

    def __init__(self, registry: ModelRegistry, settings: Settings, metrics: Metrics, pool: Executor) -> None:
        self.registry, self.settings, self.metrics, self.pool = registry, settings, metrics, pool
        self.languages = ServedLanguages(registry)
        self.detector = make_detector(settings.language_detection)
        self.detection = SourceDetection(self.detector, pool, self.languages)
        self.glossaries = DefaultGlossaries(settings.glossary_dir)
        self.cache = TranslationCache(settings.translation_cache_mb * MB, metrics.registry)
        self.stored_glossaries: StoredGlossaries | None = None  # the server's, set where it has a state store
        self.usage = Usage(settings)  # the characters each client had translated this month, its quota

    # ------------------------------------------------------------------- requests

    async def translate(self, request: TranslationRequest) -> Translated:
        """One result per text (document), in order: :meth:`events` drained to its reply (as TGI's
        ``generate`` drains ``generate_stream``), with its ``distinct_alternatives`` (``alternatives``)."""
        return await alternatives.translate(self.events, request, self.settings)

    async def stream(self, request: TranslationRequest) -> AsyncIterator[StreamEvent]:
        """The events of one text (document) as it is generated: :meth:`events` with its tokens, up
        to the one with the finish reason (the document's reply is not joined: nobody reads it).
        Closing the iterator frees its decoder rows; the first event's wait raises any error of
        the request before anything is sent."""
        limits.check_stream(request)
        async with contextlib.aclosing(self.events(request, tokens=True)) as events:
            async for event in events:
                assert isinstance(event, StreamEvent), "a stream's finish event comes before its reply"
                yield event
                if event.finish_reason is not None:
                    return

    async def events(self, request: TranslationRequest, tokens: bool = False) -> AsyncIterator[Event]:
        """The one path of a request: its events, then its reply (:class:`Translated`). ``tokens``:
        the token events of its one text (a stream), the last with the finish reason; otherwise
        none, only the reply. Its characters count in its caller's usage once it is answered (the
        reply, or a stream's finish event), whatever requests it makes of the models below."""
        client, characters = (request.caller.client, sum(map(len, request.texts))) if request.billed else ("", 0)
        with self.usage.charge(client, characters) as charge:
            async with contextlib.aclosing(self._events(request, tokens)) as events:
                async for event in events:
                    if isinstance(event, Translated) or event.finish_reason is not None:
                        charge.answered()
                    yield event

    async def _events(self, request: TranslationRequest, tokens: bool = False) -> AsyncIterator[Event]:
        """:meth:`events` of the models: through the pivot language when no model serves the pair
        directly (``pivot``); source ``auto``: each text in its detected language (``mixed``)."""
        request = await with_stored_glossary(self.stored_glossaries, request)
        limit = self.settings.request_timeout_seconds
        if request.source_language == AUTO:
            self.check_texts(request.texts)  # before any text is read
            limits.check_language_codes(request.source_language, request.target_language)
            detected = await self.detection.each(request)
            events = mixed.events(self._events, request, detected, limit, tokens)
        elif (route := self.pivot_route(request)) is not None:
            limits.check_pivot(request.alignments, request.source_language, request.target_language, route.pivot)
            events = pivot.events(self._events, request, route, limit, tokens)
        else:
            events = self._direct(request, tokens)
        async with contextlib.aclosing(events):
            async for event in events:
                yield event

    async def _direct(self, request: TranslationRequest, tokens: bool) -> AsyncIterator[Event]:
        """:meth:`events` on the one model the request goes to: its texts split into sentences,
        decoded (``documents`` drains the sentences' events; ``document_stream`` passes a stream's
        on in document order), judged and aligned where asked, and joined into the reply."""
        scored = not tokens and (request.quality or self.settings.min_quality > 0)
        judged = aligned = None
        async with self.validate(request) as valid:
            if scored:
                valid = dataclasses.replace(valid, options=quality.scoring_options(valid.options, valid.model.engine))
            # html / markdown: inline markup stays inside its sentence and is placed by alignment
            # where the model has an aligner; otherwise sentences are cut at it
            place = request.format != TEXT and valid.model.aligns
            valid, prepared = await self.split(valid, place)
            if tokens:
                streamed = document_stream.Streamed([None] * prepared[0].segments)
                async with contextlib.aclosing(self._document_events(valid, prepared[0], place, streamed)) as events:
                    async for event in events:
                        yield event
                sentences, aligned = streamed.results, [streamed.alignments()]
            else:
                sentences, judged, aligned = await self._sentences(valid, prepared, place)
            results = await documents.join(valid, prepared, sentences, aligned if place else None, self.pool)
            if not tokens:
                self.answered(valid, [r.queue_ms for r in results])
        model, source, target = valid.model.name, valid.source_language, valid.target_language
        returned = alignments.best_only(aligned) if request.alignments and aligned is not None else None
        yield Translated(model, results, source, target, alignments=returned, quality=judged)

    async def _sentences(self, valid: ValidTranslation, prepared: list[PreparedDocument], place: bool):
        """(every sentence's result, the texts' quality where asked, the sentences' alignments where
        asked or markup is placed): the sentences' events drained (``documents.translate_sentences``)."""
        request = valid.request
        align = request.alignments or (place and any(s.inline for p in prepared for s in p.document.segments))
        keep = range(sum(p.segments for p in prepared)) if align and valid.model.aligns else ()
        work = documents.translate_sentences(valid, prepared, self.pool, keep_for_alignment=keep)
        sentences = await bounded(work, request.deadline)
        judged = aligned = None
        if request.quality or self.settings.min_quality > 0:  # each text's quality under the server's threshold
            args = (self.settings.min_quality, self.settings.quality_action, self.pool)
            judged = await quality.judge_off_loop(valid.model.engine, prepared, sentences, *args)
        if align:
            work = alignments.align(valid, prepared, sentences, self.pool, every_hypothesis=place)
            aligned = await bounded(work, request.deadline)
        return sentences, judged, aligned

    async def _document_events(
        self, valid: ValidTranslation, prepared: PreparedDocument, place: bool, streamed: document_stream.Streamed
    ) -> AsyncIterator[StreamEvent]:
        """One document's token events in order (``document_stream``), each awaited within the
        deadline; the texts answered are booked at the finish event, before it goes out (the
        caller may close the stream at it)."""
        align = functools.partial(alignments.align_sentence, valid, prepared, self.pool) if place else None
        events = document_stream.stream(valid, prepared, align, place, streamed)
        async with contextlib.aclosing(events):  # a cancelled or failed stream frees its rows at the next step
            while True:
                try:
                    event = await bounded(anext(events), valid.request.deadline)
                except StopAsyncIteration:
                    return
                if event.finish_reason is not None:
                    self.answered(valid, [event.queue_ms])
                yield event

    def pivot_route(self, request: TranslationRequest) -> Route | None:
        """The two models of a pair no model serves directly, through ``--pivot-language``
        (a request that names its model, or a source to detect, never pivots)."""
        if request.model or request.source_language == AUTO or not self.settings.pivot_language:
            return None
        limits.check_language_codes(request.source_language, request.target_language)
        table = self.languages.table
        return table.pivot_route(request.source_language, request.target_language, self.settings.pivot_language)

    def routes(self) -> list[Route]:
        """Every pair a request may name, direct and by pivot."""
        return self.languages.table.routes(self.settings.pivot_language)

    # ----------------------------------------------------------------- validation

    @contextlib.asynccontextmanager
    async def validate(self, request: TranslationRequest, file: bool = False) -> AsyncIterator[ValidTranslation]:
        """The request checked once (limits, format, languages, options) for the model it goes
        to, which is held for the block (a hot reload retires it only after). Its deadline
        becomes the earlier of its own and the server's time limit. ``file``: the texts of a
        file, checked by the file service against the file limits (``--max-file-chars``) and
        under ``--file-timeout-seconds`` in place of the request limits."""
        limit = self.settings.file_timeout_seconds if file else self.settings.request_timeout_seconds
        request = dataclasses.replace(request, deadline=limits.time_limit(request.deadline, limit, file))
        if not file:
            self.check_texts(request.texts)
        limits.check_prefix(self.settings, request.target_prefix)
        limits.check_language_codes(request.source_language, request.target_language)
        limits.check_format(request.format)
        limits.check_markup(request.markup)
        detected = None
        if request.source_language == AUTO:
            detected = await self.detection.together(request)
            request = dataclasses.replace(request, source_language=detected.language)
        async with self._model(request) as model:
            options, source, target = await self._languages(model, request)
            max_new = limits.check_options(model.engine.limits, options)
            if request.alignments:
                alignments.require_alignments(model)
            glossary = self._glossary(model, request, source, target)
            per_call = self.settings.max_texts_per_request
            yield ValidTranslation(
                request, model, options, max_new, source, target, per_call, detected, glossary, self.cache
            )

    def _glossary(self, model: LoadedModel, request: TranslationRequest, source: str, target: str):
        """The server's default terms for the model and pair, extended and overridden by the request's."""
        limits.check_glossary(self.settings, request.glossary)
        entries = self.glossaries.entries(model.name, source, target) + request.stored_glossary + request.glossary
        if not entries:
            return None
        return compile_glossary(entries, model.engine.tokenizer, documents.normalizer(model.engine))

    async def _languages(self, model: LoadedModel, request: TranslationRequest) -> tuple[DecodeOptions, str, str]:
        """``languages.apply``: a target prefix over INLINE_SPLIT_CHARS is tokenised on the work
        pool, as a long document is (tokenizers runs in Rust without the GIL)."""
        args = (model, request.options, request.source_language, request.target_language, request.target_prefix)
        if len(request.target_prefix) <= documents.INLINE_SPLIT_CHARS:
            return apply(*args)
        return await asyncio.get_running_loop().run_in_executor(self.pool, apply, *args)

    @contextlib.asynccontextmanager
    async def _model(self, request: TranslationRequest) -> AsyncIterator[LoadedModel]:
        """The model the request goes to (``routing``'s policy), held for the block; one not loaded
        yet is loaded first, within the request's deadline (the wait goes on the call: LOAD_MS_KEY)."""
        name = request.model
        if not name and (request.source_language or request.target_language):
            name = self.languages.table.route(request.source_language, request.target_language)

        def waited(seconds: float) -> None:
            request.caller.load_ms += seconds * 1e3

        async with self.registry.use(name, TRANSLATION, request.deadline, waited) as model:
            check_version(model, request.version)
            request.caller.model = model.name
            yield model

    def check_texts(self, texts: tuple[str, ...] | list[str]) -> None:
        """The server's limits on a request's texts, checked before anything is read (``limits``)."""
        limits.check_texts(self.settings, texts)

    # ------------------------------------------------------------------ languages

    async def detect(self, text: str, codes: list[str]) -> list[Detection]:
        """The detector's languages of ``text`` among ``codes`` (``SourceDetection.detect``)."""
        return await self.detection.detect(text, codes)

    # ---------------------------------------------------------------- bookkeeping

    async def split(
        self,
        valid: ValidTranslation,
        place_inline: bool = False,
        styled: Sequence[Sequence[tuple[int, int]]] | None = None,
    ) -> tuple[ValidTranslation, list[PreparedDocument]]:
        """The request's documents (sentences and their ids), and the request with its glossary's
        surrogates for the terms they contain (``surrogates.attach``); the request's sentence and
        character metrics. ``place_inline``: inline markup kept inside its sentence, placed by alignment;
        ``styled``: a file's paragraphs' styled stretches (``documents.split``)."""
        prepared = await documents.split_documents(valid, self.pool, place_inline, styled)
        self.counted(valid, prepared)
        return await self.with_surrogates(valid, prepared), prepared

    def counted(self, valid: ValidTranslation, prepared: Sequence[PreparedDocument]) -> None:
        """The request's sentence and character metrics, once it is split."""
        name = valid.model.name
        self.metrics.request_sentences.labels(name).observe(sum(p.segments for p in prepared))
        self.metrics.request_characters.labels(name).observe(sum(len(t) for t in valid.request.texts))

    async def with_surrogates(self, valid: ValidTranslation, prepared: Sequence[PreparedDocument]) -> ValidTranslation:
        """``valid`` with its glossary's surrogates for the terms the documents contain (``surrogates.attach``)."""
        if valid.glossary is None:
            return valid
        sentences = (s for p in prepared for s in p.sources)
        return await bounded(surrogates.attach(valid, sentences), valid.request.deadline)

    def answered(self, valid: ValidTranslation, queue_ms: list[float]) -> None:
        """Texts answered: the call's count and queue time (KServe's statistics) and the metric."""
        call, histogram = valid.request.caller, self.metrics.queue_time.labels(valid.model.name)
        call.items, call.queue_s = len(queue_ms), max(queue_ms) / 1e3
        for q in queue_ms:
            histogram.observe(q / 1e3)
