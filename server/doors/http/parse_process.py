"""Large JSON bodies parsed in a child process, so that no request body stalls the event loop.

``json.loads`` holds the GIL for the whole parse (a thread would not help): a KServe infer
body of 64 MB of numbers, which ``--max-message-bytes`` allows, takes the parser about
0.9 s. A body whose JSON part is over ``INLINE_BYTES`` is parsed by :class:`ParseProcess`:
one child process, started on the first such body, that runs the codec's parse function and
sends back its result (an ``InferRequest`` of numpy arrays pickles in microseconds). Smaller
bodies (every text route's: at most 2.5 MB at the defaults, a few ms) are parsed inline.

Bodies wait for the one child in turn, so it parses one at a time. Its memory is bounded by
``RLIMIT_AS`` (``--parse-memory-bytes`` over its size once its first body's parse function was
imported), as a file worker's is by ``--file-memory-bytes``: 64 MB of small JSON numbers takes
0.5-0.7 GB as Python objects, 64 MB of one-number lists 1.7 GB; a parse past the limit fails with
MemoryError, which fails that body with ``BodyTooLarge`` (413) and leaves the child serving.
A child that dies (killed) fails the body it was parsing with ``InferenceFailed``; the next
large body starts a new one.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import resource
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from ...shared.errors import InferenceFailed, Overloaded

log = logging.getLogger(__name__)
T = TypeVar("T")

INLINE_BYTES = 1 << 20  # JSON up to this size is parsed on the event loop (~15 ms at worst)


class BodyTooLarge(Overloaded):
    """A body whose parse needed more memory than ``--parse-memory-bytes``: 413."""

    http_status = 413


_limited = False  # in the child: whether its RLIMIT_AS is set


def _bounded(memory_bytes: int, fn: Callable[..., T], body: bytes, *args) -> T:
    """``fn(body, *args)`` in the child, its address space limited to its size now plus
    ``memory_bytes`` from the first call on (``fn``'s module and numpy are imported by then)."""
    global _limited
    if memory_bytes > 0 and not _limited:
        with open("/proc/self/statm") as statm:
            size = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        wanted = size + memory_bytes
        resource.setrlimit(resource.RLIMIT_AS, (wanted if hard == resource.RLIM_INFINITY else min(wanted, hard), hard))
        _limited = True
    return fn(body, *args)


class ParseProcess:
    """Runs a parse function on a body in a child process when the body is large."""

    def __init__(self, inline_bytes: int = INLINE_BYTES, memory_bytes: int = 0) -> None:
        self.inline_bytes, self.memory_bytes = inline_bytes, memory_bytes
        self._pool: ProcessPoolExecutor | None = None

    async def parse(self, fn: Callable[..., T], body: bytes, json_bytes: int, *args) -> T:
        """``fn(body, *args)``; in the child when ``json_bytes`` (the JSON part of ``body``) is
        over the inline size. ``fn`` must be a module-level function whose result pickles."""
        if json_bytes <= self.inline_bytes:
            return fn(body, *args)
        if self._pool is None:
            # spawn: the server's gRPC and onnxruntime threads must not be forked
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        pool = self._pool
        try:
            return await asyncio.get_running_loop().run_in_executor(pool, _bounded, self.memory_bytes, fn, body, *args)
        except MemoryError:
            raise BodyTooLarge(
                f"parsing this request's JSON body needed more than {self.memory_bytes:,} bytes of memory "
                "(--parse-memory-bytes); send large tensors as binary data"
            ) from None
        except BrokenProcessPool:
            if self._pool is pool:
                self._pool = None
            log.warning("the JSON parsing process died; the next large body starts a new one")
            raise InferenceFailed("the process parsing this request's JSON body died; retry") from None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
