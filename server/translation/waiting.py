"""The waiting queue: jobs submitted by event loops, taken by the scheduler thread.

Everything here is thread-safe (one condition variable). Event loops submit and cancel;
the scheduler thread waits for work, plans under the lock and takes what the plan admits or
drops (:meth:`WaitingQueue.take`). A waiting job that is cancelled leaves at once.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from ..shared.errors import Overloaded, ServingError, ShuttingDown
from .jobs import Job, JobState
from .planner import StepPlan, Usage


class WaitingQueue:
    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self.jobs: deque[Job] = deque()  # first come, first served
        self.closing: ServingError | None = None
        self.cancelled = False  # a job was cancelled since the scheduler last planned
        self._cond = threading.Condition()

    def __len__(self) -> int:
        return len(self.jobs)

    def submit(self, jobs: list[Job]) -> None:
        """Queue jobs, all or none. Raises Overloaded or ShuttingDown."""
        with self._cond:
            if self.closing is not None:
                raise ShuttingDown("the server is shutting down and takes no new work")
            if len(self.jobs) + len(jobs) > self.max_size:
                raise Overloaded(
                    f"translation queue is full ({len(self.jobs)} texts waiting, limit {self.max_size}); retry later"
                )
            now = time.perf_counter()
            for job in jobs:
                job.t_submit = now
            self.jobs.extend(jobs)
            self._cond.notify()

    def cancel(self, jobs: Iterable[Job]) -> None:
        """Flag jobs as cancelled; waiting ones leave the queue at once (running ones at the next boundary)."""
        with self._cond:
            self.cancelled = True
            for job in jobs:
                job.cancel_requested = True
                if job.state is JobState.WAITING and job in self.jobs:
                    self.jobs.remove(job)
                    job.state = JobState.CANCELLED
            self._cond.notify()

    def close(self, error: ServingError) -> None:
        """Refuse new jobs; the scheduler fails the rest with ``error``."""
        with self._cond:
            self.closing = error
            self._cond.notify()

    def wait(self, busy: bool) -> list[Job] | None:
        """Block until there is work (``busy``: rows are decoding) or the queue closes; on
        closing, returns the jobs still waiting (emptying the queue), else None."""
        if busy and self.closing is None:  # decoding goes on: no lock (a close is seen next step)
            return None
        with self._cond:
            while not busy and not self.jobs and self.closing is None:
                self._cond.wait()
            if self.closing is None:
                return None
            left = list(self.jobs)
            self.jobs.clear()
            return left

    def take(self, decide: Callable[[deque[Job]], StepPlan], usage: Usage) -> StepPlan:
        """Under the lock: ``decide`` plans on the waiting jobs (seeing every cancellation flagged
        so far); the jobs the plan admits leave the queue holding their budget in ``usage``
        (taken before they leave: ``idle`` never sees a job in neither), and the waiting ones it
        evicts or fails leave too."""
        with self._cond:
            self.cancelled = False
            plan = decide(self.jobs)
            for job in plan.admit:
                usage.take(job)
                self.jobs.remove(job)
                job.holds_budget = True
                job.state = JobState.ENCODING
            for job in plan.evict + plan.finish:
                if job.state is JobState.WAITING:
                    self.jobs.remove(job)
            return plan

    @contextmanager
    def locked(self) -> Iterator[deque[Job]]:
        """The waiting jobs, held still (plan and take them inside the block)."""
        with self._cond:
            yield self.jobs
