"""The dynamic batcher: requests that arrive together run as one inference call.

After Ray Serve's batch queue: one future per item; a batch waits until it is full
(``max_batch_size``) or its oldest item has waited ``max_queue_delay_ms``; a batch that
fails sets the exception on every future of it; the result count is checked against
the item count. Items whose caller went away (cancelled future: client cancel or
deadline) are dropped before they reach the model. ``max_in_flight`` batches may run at once
(Triton's model instances): the next batch is taken and prepared while one runs.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..shared.errors import InferenceFailed, Overloaded, ServingError, ShuttingDown

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

RunBatch = Callable[[list[Any]], Awaitable[Sequence[Any]]]
OnBatch = Callable[[int, list[float]], None]  # (batch size, queue seconds of each item)


@dataclass
class _Entry(Generic[T]):
    item: T
    future: asyncio.Future
    enqueued: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class BatchResult(Generic[R]):
    """What a caller gets: its own result, plus how its batch went."""

    value: R
    batch_size: int
    queue_s: float
    run_s: float


class BatchQueue(Generic[T, R]):
    """Collects items into batches for ``run_batch(items) -> results`` (one result per item)."""

    def __init__(
        self,
        name: str,
        run_batch: RunBatch,
        *,
        max_batch_size: int,
        max_queue_delay_ms: float,
        max_queue_size: int,
        on_batch: OnBatch | None = None,
        max_in_flight: int = 1,
    ) -> None:
        self.name = name
        self._run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_queue_delay_s = max_queue_delay_ms / 1000.0
        self.max_queue_size = max_queue_size
        self.on_batch = on_batch
        self._pending: collections.deque[_Entry] = collections.deque()
        self._queued: set[asyncio.Future] = set()  # futures still waiting (not taken, not cancelled)
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._free = asyncio.Semaphore(max_in_flight)  # batches that may start
        self._running: set[asyncio.Task] = set()
        self._closed = False
        self.batches_total = 0
        self.items_total = 0

    @property
    def queued(self) -> int:
        return len(self._queued)

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name=f"batcher-{self.name}")

    def submit_many(self, items: Sequence[T]) -> list[asyncio.Future]:
        """Queue ``items`` all or none; each future resolves to a :class:`BatchResult`.

        Raises :class:`ShuttingDown` after :meth:`stop`, :class:`Overloaded` when the
        queue has no room for all of them.
        """
        if self._closed or self._task is None:
            raise ShuttingDown(f"model {self.name} is not taking new requests (server shutting down)")
        if len(self._queued) + len(items) > self.max_queue_size:
            raise Overloaded(
                f"model {self.name}: queue full ({len(self._queued)} waiting, {len(items)} more asked, "
                f"max_queue_size {self.max_queue_size}); retry later"
            )
        loop = asyncio.get_running_loop()
        futures = []
        for item in items:
            future = loop.create_future()
            future.add_done_callback(self._queued.discard)  # a caller that went away frees its slot now
            self._pending.append(_Entry(item, future))
            self._queued.add(future)
            futures.append(future)
        self._wakeup.set()
        return futures

    async def submit(self, item: T) -> BatchResult[R]:
        return await self.submit_many([item])[0]

    def _take_batch(self) -> list[_Entry]:
        batch = []
        while self._pending and len(batch) < self.max_batch_size:
            entry = self._pending.popleft()
            if not entry.future.cancelled():
                self._queued.discard(entry.future)
                batch.append(entry)
        return batch

    async def _wait_for_batch(self) -> None:
        """Until a full batch is waiting, or, with no batch running, the oldest item's delay is
        over: while one runs, the next is taken early only when full (and prepared meanwhile),
        else when that one ends, with what arrived meanwhile."""
        while True:
            while self._pending and self._pending[0].future.cancelled():
                self._pending.popleft()
            if not self._pending:
                if self._closed:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            if len(self._queued) >= self.max_batch_size:
                return
            if self._running:  # woken by a new item or by the running batch's end (_ran)
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            remaining = self._pending[0].enqueued + self.max_queue_delay_s - time.monotonic()
            if remaining <= 0:
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), remaining)
            except asyncio.TimeoutError:
                return

    async def _loop(self) -> None:
        try:
            while True:
                await self._free.acquire()
                await self._wait_for_batch()
                batch = self._take_batch()
                if not batch:
                    self._free.release()
                    if self._closed and not self._pending:
                        break
                    continue
                task = asyncio.create_task(self._run(batch), name=f"batch-{self.name}")
                self._running.add(task)
                task.add_done_callback(self._ran)
            while self._running:  # stopping: the batches already taken finish
                await asyncio.gather(*self._running)
        finally:  # cancelled (stop past its grace): the running batches' items fail too
            for task in self._running:
                task.cancel()
            if self._running:
                await asyncio.gather(*self._running, return_exceptions=True)

    def _ran(self, task: asyncio.Task) -> None:
        self._running.discard(task)
        self._free.release()
        self._wakeup.set()

    async def _run(self, batch: list[_Entry]) -> None:
        start = time.monotonic()
        queue_s = [start - e.enqueued for e in batch]
        try:
            results = await self._run_batch([e.item for e in batch])
            if len(results) != len(batch):
                raise InferenceFailed(f"model {self.name}: a batch of {len(batch)} returned {len(results)} results")
        except asyncio.CancelledError:
            for e in batch:
                if not e.future.done():
                    e.future.set_exception(ShuttingDown(f"model {self.name}: stopped before the batch finished"))
            raise
        except Exception as exc:  # noqa: BLE001 - every request of a failed batch gets the cause
            error = (
                exc
                if isinstance(exc, ServingError)
                else InferenceFailed(
                    f"model {self.name}: inference failed on a batch of {len(batch)}: {type(exc).__name__}: {exc}"
                )
            )
            if not isinstance(exc, ServingError):
                log.error("model %s: batch of %d failed", self.name, len(batch), exc_info=exc)
            for e in batch:
                if not e.future.done():
                    e.future.set_exception(error)
            return
        run_s = time.monotonic() - start
        self.batches_total += 1
        self.items_total += len(batch)
        if self.on_batch is not None:
            self.on_batch(len(batch), queue_s)
        for e, value, q in zip(batch, results, queue_s):
            if not e.future.done():
                e.future.set_result(BatchResult(value, len(batch), q, run_s))

    async def stop(self, grace_s: float) -> None:
        """Take no new items; let the queued ones run within ``grace_s``; fail the rest."""
        self._closed = True
        self._wakeup.set()
        if self._task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), grace_s)
        except asyncio.TimeoutError:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        while self._pending:
            entry = self._pending.popleft()
            if not entry.future.done():
                entry.future.set_exception(ShuttingDown(f"model {self.name}: server stopped before this ran"))
