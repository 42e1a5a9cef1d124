"""The decode scheduler: iteration-level (continuous) batching of translation jobs.

One thread owns the decoder, the encoder and the KV cache, and loops:

    boundary:  free cancelled rows, admit queued jobs (within the row and token
               budgets), encode the newcomers in one batch and put them into free
               slots, place beam search's next rows; compact the cache when it pays
    step:      one decoder run for every slot, then each job picks its tokens; a
               finished job's slots are freed at once

so a request joins the running batch at the next step boundary and a finished one
leaves at once (Yu et al. 2022, Orca). ``EngineSettings.batching = "static"`` admits
only into an empty batch instead (every row has finished): the baseline of static
batches run to completion, kept for benchmarks. Rows are slots of the cache (``cache.py``): a
freed slot costs no copy and the next newcomer takes it in place; a full compaction
runs only when free slots and unneeded left padding have wasted about what the copy
costs. The event loop only enqueues jobs and sets cancellation flags (both
thread-safe); results flow back through each job's sink and the outbox.

A failing decoder step fails exactly the jobs of that batch with InferenceFailed and
the loop goes on with the next ones; a failing encoder fails only its newcomers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

import numpy as np

from attnserve.server.errors import InferenceFailed, Overloaded, ServingError, ShuttingDown

from .cache import DecoderRunner, KVCache, NewRows, Placement
from .jobs import Job, Outbox
from .options import EngineSettings
from .search import NEG_INF, log_normalizers, sample_token
from .sessions import ModelSpec

log = logging.getLogger(__name__)

COMPACT_AFTER_ROWS = 0.5  # see DecodeScheduler._waste_limit
MAX_IDLE_ROW_STEPS = 16
# Share of a step's time that grows with the cache length: unneeded left-padding columns
# waste only that share of their rows' work (mt-small on CPU, batch 32: a step takes
# ~1.2x longer at 128 cached tokens than at 16, so roughly a quarter).
COLUMN_COST = 0.25
# When newcomers must be encoded, queued texts of up to this many source tokens are
# encoded in the same batch, so that under load the encoder runs on batches rather
# than one text at a time (its weights are read once per run).
ENCODE_AHEAD_TOKENS = 1024


class DecodeScheduler:
    """Owns the decode batch. ``submit``/``cancel``/``close`` are thread-safe; the rest runs on its thread."""

    def __init__(
        self,
        encoder,
        decoder,
        spec: ModelSpec,
        settings: EngineSettings,
        placement: Placement | None = None,
    ) -> None:
        self.encoder, self.spec, self.settings = encoder, spec, settings
        placement = placement or Placement()
        self.cache = KVCache(spec.num_layers, spec.num_heads, spec.head_dim, placement)
        self.runner = DecoderRunner(decoder, spec.decoder_io, placement)
        self.cross_names = list(spec.encoder_io.cross)
        self.never = np.array([spec.pad_id, spec.bos_id])  # never generated (models/decoding.py)
        self.on_step: Callable[[int, int], None] | None = None
        self.outbox = Outbox()  # results for the event loops; flushed after each step
        # shared with the event loop, under the condition's lock
        self._cond = threading.Condition()
        self._pending: deque[Job] = deque()
        self._closing: ServingError | None = None
        self._thread: threading.Thread | None = None
        # scheduler thread only
        self._jobs: list[Job] = []
        self._tokens = np.zeros(0, dtype=np.int64)  # (B,) next input token per slot
        self._owner: list[Job | None] = []  # (B,) the job of each slot; None = free
        self._live_rows = 0
        self._min_live_pad = 0  # left-padding columns no live row needs (compaction would drop them)
        self._waste = 0.0  # row-steps spent on free slots and unneeded columns since the last compaction
        self._layout_changed = False  # rows leave or are reordered at the next boundary
        self._any_scores = False  # some job needs log-probabilities
        self._any_greedy = False  # some job takes the argmax
        self._all_plain_greedy = False  # every job takes the argmax: it is the next input as is
        # observability (plain ints: safe to read from any thread)
        self.active_sequences = 0
        self.kv_cache_bytes = 0
        self.reserved_rows = 0
        self.tokens_in_flight = 0
        self.tokens_generated_total = 0
        self.steps_total = 0
        self.compactions_total = 0

    # --- thread-safe API -----------------------------------------------------------

    @property
    def queued(self) -> int:
        return len(self._pending)

    @property
    def idle(self) -> bool:
        """No job queued or admitted (admission moves a job between the two under the lock)."""
        return not self._pending and self.reserved_rows == 0

    def submit(self, jobs: list[Job]) -> None:
        """Queue jobs for admission, all or none. Raises Overloaded or ShuttingDown."""
        with self._cond:
            if self._closing is not None:
                raise ShuttingDown("the server is shutting down and takes no new work")
            limit = self.settings.max_queue_size
            if len(self._pending) + len(jobs) > limit:
                raise Overloaded(
                    f"translation queue is full ({len(self._pending)} texts waiting, limit {limit}); retry later"
                )
            now = time.perf_counter()
            for job in jobs:
                job.t_submit = now
            self._pending.extend(jobs)
            self._cond.notify()

    def cancel(self, jobs: Iterable[Job]) -> None:
        """Drop jobs: queued ones at once, running ones at the next step boundary."""
        with self._cond:
            for job in jobs:
                job.cancelled = True
                if job in self._pending:
                    self._pending.remove(job)
            self._cond.notify()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="decode-scheduler", daemon=True)
        self._thread.start()

    def close(self, error: ServingError) -> None:
        """Fail every queued and running job with ``error`` at the next boundary and stop the thread."""
        with self._cond:
            self._closing = error
            self._cond.notify()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # --- the loop (scheduler thread) ---------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._pending and self._closing is None:
                    self._cond.wait()
                if self._closing is not None:
                    closing, pending = self._closing, list(self._pending)
                    self._pending.clear()
                    break
                admitted, ahead = self._take_admissible()
            try:
                self.run_once(admitted, ahead)
            except Exception as exc:  # noqa: BLE001 - a bug here must fail requests, never hang them
                log.exception("decode scheduler error")
                error = InferenceFailed(f"translation scheduler failed: {type(exc).__name__}: {exc}")
                for job in self._jobs + admitted:
                    self._fail(job, error)
                self._jobs = []
                self._reset_batch()
                self.outbox.flush()
        for job in self._jobs + pending:
            self._fail(job, closing)
        self._jobs = []
        self._reset_batch()
        self.outbox.flush()

    def _take_admissible(self) -> tuple[list[Job], list[Job]]:
        """Pop queued jobs, first come first served, while they fit the row and token budgets.

        Returns them and the queued jobs to encode along with them (see ENCODE_AHEAD_TOKENS).
        With static batching nothing is admitted while a row of the running batch is live.
        """
        admitted = []
        s = self.settings
        if s.batching == "static" and any(not (job.finished or job.cancelled) for job in self._jobs):
            return [], []
        while self._pending:
            job = self._pending[0]
            if (
                self.reserved_rows + job.reserved_rows > s.max_active_sequences
                or self.tokens_in_flight + job.reserved_tokens > s.max_tokens_in_flight
            ):
                break
            self._pending.popleft()
            self.reserved_rows += job.reserved_rows
            self.tokens_in_flight += job.reserved_tokens
            job.reserved = True
            admitted.append(job)
        ahead, budget = [], ENCODE_AHEAD_TOKENS
        if any(job.encoded is None for job in admitted):
            for job in self._pending:
                if job.encoded is None:
                    if job.source_tokens > budget:
                        break
                    budget -= job.source_tokens
                    ahead.append(job)
        return admitted, ahead

    def run_once(self, admitted: list[Job], ahead: list[Job] = ()) -> None:
        """One boundary (with ``admitted`` joining, ``ahead`` encoded early) and, if any row is left, one step."""
        try:
            self._boundary(admitted, ahead)
            if self._jobs:
                self._step()
        except Exception as exc:  # noqa: BLE001 - one batch fails, the scheduler goes on
            log.exception("decoder step failed; failing the %d requests of the batch", len(self._jobs))
            error = InferenceFailed(f"translation decoder failed: {type(exc).__name__}: {exc}")
            for job in self._jobs + admitted:
                self._fail(job, error)
            self._jobs = []
            self._reset_batch()
        self.outbox.flush()  # this step's tokens and results: one wake-up per event loop

    def run_until_idle(self, jobs: list[Job]) -> None:
        """Synchronous decoding of ``jobs`` on the calling thread (warm-up; the thread must not run)."""
        with self._cond:
            self._pending.extend(jobs)
        while self._jobs or self._pending:
            with self._cond:
                admitted, ahead = self._take_admissible()
            self.run_once(admitted, ahead)

    # --- boundary ----------------------------------------------------------------

    def _boundary(self, admitted: list[Job], ahead: list[Job] = ()) -> None:
        """Free cancelled rows, place newcomers and beam copies in slots, compact when it pays."""
        cancelled = [job for job in self._jobs if job.cancelled and not job.finished]
        for job in cancelled:
            self._release(job)
            self._free_slots(job)
        if not (cancelled or admitted or self._layout_changed or self._waste >= self._waste_limit()):
            return
        jobs = [job for job in self._jobs if not job.finished and not job.cancelled]
        new = self._encode(admitted, ahead) if admitted else None  # drops (and fails) what it could not encode
        growth = sum(len(job.parents) - len(job.slots) for job in jobs if job.parents is not None)
        need = growth + len(admitted)
        if not jobs and new is not None:
            self._start(admitted, new)
        else:
            self._place(jobs, admitted, new, need)
        self._jobs = jobs + admitted
        self._layout_changed = False
        live = [job.slots for job in self._jobs]
        self._live_rows = sum(len(slots) for slots in live)
        self._min_live_pad = int(self.cache.pad[np.concatenate(live)].min()) if live else 0
        self._any_scores = any(job.needs_scores for job in self._jobs)
        self._any_greedy = any(not job.beam for job in self._jobs)
        self._all_plain_greedy = all(not job.beam and not job.sampling for job in self._jobs)
        self._observe()

    def _start(self, admitted: list[Job], new: NewRows) -> None:
        """No row is decoding: the newcomers become the whole batch, their encoder output the cache."""
        self.cache.start(new)
        for i, job in enumerate(admitted):
            job.slots = np.array([i], dtype=np.int64)
        self._owner = list(admitted)
        self._tokens = np.full(len(admitted), self.spec.bos_id, dtype=np.int64)
        self._waste = 0.0

    def _place(self, jobs: list[Job], admitted: list[Job], new: NewRows | None, need: int) -> None:
        """Beam rows and newcomers into free slots of the running batch, compacting first when it pays."""
        free = [i for i, owner in enumerate(self._owner) if owner is None]
        if not jobs and not admitted:
            if self.cache.rows:
                self._compact([], 0)
        elif need > len(free) or self._waste >= self._waste_limit():
            self._compact(jobs, need)
            free = [i for i, owner in enumerate(self._owner) if owner is None]
        free.reverse()  # pop() hands out the lowest free slot first
        self._place_beams(jobs, free)
        if new is not None:
            slots = np.array([free.pop() for _ in admitted], dtype=np.int64)
            self.cache.assign(slots, new)
            for job, slot in zip(admitted, slots.tolist()):
                job.slots = np.array([slot], dtype=np.int64)
                self._owner[slot] = job
            self._tokens[slots] = self.spec.bos_id

    def _place_beams(self, jobs: list[Job], free: list[int]) -> None:
        """Beam search's next rows: row i continues beam parents[i]; copy the caches that move."""
        dst, src = [], []
        for job in jobs:
            if job.parents is None:
                continue
            current, parents = job.slots, np.asarray(job.parents, dtype=np.int64)
            n = len(parents)
            slots = np.concatenate([current, [free.pop() for _ in range(n - len(current))]]).astype(np.int64)
            slots = slots[:n]
            if n < len(current):  # fewer live beams (a tiny vocabulary): free the extra rows
                self.cache.free(current[n:])
                for slot in current[n:].tolist():
                    self._owner[slot] = None
            for slot in slots.tolist():
                self._owner[slot] = job
            moved = slots != current[parents] if n <= len(current) else np.ones(n, dtype=bool)
            dst.append(slots[moved])
            src.append(current[parents][moved])
            job.slots = slots
            self._tokens[slots] = job.next_tokens
            job.parents = job.next_tokens = None
        if dst and sum(len(d) for d in dst):
            self.cache.copy_rows(np.concatenate(dst), np.concatenate(src))

    def _compact(self, jobs: list[Job], extra: int) -> None:
        """One copy of the cache: the jobs' rows in order, then ``extra`` free slots."""
        keep = np.concatenate([job.slots for job in jobs]) if jobs else np.zeros(0, dtype=np.int64)
        self.cache.compact(keep, extra)
        start = 0
        for job in jobs:
            job.slots = np.arange(start, start + len(job.slots))
            start += len(job.slots)
        self._owner = [job for job in jobs for _ in job.slots] + [None] * extra
        self._tokens = np.concatenate([self._tokens[keep], np.full(extra, self.spec.pad_id, dtype=np.int64)])
        self._waste = 0.0
        self.compactions_total += 1

    def _waste_limit(self) -> float:
        """Compact once idle rows and unneeded columns have cost about what a compaction costs.

        A compaction copies the cache once, roughly the memory traffic of part of a step;
        a free slot wastes a row of every step. So compact after about half a batch of
        row-steps (at most 16: a free row never lingers long), a ski-rental rule.
        """
        return min(COMPACT_AFTER_ROWS * max(self.cache.rows, 1), MAX_IDLE_ROW_STEPS)

    def _encode(self, jobs: list[Job], ahead: list[Job] = ()) -> NewRows | None:
        """Encoder output of the newcomers ``jobs``, running the encoder once on those not yet
        encoded together with ``ahead`` (queued, encoded early). On failure the newcomers of
        that run fail (queued ones are tried again at their admission)."""
        for job in jobs:
            if job.cancelled:
                self._release(job)
        jobs[:] = [job for job in jobs if not job.cancelled]
        todo = [job for job in jobs if job.encoded is None]
        run = None  # (encoder outputs, their jobs in row order)
        if todo:
            todo += [job for job in ahead if job.encoded is None and not job.cancelled]
            try:
                run = self._run_encoder(todo), todo
            except Exception as exc:  # noqa: BLE001
                log.exception("encoder failed on %d texts", len(todo))
                error = InferenceFailed(f"translation encoder failed: {type(exc).__name__}: {exc}")
                for job in jobs:
                    if job.encoded is None:
                        self._fail(job, error)
                jobs[:] = [job for job in jobs if job.encoded is not None]
        if not jobs:
            return None
        now = time.perf_counter()
        n, L = len(jobs), max(job.source_tokens for job in jobs)
        src_mask = np.zeros((n, L), dtype=np.int32)  # (n, L)
        if run is not None and run[1][:n] == jobs:  # the encoder's own rows, in order: no copy
            cross = [c[:n, :, :L] for c in run[0]]  # (n, H, L, D) each; contiguous unless `ahead` was longer
        else:
            cross = [np.zeros((n, self.spec.num_heads, L, self.spec.head_dim), np.float32) for _ in self.cross_names]
            for i, job in enumerate(jobs):
                for c, rows in zip(cross, job.encoded):
                    c[i, :, : job.source_tokens] = rows  # (H, Lj, D)
        for i, job in enumerate(jobs):
            job.t_admit = now
            src_mask[i, : job.source_tokens] = 1
            job.encoded = None  # the cache holds it from here on
        lengths = np.array([job.source_tokens for job in jobs], dtype=np.int64)
        return NewRows(cross, src_mask, lengths)

    def _run_encoder(self, jobs: list[Job]) -> list[np.ndarray]:
        """One encoder run; each job keeps its cross K/V, ``job.encoded``: 2 per layer (H, Lj, D).

        Returns the run's outputs, 2 per layer (n, H, L, D), row i = ``jobs[i]``, right-padded.
        """
        t0 = time.perf_counter()
        n, L = len(jobs), max(job.source_tokens for job in jobs)
        src = np.full((n, L), self.spec.pad_id, dtype=np.int64)  # (n, L), right-padded
        src_mask = np.zeros((n, L), dtype=np.int32)  # (n, L)
        for i, job in enumerate(jobs):
            src[i, : job.source_tokens] = job.src_ids
            src_mask[i, : job.source_tokens] = 1
        io = self.spec.encoder_io
        cross = self.encoder.run(self.cross_names, {io.src_ids: src, io.src_mask: src_mask})  # (n, H, L, D) each
        seconds = time.perf_counter() - t0
        for i, job in enumerate(jobs):
            job.encoded = [c[i, :, : job.source_tokens] for c in cross]
            job.encode_s = seconds
        return cross

    # --- step --------------------------------------------------------------------

    def _step(self) -> None:
        logits = self.runner.step(self.cache, self._tokens[:, None])  # (B, V)
        if self._any_scores:
            m, ls = log_normalizers(logits)  # (B,), (B,)
        logits[:, self.never] = NEG_INF
        greedy = logits.argmax(axis=1) if self._any_greedy else None  # (B,) ties to the lowest id
        now = time.perf_counter()
        generated = 0
        next_tokens = greedy if self._all_plain_greedy else self._tokens.copy()
        for job in self._jobs:
            if job.beam:
                rows = job.slots
                logp = (logits[rows] - m[rows, None]) - ls[rows, None]  # (K, V)
                job.parents, job.next_tokens = job.search.advance(logp)
                generated += len(rows)
                done = job.search.done
                self._layout_changed = True
            else:
                s = int(job.slots[0])
                forced = job.search.forced()
                if forced is not None:
                    tok = forced
                elif job.sampling:
                    o = job.options
                    tok = sample_token(logits[s], o.temperature, o.top_k, o.top_p, job.rng)
                else:
                    tok = int(greedy[s])
                next_tokens[s] = tok
                lp = float((logits[s, tok] - m[s]) - ls[s]) if job.needs_scores else 0.0
                done = job.search.push(tok, lp)
                generated += 1
                job.sink.token(job, tok, (("eos" if tok == self.spec.eos_id else "length") if done else None))
            if not job.t_first:
                job.t_first = now
            if done:
                job.finished = True
                job.t_done = now
                job.parents = job.next_tokens = None
                self._layout_changed = True
                self._release(job)
                self._free_slots(job)
                job.sink.done(job)
        self._tokens = next_tokens
        self.steps_total += 1
        self.tokens_generated_total += generated
        B = self.cache.rows
        self._waste += (B - self._live_rows) + COLUMN_COST * self._live_rows * self._min_live_pad / self.cache.P
        self._observe()
        if self.on_step is not None:
            try:
                self.on_step(self.active_sequences, generated)
            except Exception:  # noqa: BLE001 - metrics must never stop decoding
                log.exception("on_step callback failed")

    # --- bookkeeping -------------------------------------------------------------

    def _release(self, job: Job) -> None:
        """Give back the rows and tokens a job reserved at admission (once)."""
        if job.reserved:
            job.reserved = False
            self.reserved_rows -= job.reserved_rows
            self.tokens_in_flight -= job.reserved_tokens

    def _fail(self, job: Job, error: BaseException) -> None:
        self._release(job)
        if job.finished:
            return
        job.finished = True
        try:
            job.sink.fail(job, error)
        except Exception:  # noqa: BLE001
            log.exception("could not deliver a failure")

    def _free_slots(self, job: Job) -> None:
        """The job's rows become free slots (no copy); ``_live_rows`` is recounted at the boundary."""
        self.cache.free(job.slots)
        for slot in job.slots.tolist():
            self._owner[slot] = None
        self._live_rows -= len(job.slots)
        job.slots = np.zeros(0, dtype=np.int64)

    def _reset_batch(self) -> None:
        self._compact([], 0)
        self._layout_changed = False
        self._live_rows = 0
        self._observe()

    def _observe(self) -> None:
        self.active_sequences = self._live_rows
        self.kv_cache_bytes = self.cache.nbytes
