"""The decode scheduler: iteration-level (continuous) batching of translation jobs.

One thread owns the models and the KV cache and repeats plan -> run -> update
(docs/architecture.md has the diagram):

    plan:    under the queue's lock, :func:`~.planner.plan_step` decides which waiting jobs
             join (within the row, token and cache budgets), which leave (cancelled, past
             their deadline); it only decides
    run:     at the step boundary the plan is applied: leavers' rows are freed, newcomers
             encoded (in runs of similar source lengths, :func:`~.runner.length_runs`)
             and placed in free slots with beam search's next
             rows (:class:`~.slots.SlotTable`, compacting when it pays); then one decoder
             step over every row (:class:`~.runner.ModelRunner`)
    update:  each job's search picks its rows' next tokens (:mod:`.search`); a finished
             job's rows are freed at once and its result goes out through the outbox

so a request joins the running batch at the next step boundary and a finished one leaves
at once (Yu et al. 2022, Orca). ``EngineSettings.batching = "static"``
(``--translation-batching static``) admits only into an empty batch instead (finished rows
still leave at once): it takes about twice the time to first token, made more tokens/s at
saturation on CPU only with the left-padded cache (benchmarks/README.md), and it is the
benchmarks' baseline.
The event loop only enqueues jobs and sets cancellation flags (both thread-safe); results
flow back through each job's sink and the outbox. The outbox goes out right before each model
run (a boundary's encoder runs, the step's decoder: ``ModelRunner(before_run=)``), when
onnxruntime is about to let go of the GIL for the whole run, so the event loops turn the
results into messages meanwhile. Posted before the boundary, a loop woken by them took the GIL
whenever the boundary's numpy copies let go of it, and kept it until it had sent them all: the
scheduler waited ~0.2 ms a step so (benchmarks/results/HISTORY-2026-11.md, "Results go out while the decoder runs").

A failing decoder step fails exactly the jobs of that batch with InferenceFailed and the
loop goes on with the next ones; a failing encoder fails only its newcomers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

import numpy as np

from ..shared.errors import DeadlineExceeded, InferenceFailed, ServingError
from .cache import NewRows, Placement
from .jobs import Job, JobState, Outbox
from .options import EngineSettings
from .planner import NOTHING, Budgets, StepPlan, Usage, plan_step
from .runner import ModelRunner
from .sessions import ModelSpec
from .slot_cache import make_cache
from .slots import SlotTable
from .step_logits import StepLogits, StepNeeds
from .waiting import WaitingQueue

log = logging.getLogger(__name__)


class DecodeScheduler:
    """Owns the decode batch. ``submit``/``cancel``/``close`` are thread-safe; the rest runs on its thread."""

    def __init__(self, encoder, decoder, spec: ModelSpec, settings: EngineSettings, placement: Placement | None = None):
        self.spec, self.settings = spec, settings
        placement = placement or Placement()
        self.cache = make_cache(spec, decoder, placement, settings.max_active_sequences)
        self.slots = SlotTable(self.cache, spec.start_id, spec.pad_id)
        self.outbox = Outbox()  # results for the event loops, sent right before each model run (module docstring)
        self.runner = ModelRunner(encoder, decoder, spec, placement, self.outbox.flush, settings)
        self.budgets = Budgets(settings.max_active_sequences, settings.max_tokens_in_flight, settings.max_cache_bytes)
        self.usage = Usage()  # what admitted jobs hold; changed on this scheduler's thread only
        self.never, self.never_ids = never_columns(spec.never_ids), frozenset(spec.never_ids)  # models/decoding.py
        self.on_step: Callable[[int, int], None] | None = None
        self.waiting = WaitingQueue(settings.max_queue_size)  # shared with the event loops
        self._thread: threading.Thread | None = None
        # scheduler thread only
        self._jobs: list[Job] = []  # running, in batch order
        self._rows: list[int] = []  # each running job's first row (its only one unless beam search)
        self._layout_changed = False  # rows leave or are reordered at the next boundary
        self._any_deadline = False  # some running job has a deadline (plan every step)
        self._needs = StepNeeds()  # what the running jobs' searches read from a step
        self.tokens_generated_total = self.steps_total = 0  # observability: plain ints, read from any thread

    # --- thread-safe API -----------------------------------------------------------

    @property
    def queued(self) -> int:
        return len(self.waiting)

    @property
    def tokens_in_flight(self) -> int:
        return self.usage.tokens

    @property
    def active_sequences(self) -> int:
        """Rows decoding now."""
        return self.slots.live_rows

    @property
    def kv_cache_bytes(self) -> int:
        """Bytes of the batch's self-attention cache and cross K/V (read at any time: a gauge)."""
        return self.cache.nbytes

    @property
    def idle(self) -> bool:
        """No job queued or admitted (admission moves a job between the two under the lock)."""
        return not len(self.waiting) and self.usage.rows == 0

    def submit(self, jobs: list[Job]) -> None:
        """Queue jobs for admission, all or none. Raises Overloaded or ShuttingDown."""
        self.waiting.submit(jobs)

    def cancel(self, jobs: Iterable[Job]) -> None:
        """Drop jobs: queued ones at once, running ones at the next step boundary."""
        self.waiting.cancel(jobs)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="decode-scheduler", daemon=True)
        self._thread.start()

    def close(self, error: ServingError) -> None:
        """Fail every queued and running job with ``error`` at the next boundary and stop the thread."""
        self.waiting.close(error)

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # --- the loop (scheduler thread) ---------------------------------------------

    def _loop(self) -> None:
        while True:
            left = self.waiting.wait(busy=bool(self._jobs))
            if left is not None:
                break
            try:
                self.run_once(self.plan())
            except Exception as exc:  # noqa: BLE001 - a bug here must fail requests, never hang them
                log.exception("decode scheduler error")
                self._fail_batch(InferenceFailed(f"translation scheduler failed: {type(exc).__name__}: {exc}"))
        self._fail_batch(self.waiting.closing, left)

    def plan(self) -> StepPlan:
        """Plan the next boundary and take the plan's jobs off the queue (under the lock)."""
        if not (self.waiting.jobs or self.waiting.cancelled or self._any_deadline):
            return NOTHING  # nobody waits, nobody left, no clock to watch: the common step, kept cheap
        static = self.settings.batching == "static"
        return self.waiting.take(
            lambda waiting: plan_step(waiting, self._jobs, self.usage, self.budgets, time.perf_counter(), static),
            self.usage,
        )

    def run_once(self, plan: StepPlan) -> None:
        """One boundary (applying ``plan``) and, if any row is left, one step. The results gathered
        since the last step go out right before the first model run, or at the end when no row is left."""
        slots = self.slots
        try:
            if (plan is not NOTHING and plan) or self._layout_changed or slots.waste >= slots.waste_limit:
                self._boundary(plan)
            if self._jobs:
                self._step()
        except Exception as exc:  # noqa: BLE001 - one batch fails, the scheduler goes on
            log.exception("decoder step failed; failing the %d requests of the batch", len(self._jobs))
            self._fail_batch(InferenceFailed(f"translation decoder failed: {type(exc).__name__}: {exc}"), plan.admit)
        if not self.slots.live_rows:  # nothing runs next: drop the emptied batch, then deliver, and sleep
            self._drop_batch()

    def run_until_idle(self, jobs: list[Job]) -> None:
        """Synchronous decoding of ``jobs`` on the calling thread (warm-up; the thread must not run)."""
        with self.waiting.locked() as waiting:
            waiting.extend(jobs)
        while self._jobs or len(self.waiting):
            self.run_once(self.plan())

    # --- run: the boundary ---------------------------------------------------------

    def _boundary(self, plan: StepPlan) -> None:
        """Apply the plan: free leavers' rows, place newcomers and beam copies, compact when it pays."""
        for job in plan.evict:
            self._leave(job, JobState.CANCELLED)
        for job in plan.finish:
            self._fail(job, DeadlineExceeded("the deadline passed before this translation finished"))
        slots = self.slots
        jobs = [job for job in self._jobs if not job.done]
        admitted, new = self._encode(plan.admit, plan.encode_ahead) if plan.admit else ([], None)
        self.cache.limit = max((job.max_new_tokens for job in jobs + admitted), default=1)  # in place: growth bound
        if not jobs and new is not None:
            slots.start(admitted, new)  # every row live, none padded
        else:
            slots.place(jobs, admitted, new)  # recounts the rows
        for job in admitted:
            job.state = JobState.RUNNING
        self._jobs = jobs + admitted
        self._rows = [int(job.slots[0]) for job in self._jobs]
        self._layout_changed = False
        self._any_deadline = any(job.deadline is not None for job in self._jobs)
        self._needs = StepNeeds.of([job.search for job in self._jobs], self.never_ids)
        self.runner.want_attention = any(job.attention is not None for job in self._jobs)
        self.runner.screen = self._needs.screen  # the argmax alone is read: a screening decoder screens

    def _encode(self, admitted: list[Job], ahead: list[Job]) -> tuple[list[Job], NewRows | None]:
        """The newcomers that made it and the rows they bring: runs the encoder on those not
        yet encoded together with ``ahead`` (waiting, encoded early), in runs of similar source
        lengths. When a run fails, the newcomers that no run has encoded yet fail; those encoded
        by an earlier run join (waiting ones are tried again at their admission)."""
        for job in admitted:
            if job.cancel_requested:
                self._leave(job, JobState.CANCELLED)
        jobs = [job for job in admitted if not job.done]
        todo = [job for job in jobs if job.encoded is None]
        run = None  # (encoder outputs, their jobs in row order)
        if todo:
            todo += [job for job in ahead if job.encoded is None and not job.cancel_requested]
            try:
                outputs = self.runner.encode(todo)  # None: several runs (by length), rows copied below
                run = (outputs, todo) if outputs is not None else None
            except Exception as exc:  # noqa: BLE001
                log.exception("encoder failed on %d texts", len(todo))
                error = InferenceFailed(f"translation encoder failed: {type(exc).__name__}: {exc}")
                for job in jobs:
                    if job.encoded is None:
                        self._fail(job, error)
                jobs = [job for job in jobs if not job.done]
        if not jobs:
            return [], None
        now = time.perf_counter()
        for job in jobs:
            job.t_admit = now
        return jobs, self.runner.new_rows(jobs, run)

    # --- run + update: the step ----------------------------------------------------

    def _step(self) -> None:
        slots, live = self.slots, self.slots.live_rows  # live: the step's job rows (finishing ones included)
        logits = self.runner.step(self.cache, slots.tokens[:, None])  # (B, V); the last results go out first
        needs, ids = self._needs, self.runner.screen_ids
        if ids is not None:  # a screened step: the decoder returned the argmax itself (needs.screen)
            step = StepLogits.of_argmax(ids)
        else:
            step = StepLogits(logits, self.never, needs.scores, needs.argmax, needs.mask_when_won, needs.top_n)
        now = time.perf_counter()
        generated = 0
        # next input token per row: the argmax as it is when every row takes it (forced prefix
        # tokens written over it), else a list of Python ints (one conversion per step)
        best, all_argmax = step.best, needs.all_argmax
        next_tokens = step.greedy if all_argmax else slots.tokens.tolist()
        if self.runner.want_attention:
            keep_attention(self._jobs, self.runner.attention)
        for job, row in zip(self._jobs, self._rows):
            search = job.search
            if search.in_place:  # one row, continuing itself (greedy, sampling)
                generated += 1
                token = search.next(step, row)
                if not all_argmax or token != best[row]:
                    next_tokens[row] = token
                if job.sink.streams:
                    job.sink.token(job, token, search.finish_reason if search.done else None)
            else:  # beam search: rows are re-chosen at the next boundary
                generated += len(job.slots)
                job.next_tokens, job.parents = search.choose(step, job.slots)
                self._layout_changed = True
            if not job.t_first:
                job.t_first = now
            if search.done:
                job.t_done = now
                job.parents = job.next_tokens = None
                self._layout_changed = True
                self._leave(job, JobState.FINISHED)
                job.sink.done(job)
        slots.tokens = next_tokens if all_argmax else np.array(next_tokens, dtype=np.int64)
        self.steps_total += 1
        self.tokens_generated_total += generated
        slots.account_step(live)
        if self.on_step is not None:
            try:
                self.on_step(slots.live_rows, generated)
            except Exception:  # noqa: BLE001 - metrics must never stop decoding
                log.exception("on_step callback failed")

    # --- bookkeeping ---------------------------------------------------------------

    def _leave(self, job: Job, state: JobState) -> None:
        """The job is done (``state``): its budget and rows are given back (once)."""
        if job.holds_budget:  # only this thread changes usage; readers elsewhere take a snapshot
            self.usage.give_back(job)
            job.holds_budget = False
        if len(job.slots):
            self.slots.free(job)
        job.state = state

    def _fail(self, job: Job, error: BaseException) -> None:
        if not job.done:
            self._leave(job, JobState.FAILED)
            _deliver_failure(job, error)

    def _fail_batch(self, error: BaseException, also: Iterable[Job] = ()) -> None:
        """Fail every running job (and ``also``) with ``error``, drop every row, deliver at once."""
        for job in [*self._jobs, *also]:
            self._fail(job, error)
        self._drop_batch()

    def _drop_batch(self) -> None:
        """Every row goes (their jobs are done) without planning; the results go out after the gauges read empty."""
        self._jobs, self._rows = [], []
        self.slots.reset()
        self._layout_changed = self._any_deadline = False
        self.outbox.flush()


def _deliver_failure(job: Job, error: BaseException) -> None:
    try:
        job.sink.fail(job, error)
    except Exception:  # noqa: BLE001 - a sink's failure must not stop the scheduler
        log.exception("could not deliver a failure")


def keep_attention(jobs: list[Job], attention: np.ndarray | None) -> None:
    """Each job that keeps it (``job.attention``) takes its rows of the step's attention (B, 1, L)
    over its own source: the step that chose its next tokens (before its search chooses them)."""
    if attention is not None:
        for job in jobs:
            if job.attention is not None:
                job.attention.add(job.search, attention, job.slots, job.source_tokens)


def never_columns(ids: Iterable[int]) -> slice | np.ndarray:
    """The logit columns of ``ids`` as a slice when they are consecutive (pad and bos, the
    default, usually are: one cheap write per step), else as an index array."""
    ids = sorted(set(ids))
    if ids and ids == list(range(ids[0], ids[-1] + 1)):
        return slice(ids[0], ids[-1] + 1)
    return np.array(ids, dtype=np.int64)
