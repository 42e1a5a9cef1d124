"""Work run in a forked child under a CPU-time and memory limit, as the server's
file workers run it: a test of a hostile input asserts the child's answer (a result or the clear
refusal), and an input that costs more than the limit fails the test instead of hanging it."""

from __future__ import annotations

import gc
import multiprocessing
import resource
from collections.abc import Callable
from typing import Any

WALL_SECONDS = 120  # a child that sleeps or blocks is killed after this, whatever its CPU limit


def _address_space() -> int:
    """This process's virtual memory size in bytes (VmSize)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))


def _child(conn: Any, fn: Callable[..., Any], args: tuple, cpu_seconds: int, memory_bytes: int) -> None:
    # The parent's objects are out of the collector's reach: a collection in the child would run the
    # finalizers of what earlier tests left (gRPC servers and channels whose threads the fork did not
    # copy), which wait on those threads and spend the child's CPU limit before its work does
    gc.freeze()
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    limit = _address_space() + memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        conn.send(("ok", fn(*args)))
    except BaseException as exc:  # the answer under test may be any error: send its type and words
        conn.send(("error", (type(exc).__name__, str(exc))))


def within(fn: Callable[..., Any], *args: Any, cpu_seconds: int = 10, memory_bytes: int = 1 << 30) -> tuple:
    """``("ok", fn(*args))`` or ``("error", (type name, message))`` from a forked child limited to
    ``cpu_seconds`` of CPU and ``memory_bytes`` more address space than it was forked with (an
    attack that would take gigabytes on a shared machine fails the test with MemoryError instead);
    AssertionError when the child was killed at a limit or gave no answer."""
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(child, fn, args, cpu_seconds, memory_bytes))
    process.start()
    child.close()
    try:
        if not parent.poll(WALL_SECONDS):
            raise AssertionError(f"no answer within {WALL_SECONDS} s (CPU limit {cpu_seconds} s)")
        return parent.recv()
    except EOFError:
        process.join()
        raise AssertionError(
            f"the child died (exit code {process.exitcode}) under a {cpu_seconds} s CPU limit"
        ) from None
    finally:
        process.kill()
        process.join()
