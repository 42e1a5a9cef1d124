"""The planning step of the decode loop: which jobs join, which leave, decided on plain data.

:func:`plan_step` reads the waiting queue, the running jobs, what they hold of the budgets
and the clock, and returns a :class:`StepPlan`; it changes nothing and touches no model, so
it is tested on its own (``tests/server/translation/test_planner.py``). The scheduler
applies the plan at the step boundary (docs/architecture.md, "plan -> run -> update").

Rules, after vLLM's v1 scheduler and Orca (Yu et al. 2022):

- evict: a job whose client went away (cancelled) leaves, waiting or running; its rows and
  budget are given back and nothing is delivered;
- finish: a job past its deadline leaves with DEADLINE_EXCEEDED, waiting or running;
- admit: waiting jobs, first come first served, while each fits every budget (batch rows,
  tokens in flight, KV-cache bytes); the first that does not fit stops admission, so a
  large request is not starved by smaller ones behind it. With static batching nothing is
  admitted while a running job is still decoding;
- encode ahead: when a newcomer must be encoded, waiting texts of up to
  ``ENCODE_AHEAD_TOKENS`` source tokens are encoded in the same run, so that under load the
  encoder runs on batches rather than one text at a time (its weights are read once per run).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .jobs import Job

ENCODE_AHEAD_TOKENS = 1024


@dataclass(frozen=True)
class Budgets:
    """Limits on what admitted jobs may hold together (``max_cache_bytes`` 0 = no limit)."""

    max_rows: int
    max_tokens: int
    max_cache_bytes: int = 0


@dataclass
class Usage:
    """What admitted jobs hold of the budgets (each job's reservation counts from admission
    until it finishes, fails or leaves)."""

    rows: int = 0
    tokens: int = 0
    cache_bytes: int = 0

    def fits(self, job: Job, budgets: Budgets) -> bool:
        return (
            self.rows + job.reserved_rows <= budgets.max_rows
            and self.tokens + job.reserved_tokens <= budgets.max_tokens
            and (not budgets.max_cache_bytes or self.cache_bytes + job.reserved_bytes <= budgets.max_cache_bytes)
        )

    def take(self, job: Job) -> None:
        self.rows += job.reserved_rows
        self.tokens += job.reserved_tokens
        self.cache_bytes += job.reserved_bytes

    def give_back(self, job: Job) -> None:
        self.rows -= job.reserved_rows
        self.tokens -= job.reserved_tokens
        self.cache_bytes -= job.reserved_bytes


@dataclass(frozen=True)
class StepPlan:
    admit: list[Job] = field(default_factory=list)  # join the batch at this boundary, in order
    evict: list[Job] = field(default_factory=list)  # cancelled: leave, nothing delivered
    finish: list[Job] = field(default_factory=list)  # past their deadline: leave with DEADLINE_EXCEEDED
    encode_ahead: list[Job] = field(default_factory=list)  # still waiting, encoded with the newcomers

    def __bool__(self) -> bool:
        return bool(self.admit or self.evict or self.finish)


NOTHING = StepPlan()  # the plan of a step where nobody joins or leaves


def plan_step(
    waiting: Sequence[Job],
    running: Iterable[Job],
    usage: Usage,
    budgets: Budgets,
    now: float,
    static: bool = False,
) -> StepPlan:
    """The next boundary's plan (see the module docstring); ``now`` on ``time.perf_counter``'s clock."""
    evict: list[Job] = []
    finish: list[Job] = []
    busy = False  # some running job goes on decoding
    for job in running:
        if job.done:  # finished at the last step; its rows are already free
            continue
        if job.cancel_requested:
            evict.append(job)
        elif job.deadline is not None and now >= job.deadline:
            finish.append(job)
        else:
            busy = True
    admit: list[Job] = []
    left = Usage(usage.rows, usage.tokens, usage.cache_bytes)
    for job in evict + finish:
        left.give_back(job)
    blocked = static and busy
    for job in waiting:
        if job.cancel_requested:
            evict.append(job)
        elif job.deadline is not None and now >= job.deadline:
            finish.append(job)
        elif not blocked and left.fits(job, budgets):
            left.take(job)
            admit.append(job)
        else:
            blocked = True  # first come, first served: nobody overtakes the head of the queue
    ahead: list[Job] = []
    if any(job.encoded is None for job in admit):
        budget, chosen = ENCODE_AHEAD_TOKENS, set(map(id, admit + evict + finish))
        for job in waiting:
            if id(job) in chosen or job.encoded is not None:
                continue
            if job.source_tokens > budget:
                break
            budget -= job.source_tokens
            ahead.append(job)
    return StepPlan(admit, evict, finish, ahead)
