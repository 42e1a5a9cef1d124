"""A request's distinct sentences on the engine: the one way they are decoded, whole or streamed.

:func:`decode` takes the request's work (``documents.sentence_work``: each distinct sentence, its
ids and options) and yields ``(indices, events)`` as the engine hands them out: the engine's
``StreamEvent``s of those sentences, each sentence's last one carrying its whole result
(``StreamEvent.result``). A unary call (``documents.translate_sentences``) drains it, taking each
sentence's result; a stream (``document_stream``) passes its sentences' token events on in
document order. One generator holds the calls, their concurrency, the deadline and the cleanup
of both:

- whole (``tokens`` off): sentences of equal options go to the engine in calls of at most
  ``--max-texts-per-request`` through the translation cache (``translation_cache``); at most half
  of the engine's queue is taken by one request at a time, the calls in document order. The
  events are each call's sentences' last events, when the call finishes;
- streamed: one engine stream per sentence, since the engine streams a text's tokens only for
  one text of a one-row search; as many at once as one whole call would hold. The cache is not
  read: a stream's client gets the tokens as the model generates them.

Closing the generator (the request answered, failed, cancelled or its client gone) cancels every
call still running: their rows leave the decode batch at the next step.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence

from ..shared.errors import InferenceFailed
from ..translation import DecodeOptions, StreamEvent, TranslationResult
from . import translation_cache
from .requests import ValidTranslation

Work = list[tuple[str, Sequence[int], DecodeOptions]]  # (sentence, its ids, its options)
Decoded = tuple[Sequence[int], Sequence[StreamEvent]]  # (indices into the work, their events)
# awaited before a streamed sentence's last event goes out: (its index, its generated ids, that event)
Finish = Callable[[int, Sequence[int], StreamEvent], Awaitable[None]]
PROGRESS_STEPS = 32  # engine calls a request with progress is cut into, at most


def window(valid: ValidTranslation) -> tuple[int, int]:
    """(sentences per engine call, calls in flight) for one request: at most half of the engine's
    queue (``max_queue_size``), so one long document does not fill it and refuse everyone else."""
    share = max(1, valid.model.engine.settings.max_queue_size // 2)  # of the queue, for one request at a time
    chunk = min(valid.sentences_per_call, share)
    return chunk, max(1, share // chunk)


def last_event(result: TranslationResult) -> StreamEvent:
    """A sentence's last event from its whole result (a call's, or the cache's)."""
    best = result.hypotheses[0]
    return StreamEvent(
        best.text, tuple(best.token_ids), best.finish_reason, result.queue_ms, tuple(best.written_ids),
        result.memory, result.attention, result=result,
    )  # fmt: skip


Calls = list[tuple[DecodeOptions, list[int]]]  # (options, indices into the work) per engine call


def plan(valid: ValidTranslation, work: Work, tokens: bool, stepped: bool) -> tuple[Calls, int]:
    """(the engine calls of ``work``: (options, indices) in document order, how many run at once).
    Whole: the window's; ``stepped``: a request with progress is cut into about PROGRESS_STEPS
    smaller calls (the same sentences in flight), so that a file's progress moves in steps a
    person sees. Streamed: one sentence per call, one whole call's sentences at once."""
    chunk, running = window(valid)
    if tokens:
        return [(options, [i]) for i, (_, _, options) in enumerate(work)], chunk
    if stepped:
        share = chunk * running
        chunk = stepped_chunk(chunk, len(work))
        running = max(1, share // chunk)
    return calls_of(((i, options) for i, (_, _, options) in enumerate(work)), chunk), running


def stepped_chunk(chunk: int, sentences: int) -> int:
    """A call's size where progress is told: about 1/PROGRESS_STEPS of the sentences, at most ``chunk``."""
    return max(1, min(chunk, -(-sentences // PROGRESS_STEPS)))


def calls_of(entries: Iterable[tuple[int, DecodeOptions]], chunk: int) -> Calls:
    """The engine calls of (index, options) entries: those of equal options together, at most
    ``chunk`` a call, in document order (a file's progress, and what it aligns, go along)."""
    by_options: dict[DecodeOptions, list[int]] = {}
    for i, options in entries:
        by_options.setdefault(options, []).append(i)
    out = [(options, idx[j : j + chunk]) for options, idx in by_options.items() for j in range(0, len(idx), chunk)]
    out.sort(key=lambda call: call[1][0])
    return out


async def _call(
    valid: ValidTranslation,
    work: Work,
    options: DecodeOptions,
    indices: Sequence[int],
    tokens: bool,
    finish: Finish | None,
) -> AsyncIterator[Sequence[StreamEvent]]:
    """One engine call's events: whole, its sentences' last events at once (through the cache);
    streamed, its one sentence's events one by one."""
    engine, deadline = valid.model.engine, valid.request.deadline
    sentences, ids = [work[i][0] for i in indices], [work[i][1] for i in indices]
    prepared = engine.prepare(sentences, options, ids, max_new_tokens=valid.max_new_tokens)
    if not tokens:
        results = await translation_cache.translate(valid, prepared, engine.translate, deadline)
        yield [last_event(result) for result in results]
        return
    generated: list[int] = []
    async with contextlib.aclosing(engine.stream(prepared, deadline=deadline)) as events:
        async for event in events:
            generated += event.token_ids
            if event.finish_reason is not None:
                if finish is not None:
                    await finish(indices[0], generated, event)
                yield [event]
                return
            yield [event]
    raise InferenceFailed(f"the stream of sentence {indices[0]} ended without a finish reason")


async def decode(
    valid: ValidTranslation, work: Work, tokens: bool = False, stepped: bool = False, finish: Finish | None = None
) -> AsyncIterator[Decoded]:
    """``(indices, events)`` of ``work``'s sentences as the engine hands them out (see the module
    docstring); a failure of any call fails the whole and cancels the others."""
    todo, running = plan(valid, work, tokens, stepped)
    if len(todo) == 1 and not tokens:  # one call: awaited here, without a task
        options, indices = todo[0]
        async with contextlib.aclosing(_call(valid, work, options, indices, tokens, finish)) as one:
            async for events in one:
                yield indices, events
        return
    queue: asyncio.Queue = asyncio.Queue()
    gate = asyncio.Semaphore(running)

    async def run(options: DecodeOptions, indices: list[int]) -> None:
        async with gate:
            try:
                async for events in _call(valid, work, options, indices, tokens, finish):
                    queue.put_nowait((indices, events))
            except Exception as exc:  # noqa: BLE001 - raised where the events are read
                queue.put_nowait(exc)
            else:
                queue.put_nowait(None)

    tasks = [asyncio.ensure_future(run(options, indices)) for options, indices in todo]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            if item is None:
                remaining -= 1
                continue
            yield item
    finally:  # answered, failed, cancelled or closed: every call still running frees its rows
        await cancel_all(tasks)


async def cancel_all(tasks: list[asyncio.Future]) -> None:
    pending = [t for t in tasks if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending)
