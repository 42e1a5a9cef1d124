"""A document's translation as a stream of events (``TranslationService.stream``).

The document's sentences are decoded together (:func:`stream`) by the pipeline a unary call
drains (:func:`.sentence_pipeline.decode`), each through the engine's stream of its tokens;
:class:`DocumentEvents` puts their events in document order, with the document's separators
between them, so the deltas add up to the text :func:`.documents.translate` returns, and each
sentence's last event carries its result, from which the service joins the document's whole
result as a unary call's.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..documents import PreparedDocument
from ..documents.alignment import WordAlignment
from ..translation import StreamEvent, TranslationResult
from .documents import sentence_work
from .requests import ValidTranslation
from .sentence_pipeline import decode

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


@dataclass
class Streamed:
    """What a document's stream leaves behind for its whole result (``documents.join``): each
    sentence's result, from its last event, and the alignments that placed inline markup."""

    results: list[TranslationResult | None]
    placed: dict[int, WordAlignment] = field(default_factory=dict)

    def alignments(self) -> list[list[WordAlignment]]:
        """Per sentence, per hypothesis (a stream's one): the alignment that placed its markup."""
        return [[self.placed[i]] if i in self.placed else [] for i in range(len(self.results))]


async def stream(
    valid: ValidTranslation,
    prepared: PreparedDocument,
    align: Aligning | None = None,
    keep_for_alignment: bool = False,
    streamed: Streamed | None = None,
) -> AsyncIterator[StreamEvent]:
    """``StreamEvent``s of one document; closing the iterator frees its decoder rows at the next step.

    The sentences are decoded together (:func:`.sentence_pipeline.decode`, the pipeline a unary call
    drains); their events come out in document order (see :class:`DocumentEvents`): one event
    per batch of tokens the engine hands out, the events of sentence k only after every sentence
    before it has finished. The deltas add up to the document :func:`.documents.translate`
    returns; the last event carries the longest queue time. ``align(sentence, token_ids,
    written_ids, memory, attention)``: the alignment that places a finished sentence's inline
    markup (documents split with ``place_inline``), awaited before its last event goes out;
    ``keep_for_alignment``: the engine keeps what the aligner reads for those sentences (their
    steps' attention, or their encoder outputs, on the last event). ``streamed``: filled with
    each sentence's result and placing alignment, for the document's whole result.
    """
    if not prepared.sources:
        yield StreamEvent(prepared.document.source, (), "eos")
        return
    order = DocumentEvents(prepared)
    if streamed is not None:
        order.placed = streamed.placed
    segments = prepared.document.segments
    inline = [i for i, segment in enumerate(segments) if segment.inline] if align is not None else []
    # the same sentences, options and repeats decoded once as translate() decodes them; a repeat's
    # events go to every occurrence
    work, at = sentence_work(valid, [prepared], inline if keep_for_alignment else ())
    occurrences: dict[int, list[int]] = {}
    for position, i in enumerate(at):
        occurrences.setdefault(i, []).append(position)

    async def placing(i: int, generated: Sequence[int], last: StreamEvent) -> None:
        positions = occurrences[i]
        if align is not None and any(segments[p].inline for p in positions):
            placed = await align(positions[0], generated, last.written_ids, last.memory, last.attention)
            order.placed.update(dict.fromkeys(positions, placed))

    queue_ms = 0.0
    async with contextlib.aclosing(decode(valid, work, tokens=True, finish=placing)) as events:
        async for (i,), (event,) in events:
            queue_ms = max(queue_ms, event.queue_ms)
            for position in occurrences[i]:
                if streamed is not None and event.finish_reason is not None:
                    streamed.results[position] = event.result
                for out in order.push(position, event):
                    yield dataclasses.replace(out, queue_ms=queue_ms) if out.finish_reason else out
