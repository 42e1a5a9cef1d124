"""py-spy's samples of a server process, grouped by where they fall, and the process's CPU time:
what ``server-profile`` reports for the classification and the translation server."""

from __future__ import annotations

import os
from pathlib import Path

Groups = list[tuple[str, tuple[str, ...]]]  # (a group's name, needles: one in a sample's stack puts it there)

# A sample's group: the first rule whose needle is in its stack. py-spy's idle detection does
# not see threads blocked inside C (a thread-pool worker waiting on its queue, the event loop
# in epoll, gRPC's poller thread), so samples whose innermost Python frame is such a wait are
# kept apart as "waiting, or C code with no Python frame", and left out of the per-request sum.
WAITING = "waiting, or C code with no Python frame (not counted)"
WAIT_LEAVES = (
    "EpollSelector.select (",
    "_worker (concurrent/futures/thread.py:81)",
    "Thread.run (threading.py",
    "Condition.wait (",
    "Event.wait (",
    "Thread._bootstrap (",
)
OTHER = "other Python"


def group_of(stack: str, groups: Groups) -> str:
    leaf = stack.rsplit(";", 1)[-1]
    if leaf.startswith(WAIT_LEAVES):
        return WAITING
    for name, needles in groups:
        if any(n in stack for n in needles):
            return name
    return OTHER


def parse_raw(text: str, groups: Groups) -> dict[str, int]:
    """py-spy's ``--format raw`` (one ``frame;frame;... count`` line per distinct stack) -> samples per group."""
    counts: dict[str, int] = {name: 0 for name, _ in groups} | {OTHER: 0, WAITING: 0}
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            counts[group_of(stack, groups)] += int(count)
    return counts


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of every thread of ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
