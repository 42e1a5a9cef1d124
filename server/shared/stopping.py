"""A request's work on the work pool (``--preprocess-threads``) that stops when the request does.

A thread cannot be interrupted, and a request's preprocessing can be long: a 200-page text file is
one document whose splitting into sentences takes a second or more. :func:`run` runs a function
on the pool for the awaiting task; when that task is cancelled (the client went away: a gRPC
cancel, a closed HTTP connection; or its deadline passed) the call is dropped if no thread has
taken it yet, and otherwise its flag is set, which the long loops of that work read between their
units (:func:`check`: between a document's texts and lines), so the thread stops there and takes
the next request's work instead of finishing what nobody waits for. The flag travels in a context
variable set for the call's thread only, so the splitting code keeps its signatures and runs the
same on the event loop (no flag there: :func:`check` never stops it)."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")

_stop: ContextVar[threading.Event | None] = ContextVar("attnserve_stop", default=None)


class Stopped(Exception):
    """Raised in pool work whose request was cancelled; nobody awaits its result."""


def check() -> None:
    """Stopped, where the request the current pool work is for was cancelled."""
    flag = _stop.get()
    if flag is not None and flag.is_set():
        raise Stopped


def _flagged(flag: threading.Event, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    token = _stop.set(flag)
    try:
        return fn(*args)
    finally:
        _stop.reset(token)


async def run(pool: Executor, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on ``pool``, stopped at its next :func:`check` once the awaiting task is cancelled."""
    flag = threading.Event()
    try:
        return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(_flagged, flag, fn, args))
    except asyncio.CancelledError:
        flag.set()
        raise
