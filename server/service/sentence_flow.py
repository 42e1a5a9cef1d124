"""A file's sentences on the engine as they come: its paragraphs piece by piece as they are split
(:func:`split_pieces`), so that the engine decodes a large file's first sentences while
the rest of it is still being cut into sentences. The engine calls are those
``documents.translate_sentences`` makes of a whole request: the same size, order and share of
the queue.

:class:`SentenceFlow` takes the sentences of one piece after another (:meth:`~SentenceFlow.add`,
the last with ``last=True``) and :meth:`~SentenceFlow.results` returns one result per sentence,
in order. The pieces change nothing a sentence's result depends on; across them, as within one:

- a sentence repeated with the same token ids and options is decoded once unless the options
  sample (greedy and beam search give it the same result each time): a repeat in a later piece
  takes the earlier one's result, or waits for it;
- a sentence of ``known`` (an interrupted file job's, source -> translation) is not decoded
  again unless kept for alignment (what alignment reads is not stored);
- the positions ``keep`` of a piece keep what word alignments read
  (``DecodeOptions.for_alignment``: each hypothesis's steps' attention, or where the decoder
  lacks it the encoder's output); a sentence decoded without it for an earlier piece and kept
  in a later one is decoded once more, with it;
- the sentences go to the engine in calls of equal options, in document order, of at most
  ``--max-texts-per-request`` sentences, with at most half the engine's queue in flight (a
  50,000-character document does not fill the queue and refuse everyone else); where someone
  hears of progress the calls are smaller (about 1/32 of the piece: the same sentences in
  flight), so a file's progress moves in steps a person sees;
- ``progress(n)``: n more of the sentences done (a sentence decoded once for its repeats counts
  for each), and before it ``decoded(positions, results)``: those sentences and their results,
  as engine calls finish; a piece's sentences whose result is already there are told as the
  piece is added (the known ones to ``progress`` only);
- a failed call, or a cancel, abandons every call: their rows are freed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

from ..documents import PreparedDocument
from ..shared import stopping
from ..translation import DecodeOptions, TranslationResult
from . import documents, translation_cache
from .document_results import as_written
from .documents import Decoded, Progress
from .requests import ValidTranslation
from .sentence_pipeline import Work, calls_of, cancel_all, stepped_chunk, window

# A file's texts are split in pieces of whole texts that go to the engine as they are split
# (split_pieces): the first of about FIRST_PIECE_CHARS characters (a few ms of splitting), each
# next one twice the last, up to MOST_PIECE_CHARS (tens of ms, so the pieces are few).
FIRST_PIECE_CHARS = 4_000
MOST_PIECE_CHARS = 64_000


def pieces(texts: Sequence[str], first: int, most: int) -> list[range]:
    """The texts in runs of whole texts: the first of about ``first`` characters, each next one
    twice the last up to ``most`` (a longer text is a piece of its own)."""
    out, start, chars, size = [], 0, 0, first
    for i, text in enumerate(texts):
        chars += len(text)
        if chars >= size:
            out.append(range(start, i + 1))
            start, chars, size = i + 1, 0, min(most, 2 * size)
    if start < len(texts) or not out:  # the rest; or no texts: one empty piece, the last
        out.append(range(start, len(texts)))
    return out


@dataclass(frozen=True)
class Piece:
    """Documents of a request split in pieces (:func:`split_pieces`)."""

    start: int  # the index of its first text among the request's
    prepared: list[PreparedDocument]
    last: bool


async def split_pieces(
    valid: ValidTranslation,
    pool: Executor,
    place_inline: bool = False,
    styled: Sequence[Sequence[tuple[int, int]]] | None = None,
) -> AsyncIterator[Piece]:
    """The request's documents as ``documents.split_documents`` splits them, in pieces of whole texts
    (:func:`pieces`), each split (on ``pool`` unless small) once the one before it is taken: a
    large file's first sentences go to the engine after a few ms of splitting, not after the
    second or so that its 500,000 characters take; the documents are those of one split."""
    request, engine = valid.request, valid.model.engine
    spans = pieces(request.texts, FIRST_PIECE_CHARS, MOST_PIECE_CHARS)
    for n, span in enumerate(spans):
        texts = request.texts[span.start : span.stop]
        its = styled[span.start : span.stop] if styled is not None else None
        args = (engine, texts, request.format, valid.source_language, place_inline, its, request.markup)
        small = sum(len(t) for t in texts) <= documents.INLINE_SPLIT_CHARS
        # a cancel drops a piece no thread has taken, and stops one being split at its next text or line
        prepared = documents.split(*args) if small else await stopping.run(pool, documents.split, *args)
        yield Piece(span.start, prepared, n == len(spans) - 1)


class SentenceFlow:
    """One file's sentences, added in pieces, decoded as they come (see the module docstring).
    Made, added to and awaited on the event loop."""

    def __init__(
        self,
        valid: ValidTranslation,
        progress: Progress | None = None,
        decoded: Decoded | None = None,
        known: Mapping[str, str] | None = None,
    ) -> None:
        self.valid, self.progress, self.decoded, self.known = valid, progress, decoded, known or {}
        self.chunk, calls = window(valid)
        self.share = self.chunk * calls  # sentences in flight at most
        self.entries: Work = []  # the distinct sentences, as they go to the engine
        self.kept: list[bool] = []  # whether each entry keeps what alignments read
        self.index: dict[tuple[Sequence[int], DecodeOptions], int] = {}  # (ids, options) -> its entry
        self.order: list[int] = []  # each sentence's entry, in document order
        self.places: list[list[int]] = []  # each entry's sentences
        self.finished: dict[int, TranslationResult] = {}  # entry -> its result, decoded or known
        self.reused: set[int] = set()  # the entries of ``known``
        self.waiting: deque[tuple[DecodeOptions, list[int]]] = deque()  # calls not sent yet, in order
        self.calls: set[asyncio.Task] = set()
        self.in_flight = 0  # sentences
        self.complete = False  # the last piece is in
        self.error: BaseException | None = None
        self.settled = asyncio.Event()  # every call done, or one failed

    @property
    def total(self) -> int:
        """The sentences of every piece, once the last is in; 0 until then (not known yet)."""
        return len(self.order) if self.complete else 0

    @property
    def added(self) -> int:
        """The sentences of the pieces added so far."""
        return len(self.order)

    def check(self) -> None:
        """The first failure of a call, raised once there is one (a producer of pieces stops)."""
        if self.error is not None:
            raise self.error

    def add(self, work: Work, keep: Iterable[int] = (), last: bool = False) -> None:
        """The next piece's sentences, in order (``documents.piece_work``); ``keep``: the
        positions of its sentences (among every piece's, in order) whose results keep what
        alignments read; ``last``: no piece follows."""
        sealed, first, keep = len(self.entries), len(self.order), set(keep)
        sampling = self.valid.options.sampling
        for j, (sentence, ids, options) in enumerate(work):
            kept, key = first + j in keep, (tuple(ids), options)
            i = None if sampling else self.index.get(key)
            if i is None or (kept and i < sealed and not self.kept[i]):  # sent without what alignment reads
                i = len(self.entries)
                self.entries.append((sentence, ids, options))
                self.kept.append(False)
                self.places.append([])
                if not sampling:
                    self.index[key] = i
            self.kept[i] = self.kept[i] or kept
            self.order.append(i)
            self.places[i].append(first + j)
        todo = self._new_entries(sealed)
        self.complete = self.complete or last
        ready = [p for p in range(first, len(self.order)) if self.order[p] in self.finished]
        decoded = [p for p in ready if self.order[p] not in self.reused]
        if decoded and self.decoded is not None:
            self.decoded(decoded, [self.finished[self.order[p]] for p in decoded])
        if ready and self.progress is not None:
            self.progress(len(ready))
        self._queue(todo)
        self._dispatch()

    def _new_entries(self, sealed: int) -> list[int]:
        """The entries from ``sealed`` on to decode; the others (known) take their results."""
        steps = self.valid.model.engine.step_attention
        todo = []
        for i in range(sealed, len(self.entries)):
            sentence, ids, options = self.entries[i]
            if self.kept[i]:
                self.entries[i] = (sentence, ids, options.for_alignment(steps))
                todo.append(i)
            elif sentence in self.known:
                self.finished[i] = as_written(self.known[sentence])
                self.reused.add(i)
            else:
                todo.append(i)
        return todo

    def _queue(self, todo: list[int]) -> None:
        chunk = self.chunk
        if self.progress is not None or self.decoded is not None:
            chunk = stepped_chunk(chunk, len(todo))
        self.waiting.extend(calls_of(((i, self.entries[i][2]) for i in todo), chunk))

    def _dispatch(self) -> None:
        """Sends the waiting calls that fit in the share of the queue (one at least)."""
        while self.waiting and self.error is None:
            options, indices = self.waiting[0]
            if self.in_flight and self.in_flight + len(indices) > self.share:
                break
            self.waiting.popleft()
            self.in_flight += len(indices)
            task = asyncio.ensure_future(self._call(options, indices))
            self.calls.add(task)
            task.add_done_callback(self._ended)
        if self.error is not None or (self.complete and not self.waiting and not self.calls):
            self.settled.set()

    async def _call(self, options: DecodeOptions, indices: list[int]) -> None:
        engine, valid = self.valid.model.engine, self.valid
        sentences, ids = [self.entries[i][0] for i in indices], [self.entries[i][1] for i in indices]
        prepared = engine.prepare(sentences, options, ids, max_new_tokens=valid.max_new_tokens)
        results = await translation_cache.translate(valid, prepared, engine.translate, valid.request.deadline)
        self.in_flight -= len(indices)
        self.finished.update(zip(indices, results))
        pairs = [(p, r) for i, r in zip(indices, results) for p in self.places[i]]
        if self.decoded is not None:  # first: a file job stores its sentences before their progress
            self.decoded([p for p, _ in pairs], [r for _, r in pairs])
        if self.progress is not None:
            self.progress(len(pairs))

    def _ended(self, task: asyncio.Task) -> None:
        self.calls.discard(task)
        if self.error is None:
            if task.cancelled():
                self.error = asyncio.CancelledError()
            elif task.exception() is not None:
                self.error = task.exception()
        elif not task.cancelled():
            task.exception()  # retrieved: the first failure is the one raised
        self._dispatch()

    async def results(self) -> list[TranslationResult]:
        """One result per sentence of every piece, in order, once the last piece is in and
        decoded; the first failure of a call otherwise. Cancelled, or failed: every call is."""
        assert self.complete, "the last piece is added first"
        try:
            self._dispatch()
            await self.settled.wait()
        finally:
            await self.abandon()
        if self.error is not None:
            raise self.error
        return [self.finished[i] for i in self.order]

    async def abandon(self) -> None:
        """Every call cancelled and awaited (their rows freed); none sent after."""
        self.waiting.clear()
        await cancel_all(list(self.calls))
