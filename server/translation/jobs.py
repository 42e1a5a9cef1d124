"""One text being translated (a :class:`Job`) and where its results go (sinks).

A job is created on the event loop, decoded on the scheduler thread, and reports back
through its sink and the scheduler's :class:`Outbox` (``loop.call_soon_threadsafe``),
so the event loop never waits on the decoder and the decoder never waits on the event
loop.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Sequence

import numpy as np

from .options import DecodeOptions
from .search import Finished, Search
from .searches import make_search
from .step_attention import StepAttention
from .term_swap import TermSwap, swap

log = logging.getLogger(__name__)


class Sink:
    """Where a job's outcome goes. Methods are called on the scheduler thread."""

    streams = False  # wants every token (``token``); otherwise only the outcome

    def token(self, job: Job, token_id: int, finish_reason: str | None) -> None:
        """A generated token (greedy or sampling); ``finish_reason`` set on the last."""

    def done(self, job: Job) -> None:
        """The search is complete; ``job.result()`` holds the hypotheses."""

    def fail(self, job: Job, error: BaseException) -> None:
        """The job failed (inference error, shutdown)."""


class Outbox:
    """Callbacks for event loops, gathered on the scheduler thread and delivered with one
    ``call_soon_threadsafe`` per loop when flushed, rather than one wake-up per token or
    result. The scheduler flushes right before each model run (``ModelRunner(before_run=)``:
    a step's decoder run, a boundary's encoder runs) and when its batch empties."""

    def __init__(self) -> None:
        self._items: list[tuple[asyncio.AbstractEventLoop, Callable, tuple]] = []

    def post(self, loop: asyncio.AbstractEventLoop, callback: Callable, *args) -> None:
        self._items.append((loop, callback, args))

    def flush(self) -> None:
        if not self._items:
            return
        items, self._items = self._items, []
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Callable, tuple]]] = {}
        for loop, callback, args in items:
            by_loop.setdefault(loop, []).append((callback, args))
        for loop, calls in by_loop.items():
            try:
                loop.call_soon_threadsafe(_run_all, calls)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                log.debug("event loop closed; dropping %d results", len(calls))


def _run_all(calls: list[tuple[Callable, tuple]]) -> None:
    for callback, args in calls:
        callback(*args)


def _settle(future: asyncio.Future, value=None, error: BaseException | None = None) -> None:
    if future.done():  # cancelled by the client meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


class Gather:
    """One asyncio future for all the jobs of a request: resolved once, with ``build(job)`` of
    every job in order when the last one completes, or with the first error, so a request
    costs the event loop one wake-up however many texts it has. Scheduler thread only."""

    def __init__(self, outbox: Outbox, future: asyncio.Future, build: Callable[[Job], object], count: int) -> None:
        self.outbox, self.loop, self.future, self.build = outbox, future.get_loop(), future, build
        self.results: list[object] = [None] * count
        self.left = count
        self.settled = False
        self.sinks: list[Sink] = [_GatherPart(self, i) for i in range(count)]  # one per job, in result order

    def done(self, index: int, job: Job) -> None:
        self.results[index] = self.build(job)
        self.left -= 1
        if not self.left and not self.settled:
            self.settled = True
            self.outbox.post(self.loop, _settle, self.future, self.results)

    def fail(self, error: BaseException) -> None:
        if not self.settled:
            self.settled = True
            self.outbox.post(self.loop, _settle, self.future, None, error)


class _GatherPart(Sink):
    __slots__ = ("gather", "index")

    def __init__(self, gather: Gather, index: int) -> None:
        self.gather, self.index = gather, index

    def done(self, job: Job) -> None:
        self.gather.done(self.index, job)

    def fail(self, job: Job, error: BaseException) -> None:
        self.gather.fail(error)


class StreamSink(Sink):
    """Feeds ``(token_ids, finish_reason)`` tuples, or an exception, into an asyncio queue.

    The ``hidden`` leading tokens (a forced prefix the client does not see) are never passed
    on; a finish among them goes as ``([], finish_reason)``. ``interval_s``: the shown tokens
    are passed on at most that often. The first and the last go at once; those in between are
    held and go with the first token generated after the interval has passed, so one stream
    costs the event loop one wake-up and the client one message per interval instead of one
    per token, and never delays its start or its end (0 = every token at once).

    ``swap``: the job's glossary terms go through surrogates; the tokens pass through it first
    (``term_swap.TermSwap``: a surrogate is held back until its target replaces it), and the
    last tuple has a third item, the ids the decoder was fed (hidden prefix left out).
    """

    streams = True

    def __init__(
        self,
        outbox: Outbox,
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue,
        interval_s: float = 0.0,
        hidden: int = 0,
        swap: TermSwap | None = None,
    ) -> None:
        self.outbox, self.loop, self.queue, self.interval_s = outbox, loop, queue, interval_s
        self.hidden = hidden  # leading tokens the client does not see (a hidden forced prefix)
        self.swap = swap  # a job's glossary terms written through surrogates (term_swap.py)
        self.written: list[int] = []  # with a swap: the tokens fed after the hidden ones, for the last post
        self.unwritten = hidden  # hidden tokens still to come, which ``written`` leaves out
        self.held: list[int] = []
        self.next_post = 0.0  # perf_counter time before which a token is held

    def token(self, job: Job, token_id: int, finish_reason: str | None) -> None:
        if self.swap is None:
            self._shown(token_id)
        else:  # surrogates held back until swapped for their terms' targets (term_swap.py)
            if self.unwritten:
                self.unwritten -= 1
            else:
                self.written.append(token_id)
            for shown in self.swap.push(token_id) + (self.swap.flush() if finish_reason is not None else []):
                self._shown(shown)
        if finish_reason is None:
            if not self.held:
                return
            if self.interval_s:
                now = time.perf_counter()
                if now < self.next_post:
                    return
                self.next_post = now + self.interval_s
        held, self.held = self.held, []
        if finish_reason is not None and self.swap is not None:  # the fed tokens go with the last
            self.outbox.post(self.loop, self.queue.put_nowait, (held, finish_reason, tuple(self.written)))
            return
        self.outbox.post(self.loop, self.queue.put_nowait, (held, finish_reason))

    def _shown(self, token_id: int) -> None:
        if self.hidden:  # a hidden forced token: never passed on
            self.hidden -= 1
        else:
            self.held.append(token_id)

    def fail(self, job: Job, error: BaseException) -> None:
        self.outbox.post(self.loop, self.queue.put_nowait, error)


class CollectSink(Sink):
    """Keeps the outcome on the sink (synchronous use: warm-up, tests)."""

    def __init__(self) -> None:
        self.finished: list[Finished] | None = None
        self.error: BaseException | None = None

    def done(self, job: Job) -> None:
        self.finished = job.result()

    def fail(self, job: Job, error: BaseException) -> None:
        self.error = error


class JobState(enum.Enum):
    """A job's lifecycle (docs/architecture.md): WAITING -> ENCODING -> RUNNING -> FINISHED,
    or CANCELLED / FAILED from any of the first three."""

    WAITING = "waiting"  # queued, holds no budget
    ENCODING = "encoding"  # admitted: holds its rows and tokens; encoder output not in the batch yet
    RUNNING = "running"  # has rows in the decode batch
    FINISHED = "finished"  # its search is complete; result delivered
    FAILED = "failed"  # an error was delivered (inference failure, deadline, shutdown)
    CANCELLED = "cancelled"  # the client went away; nothing delivered

    @property
    def done(self) -> bool:
        return self in _DONE


_DONE = frozenset({JobState.FINISHED, JobState.FAILED, JobState.CANCELLED})


class Job:
    """One source text: its tokens and decoding options (forced prefix included), its search,
    its place in the batch, what it reserves of the budgets, its state and timings.

    ``deadline``: ``time.perf_counter()`` time (the scheduler's clock) after which it fails
    with DEADLINE_EXCEEDED (None = none); ``bytes_per_token``: KV-cache bytes a token of it holds
    (``--max-cache-bytes``' measure).
    """

    def __init__(
        self,
        src_ids: list[int],
        options: DecodeOptions,
        max_new_tokens: int,
        eos_id: int,
        sink: Sink,
        *,
        deadline: float | None = None,
        bytes_per_token: int = 0,
    ) -> None:
        self.src_ids = np.asarray(src_ids, dtype=np.int64)  # (L,)
        self.options = options
        self.max_new_tokens = max_new_tokens
        self.sink = sink
        self.deadline = deadline
        self.search: Search = make_search(options, max_new_tokens, eos_id)
        self.swaps = has_surrogates(options)  # glossary terms written through surrogates (term_swap.py)
        self.state = JobState.WAITING
        self.cancel_requested = False  # set from the event loop; acted on at the next step boundary
        # admission reserves every beam's row and its whole length up front
        self.reserved_rows = options.beam_size
        self.reserved_tokens = options.beam_size * (len(src_ids) + max_new_tokens)
        self.reserved_bytes = self.reserved_tokens * bytes_per_token
        self.holds_budget = False
        # batch placement (scheduler thread)
        self.slots = np.zeros(0, dtype=np.int64)  # its rows in the batch (beam order)
        self.parents: list[int] | None = None  # after a beam step: row i continues beam parents[i]
        self.next_tokens: list[int] | None = None
        self.encoded: Sequence[np.ndarray] | None = None  # cross K/V from the encoder until it joins the batch
        self.memory: np.ndarray | None = None  # the encoder's output, (L, C), with options.return_memory
        # with options.return_attention: what its steps kept of the decoder's step_attention
        self.attention = StepAttention(not self.search.in_place) if options.return_attention else None
        # timings (perf_counter seconds)
        self.t_submit = time.perf_counter()
        self.t_admit = 0.0
        self.t_first = 0.0
        self.t_done = 0.0
        self.encode_s = 0.0

    @property
    def done(self) -> bool:
        return self.state.done

    @property
    def source_tokens(self) -> int:
        return int(self.src_ids.shape[0])

    def result(self) -> list[Finished]:
        """The search's hypotheses, with surrogates swapped for their terms' targets."""
        finished = self.search.result()
        if not self.swaps:
            return finished
        terms, skip = self.options.constraints, len(self.options.prefix_ids)
        return [Finished(swap(terms, h.tokens, skip), h.logprob, h.score, h.finish_reason, h.tokens) for h in finished]


def has_surrogates(options: DecodeOptions) -> bool:
    return any(c.term.target_tokens is not None for c in options.constraints)


def stream_swap(options: DecodeOptions) -> TermSwap | None:
    """A stream's :class:`~.term_swap.TermSwap` when its terms have surrogates (its sink's)."""
    return TermSwap(options.constraints, len(options.prefix_ids)) if has_surrogates(options) else None
