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


def read_or_spin(
    filename: str, content: bytes, max_file_bytes: int, max_chars: int | None = None, target_language: str = ""
):
    """``files.jobs.read_text`` as a parser that a file named ``spin.*`` makes spin and one named
    ``hog.*`` makes take 8 GiB: a test puts it in place of the real one (monkeypatch) to make a
    worker exceed its limits whatever the real parsers cost; no client can reach it."""
    from attnserve.server.files import jobs

    if filename.startswith("spin."):
        spin()
    if filename.startswith("hog."):
        allocate(8 << 30)
    return jobs.read_text(filename, content, max_file_bytes, max_chars, target_language)


def pid() -> int:
    """The worker's process id (which worker served a job)."""
    return os.getpid()
