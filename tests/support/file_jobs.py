"""Jobs for a file worker pool's tests (``server.files.sandbox``): module-level, so a spawned
worker imports them by name, and each does one thing a hostile file could make a parser do."""

from __future__ import annotations

import os
import signal


def echo(value):
    return value


def spin() -> None:
    """Burn CPU until the worker's CPU limit ends it."""
    n = 0
    while True:
        n += 1


def allocate(size: int) -> int:
    """Take ``size`` bytes at once (past the worker's memory limit: MemoryError)."""
    return len(bytearray(size))


def crash() -> None:
    """End the worker the way a crashing C parser would."""
    os.kill(os.getpid(), signal.SIGSEGV)
