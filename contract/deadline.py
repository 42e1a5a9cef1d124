"""When a request's work is dropped: one :class:`Deadline` from the door to the decode scheduler.

Every door builds its request's deadline with :meth:`Deadline.from_timeout` (the gRPC client's
time remaining, Triton's ``timeout`` parameter); the service caps it with the server's own
limit (:meth:`Deadline.within`, ``--request-timeout-seconds`` / ``--file-timeout-seconds``) and
hands the same object to the registry (a model's load is awaited within it), the engine (the
scheduler fails a job past it and frees its rows) and the file workers (a worker past it is
killed). ``what`` says what set it, for the refusal's message: the caller hears which limit
passed. The clock is ``time.monotonic()``, shared by every process of the machine, so a
deadline handed to a file worker process means the same instant there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

CLIENT = "the client's deadline"


def timeout_parameter(seconds: float) -> str:
    """What a request's own time limit is called (KServe's and Triton's ``timeout`` parameter)."""
    return f"the request's timeout of {seconds * 1e3:.0f} ms"


@dataclass(frozen=True)
class Deadline:
    """An instant on ``time.monotonic()``'s clock, and what set it (see the module docstring)."""

    at: float
    what: str

    @classmethod
    def from_timeout(cls, seconds: float | None, what: str = CLIENT) -> Deadline | None:
        """``seconds`` from now (None: no deadline). ``seconds`` <= 0 has passed already: a gRPC
        client's deadline may be spent before its request is read."""
        if seconds is None:
            return None
        return cls(time.monotonic() + seconds, what)

    @staticmethod
    def within(deadline: Deadline | None, seconds: float, what: str) -> Deadline | None:
        """``deadline``, or the server's limit of ``seconds`` from now when that passes first
        (``seconds`` <= 0: no limit), so no request runs unbounded whatever its door."""
        if seconds <= 0:
            return deadline
        return earliest(deadline, Deadline.from_timeout(seconds, what))

    def remaining(self) -> float:
        """Seconds left, 0 once passed."""
        return max(0.0, self.at - time.monotonic())

    def passed(self) -> bool:
        return time.monotonic() >= self.at

    def perf_counter(self) -> float:
        """The same instant on ``time.perf_counter``'s clock (the decode scheduler's)."""
        return time.perf_counter() + (self.at - time.monotonic())

    @property
    def message(self) -> str:
        """The refusal once it has passed (``DEADLINE_EXCEEDED``'s message)."""
        return f"{self.what} passed; its work was dropped"


def earliest(*deadlines: Deadline | None) -> Deadline | None:
    """The first of the given deadlines to pass (None: no deadline at all)."""
    given = [d for d in deadlines if d is not None]
    return min(given, key=lambda d: d.at) if given else None
