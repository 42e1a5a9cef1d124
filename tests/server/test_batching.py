"""The dynamic batcher (BatchQueue): batches what arrives together, one future per item,
failed batches fail every item, cancelled items never run, bounded queue, graceful stop."""

from __future__ import annotations

import asyncio

import pytest

from attnserve.server.images.batching import BatchQueue
from attnserve.server.shared.errors import InferenceFailed, Overloaded, ShuttingDown


def _queue(run, **kw) -> BatchQueue:
    kw = {"max_batch_size": 4, "max_queue_delay_ms": 20, "max_queue_size": 16, **kw}
    return BatchQueue("m", run, **kw)


def test_items_arriving_together_share_batches_and_keep_their_own_results():
    seen: list[list[int]] = []

    async def run(items):
        seen.append(list(items))
        return [x * 10 for x in items]

    async def main():
        q = _queue(run)
        await q.start()
        results = await asyncio.gather(*(q.submit(i) for i in range(10)))
        await q.stop(1)
        return results

    results = asyncio.run(main())
    assert [r.value for r in results] == [i * 10 for i in range(10)]
    assert [len(b) for b in seen] == [4, 4, 2]  # full batches go at once, the rest after the delay
    assert {r.batch_size for r in results} == {4, 2}


def test_zero_delay_runs_a_lone_item_at_once_and_batches_what_arrived_meanwhile():
    """The default (max_queue_delay_ms 0): an idle model never waits for company; items
    that arrive while a batch runs go together in the next one."""
    seen: list[list[int]] = []

    async def run(items):
        seen.append(list(items))
        await asyncio.sleep(0.2)
        return items

    async def main():
        q = _queue(run, max_queue_delay_ms=0, max_batch_size=8)
        await q.start()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        first = await q.submit(0)
        lone_s = loop.time() - t0
        busy = asyncio.ensure_future(q.submit(1))
        await asyncio.sleep(0.05)  # batch [1] is running now
        later = [asyncio.ensure_future(q.submit(i)) for i in range(2, 7)]
        await asyncio.gather(busy, *later)
        await q.stop(1)
        return first, lone_s

    first, lone_s = asyncio.run(main())
    assert seen == [[0], [1], [2, 3, 4, 5, 6]]
    assert first.queue_s < 0.05 and lone_s < 0.2 + 0.1  # not held back by a queue delay


def test_a_failed_batch_fails_every_item_with_the_cause():
    async def run(items):
        raise RuntimeError("kernel exploded")

    async def main():
        q = _queue(run)
        await q.start()
        outcome = await asyncio.gather(*(q.submit(i) for i in range(3)), return_exceptions=True)
        await q.stop(1)
        return outcome

    outcome = asyncio.run(main())
    assert all(isinstance(e, InferenceFailed) and "kernel exploded" in str(e) for e in outcome)


def test_result_count_is_checked():
    async def run(items):
        return items[:-1]

    async def main():
        q = _queue(run)
        await q.start()
        outcome = await asyncio.gather(*(q.submit(i) for i in range(2)), return_exceptions=True)
        await q.stop(1)
        return outcome

    assert all(isinstance(e, InferenceFailed) and "returned 1 results" in str(e) for e in asyncio.run(main()))


def test_cancelled_items_are_dropped_and_free_their_slot():
    ran: list[int] = []

    async def run(items):
        ran.extend(items)
        return items

    async def main():
        q = _queue(run, max_queue_delay_ms=100, max_queue_size=2)
        await q.start()
        doomed = asyncio.ensure_future(q.submit(1))
        keeper = asyncio.ensure_future(q.submit(2))
        await asyncio.sleep(0.01)
        assert q.queued == 2
        doomed.cancel()
        await asyncio.sleep(0)
        assert q.queued == 1  # the slot is free at once, not when the batch forms
        third = asyncio.ensure_future(q.submit(3))
        values = [r.value for r in await asyncio.gather(keeper, third)]
        await q.stop(1)
        return values

    assert asyncio.run(main()) == [2, 3]
    assert ran == [2, 3]


def test_queue_full_and_stopped_queue():
    async def run(items):
        await asyncio.sleep(0.05)
        return items

    async def main():
        q = _queue(run, max_queue_size=3, max_queue_delay_ms=50)
        await q.start()
        futures = q.submit_many([1, 2, 3])
        with pytest.raises(Overloaded, match="queue full"):
            q.submit_many([4])
        stop = asyncio.ensure_future(q.stop(5))
        await asyncio.sleep(0)
        with pytest.raises(ShuttingDown):
            q.submit_many([5])
        values = [r.value for r in await asyncio.gather(*futures)]  # queued work still runs during the drain
        await stop
        return values

    assert asyncio.run(main()) == [1, 2, 3]


def test_stop_fails_what_cannot_finish_within_grace():
    async def run(items):
        await asyncio.sleep(10)
        return items

    async def main():
        q = _queue(run, max_queue_delay_ms=0)
        await q.start()
        future = q.submit_many([1])[0]
        await asyncio.sleep(0.01)
        await q.stop(0.05)
        return await asyncio.gather(future, return_exceptions=True)

    (outcome,) = asyncio.run(main())
    assert isinstance(outcome, ShuttingDown)


def test_two_in_flight_a_full_batch_is_prepared_while_another_runs():
    """max_in_flight 2: a full batch starts while the first runs; a partial one waits until no
    batch runs and then carries what arrived meanwhile (zero delay), as with one batch in flight;
    every item gets its own result."""
    events: list[tuple[str, list[int]]] = []

    async def run(items):
        events.append(("start", list(items)))
        await asyncio.sleep(0.15)
        events.append(("end", list(items)))
        return [x * 10 for x in items]

    async def main():
        q = _queue(run, max_queue_delay_ms=0, max_batch_size=3, max_in_flight=2)
        await q.start()
        futures = [asyncio.ensure_future(q.submit(0))]  # a lone item runs at once
        for i in (1, 2, 3):  # 1 and 2 wait while [0] runs; with 3 the batch is full: it starts
            await asyncio.sleep(0.03)
            futures.append(asyncio.ensure_future(q.submit(i)))
        await asyncio.sleep(0.01)
        futures += [asyncio.ensure_future(q.submit(i)) for i in (4, 5)]  # both slots busy: wait
        results = await asyncio.gather(*futures)
        await q.stop(1)
        return [r.value for r in results]

    values = asyncio.run(main())
    assert values == [i * 10 for i in range(6)]
    assert events == [
        ("start", [0]),
        ("start", [1, 2, 3]),  # beside [0]
        ("end", [0]),  # a slot is free, but [4, 5] is not full and [1, 2, 3] runs: it waits
        ("end", [1, 2, 3]),
        ("start", [4, 5]),
        ("end", [4, 5]),
    ]


def test_stop_past_grace_fails_every_batch_in_flight():
    async def run(items):
        await asyncio.sleep(10)
        return items

    async def main():
        q = _queue(run, max_queue_delay_ms=0, max_batch_size=2, max_in_flight=2)
        await q.start()
        futures = q.submit_many([1]) + q.submit_many([2, 3])  # [1] runs; [2, 3] is full: runs beside it
        await asyncio.sleep(0.02)
        await q.stop(0.05)
        return await asyncio.gather(*futures, return_exceptions=True)

    assert all(isinstance(e, ShuttingDown) for e in asyncio.run(main()))
