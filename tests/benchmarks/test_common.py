"""benchmarks.common.interleaved: the order contenders run in, and how an async one is awaited."""

from __future__ import annotations

import asyncio

from attnserve.benchmarks.common import interleaved


def test_contenders_take_turns_each_timed_call_after_an_untimed_one():
    calls: list[str] = []
    runs = {name: (lambda name=name: calls.append(name) or name.upper()) for name in ("a", "b")}
    timings, values = interleaved(runs, repeats=2)
    assert calls == ["a", "b", "a", "a", "b", "b", "a", "a", "b", "b"]
    assert values == {"a": "A", "b": "B"} and [len(timings[n].seconds) for n in "ab"] == [2, 2]


def test_an_async_contender_is_awaited_on_one_loop_that_runs_for_the_whole_measurement():
    """The engine is awaited as a server's handler awaits it: on a loop that is already running
    (not one started and stopped around each call); plain contenders run on the loop's thread."""
    loops: list[asyncio.AbstractEventLoop] = []
    plain_saw_loop: list[bool] = []

    async def engine() -> str:
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)  # a real suspension: the loop must be running to come back
        return "engine"

    def plain() -> str:
        try:
            plain_saw_loop.append(asyncio.get_running_loop() is loops[-1])
        except RuntimeError:
            plain_saw_loop.append(False)
        return "plain"

    timings, values = interleaved({"engine": engine, "plain": plain}, repeats=3)
    assert values == {"engine": "engine", "plain": "plain"}
    assert len(loops) == 7 and len(set(map(id, loops))) == 1  # one warm-up + 3 x (untimed, timed), one loop
    assert all(plain_saw_loop)
    assert all(s > 0 for s in timings["engine"].seconds) and len(timings["plain"].seconds) == 3
