"""A document's translation as a stream of events (``TranslationService.stream``).

The document's sentences are decoded together (:func:`stream`), each through ``engine.stream``;
:class:`DocumentEvents` puts their events in document order, with the document's separators
between them, so the deltas add up to the text :func:`.documents.translate` returns.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from ..documents import PreparedDocument
from ..documents.alignment import WordAlignment
from ..shared.errors import InferenceFailed
from ..translation import DecodeOptions, StreamEvent
from .documents import cancel_all, sentence_work, window
from .requests import ValidTranslation

# (sentence index, its token ids, the ids fed where glossary surrogates were swapped out of them,
# its encoder output or None)
Aligning = Callable[[int, Sequence[int], Sequence[int], Any], Awaitable[WordAlignment]]


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
        self.placed: dict[int, WordAlignment] = {}  # sentence -> the alignment its markup is placed by
        self._length = False

    def push(self, index: int, event: StreamEvent) -> list[StreamEvent]:
        """Events that may go out now (maybe none) after ``event`` of sentence ``index``."""
        final = event.finish_reason is not None
        self._text[index] += event.delta
        segment = self.document.segments[index]
        if segment.rendered_whole:
            delta = segment.render(self._text[index].strip(), self.placed.get(index)) if final else ""
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


async def stream(
    valid: ValidTranslation, prepared: PreparedDocument, align: Aligning | None = None, keep_for_alignment: bool = False
) -> AsyncIterator[StreamEvent]:
    """``StreamEvent``s of one document; closing the iterator frees its decoder rows at the next step.

    The sentences are decoded together; their events come out in document order (see
    :class:`DocumentEvents`): one event per batch of tokens the engine hands out, the events of
    sentence k only after every sentence before it has finished. The deltas add up to the
    document :func:`translate` returns; the last event carries the longest queue time.
    ``align(sentence, token_ids, written_ids, memory, attention)``: the alignment that places a
    finished sentence's inline markup (documents split with ``place_inline``), awaited before its
    last event goes out; ``keep_for_alignment``: the engine keeps what the aligner reads for those
    sentences (their steps' attention, or their encoder outputs, on the last event).
    """
    if not prepared.sources:
        yield StreamEvent(prepared.document.source, (), "eos")
        return
    engine, deadline = valid.model.engine, valid.request.deadline
    order = DocumentEvents(prepared)
    queue: asyncio.Queue = asyncio.Queue()
    gate = asyncio.Semaphore(window(valid)[0])
    segments = prepared.document.segments
    inline = [i for i, segment in enumerate(segments) if segment.inline] if align is not None else []
    # the same sentences, options and repeats decoded once as translate() decodes them; a repeat's
    # events go to every occurrence
    work, at = sentence_work(valid, [prepared], inline if keep_for_alignment else ())
    occurrences: dict[int, list[int]] = {}
    for position, i in enumerate(at):
        occurrences.setdefault(i, []).append(position)

    async def sentence(source: str, ids: Sequence[int], options: DecodeOptions, indices: list[int]) -> None:
        placing = align is not None and any(segments[i].inline for i in indices)
        async with gate:
            try:
                checked = engine.prepare([source], options, [ids], valid.max_new_tokens)
                generated: list[int] = []
                async for event in engine.stream(checked, deadline=deadline):
                    generated += event.token_ids
                    if event.finish_reason is not None and placing:
                        placed = await align(indices[0], generated, event.written_ids, event.memory, event.attention)
                        order.placed.update(dict.fromkeys(indices, placed))
                    for index in indices:
                        queue.put_nowait((index, event))
            except Exception as exc:
                queue.put_nowait((indices[0], exc))
            else:
                for index in indices:
                    queue.put_nowait((index, None))  # its stream has ended

    tasks = [asyncio.ensure_future(sentence(*work[i], indices)) for i, indices in occurrences.items()]
    try:
        async for event in _ordered(order, queue, prepared.segments):
            yield event
    finally:  # closed, cancelled or failed: every sentence still decoding leaves at the next step
        await cancel_all(tasks)


async def _ordered(order: DocumentEvents, queue: asyncio.Queue, sentences: int) -> AsyncIterator[StreamEvent]:
    """The sentences' events from ``queue`` in document order, the longest queue time on the last."""
    remaining, queue_ms = sentences, 0.0
    while remaining:
        index, item = await queue.get()
        if isinstance(item, BaseException):
            raise item
        if item is None:
            remaining -= 1
            if not order.finished(index):  # never seen; a stream must not hang waiting for it
                raise InferenceFailed(f"the stream of sentence {index} ended without a finish reason")
            continue
        queue_ms = max(queue_ms, item.queue_ms)
        for event in order.push(index, item):
            yield dataclasses.replace(event, queue_ms=queue_ms) if event.finish_reason else event
