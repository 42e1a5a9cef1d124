"""Which job holds which row of the decode batch, beside the :class:`~.cache.KVCache`.

A row (slot) is live (a job's) or free. Freeing copies nothing; the next newcomer takes the
lowest free slot in place; beam search's next rows reuse the job's own slots where they can
and copy only the caches that move; a compaction renumbers the rows (those past the kept count
fill the holes: an in-place cache moves only them, a left-padded one copies the whole cache)
when growth needs it or when free rows and unneeded left padding have wasted about
what the copy costs (a ski-rental rule, :meth:`SlotTable.limit`). The table also
keeps each slot's next input token.
"""

from __future__ import annotations

import numpy as np

from .cache import KVCache, NewRows
from .jobs import Job

COMPACT_AFTER_ROWS = 0.5  # see SlotTable.limit
MAX_IDLE_ROW_STEPS = 16
# Share of a step's time that grows with the cache length: unneeded left-padding columns
# waste only that share of their rows' work. mt-small on CPU, batch 32: a step takes ~1.6x
# longer at 128 cached tokens than at 16, so a quarter to a half; 0.25, 0.5 and 1.0 gave the
# same tokens/s within 1% under the server benchmark's loads (compaction already keeps the
# unneeded columns near zero: what makes long caches cost is the rows that need them).
COLUMN_COST = 0.25
NO_TOKENS = np.zeros(0, dtype=np.int64)  # an empty batch's (never written: a batch replaces it)
NO_TOKENS.flags.writeable = False


class SlotTable:
    """Row <-> job placement of the batch held by ``cache``, with each row's next input token."""

    def __init__(self, cache: KVCache, start_id: int, pad_id: int) -> None:
        self.cache, self.start_id, self.pad_id = cache, start_id, pad_id
        self.owner: list[Job | None] = []  # (B,) the job of each slot; None = free
        self.tokens = NO_TOKENS  # (B,) next input token per slot
        self.live_rows = 0
        self.min_live_pad = 0  # left-padding columns no live row needs (compaction would drop them)
        self.waste = 0.0  # row-steps spent on free slots and unneeded columns since the last compaction
        self.waste_limit = self.limit()  # compact when waste reaches it (set whenever the row count changes)
        self.compactions = 0

    def start(self, jobs: list[Job], new: NewRows) -> None:
        """No row is decoding: ``jobs`` become the whole batch, their encoder output the cache."""
        self.cache.start(new)
        for i, job in enumerate(jobs):
            job.slots = np.array([i], dtype=np.int64)
        self.owner = list(jobs)
        self.tokens = np.full(len(jobs), self.start_id, dtype=np.int64)
        self.live_rows, self.min_live_pad = len(jobs), 0  # every row live (one each: beams expand later), none padded
        self.waste, self.waste_limit = 0.0, self.limit()

    def place(self, jobs: list[Job], admitted: list[Job], new: NewRows | None) -> None:
        """Beam rows of the running ``jobs`` and the ``admitted`` newcomers into free slots,
        compacting first when they do not fit or when it pays; then the rows are recounted."""
        # rows a job's beams grow by; a job whose beams shrink frees its rows only when they are placed
        need = len(admitted) + sum(max(0, len(job.parents) - len(job.slots)) for job in jobs if job.parents is not None)
        free = self._free()
        if not jobs and not admitted:
            self.reset()
        elif need > len(free) or self.waste >= self.waste_limit:
            self.compact(jobs, need)
            free = self._free()
        free.reverse()  # pop() hands out the lowest free slot first
        self._place_beams(jobs, free)
        if new is not None:
            slots = np.array([free.pop() for _ in admitted], dtype=np.int64)
            self.cache.assign(slots, new)
            for job, slot in zip(admitted, slots.tolist()):
                job.slots = np.array([slot], dtype=np.int64)
                self.owner[slot] = job
            self.tokens[slots] = self.start_id
        self.recount(jobs + admitted)

    def _free(self) -> list[int]:
        return [i for i, owner in enumerate(self.owner) if owner is None]

    def _place_beams(self, jobs: list[Job], free: list[int]) -> None:
        """Beam search's next rows: beam i continues beam parents[i]. The first beam to continue
        a parent keeps its row (no copy); its siblings take the job's unclaimed rows, then free
        slots, and only their caches are copied, as one call for the whole batch. (Python lists:
        a job has a few beams, where each numpy call would cost more than the work.)"""
        dst: list[int] = []
        src: list[int] = []
        fresh: list[bool] = []
        rows: list[int] = []
        tokens: list[int] = []
        for job in jobs:
            if job.parents is None:
                continue
            slots, left = self._beam_rows(job, free, dst, src, fresh)
            if left:  # fewer live beams (a tiny vocabulary): free the rows left over
                self.cache.free(np.array(left, dtype=np.int64))
                for slot in left:
                    self.owner[slot] = None
            for slot in slots:
                self.owner[slot] = job
            job.slots = np.array(slots, dtype=np.int64)
            rows += slots
            tokens += job.next_tokens
            job.parents = job.next_tokens = None
        if rows:
            self.tokens[rows] = tokens
        if dst:
            self.cache.copy_rows(np.array(dst, dtype=np.int64), np.array(src, dtype=np.int64), np.array(fresh))

    @staticmethod
    def _beam_rows(job: Job, free: list[int], dst: list[int], src: list[int], fresh: list[bool]) -> tuple:
        """(each beam's row, the job's rows left over) of ``job``'s next beams; the copies they need
        are appended to ``dst`` / ``src`` / ``fresh`` (a row new to the job: its source rows too)."""
        current = job.slots.tolist()
        kept = [current[p] for p in job.parents]  # the parent's row of each beam
        claimed: set[int] = set()
        first = []  # the first beam on its parent's row keeps it
        for row in kept:
            first.append(row not in claimed)
            claimed.add(row)
        spare = [slot for slot in current if slot not in claimed]
        moving = len(kept) - len(claimed)
        while len(spare) < moving:
            spare.append(free.pop())
        slots, own, moved = list(kept), set(current), iter(spare)
        for i, stays in enumerate(first):
            if not stays:
                slots[i] = row = next(moved)
                dst.append(row)
                src.append(kept[i])
                fresh.append(row not in own)
        return slots, spare[moving:]

    def compact(self, jobs: list[Job], extra: int) -> None:
        """One compaction of the cache: the jobs' rows, then ``extra`` free slots. A row already
        within the kept ones stays where it is; the rows past them fill the holes, in order (an
        in-place cache moves only those; a left-padded one copies every row anyway)."""
        rows = np.concatenate([job.slots for job in jobs]) if jobs else np.zeros(0, dtype=np.int64)
        k = len(rows)
        stay = rows < k
        new = rows.copy()  # each kept row's slot after the compaction
        holes = np.ones(k, dtype=bool)
        holes[rows[stay]] = False
        new[~stay] = np.flatnonzero(holes)
        keep = np.empty(k, dtype=np.int64)
        keep[new] = rows  # keep[i]: the row that becomes row i
        self.cache.compact(keep, extra)
        self.owner = [None] * (k + extra)
        start = 0
        for job in jobs:
            job.slots = new[start : start + len(job.slots)].copy()
            start += len(job.slots)
            for slot in job.slots.tolist():
                self.owner[slot] = job
        self.tokens = np.concatenate([self.tokens[keep], np.full(extra, self.pad_id, dtype=np.int64)])
        self.waste, self.waste_limit = 0.0, self.limit()
        self.compactions += 1

    def free(self, job: Job) -> None:
        """The job's rows become free slots (no copy); ``place`` recounts the live rows."""
        self.cache.free(job.slots)
        for slot in job.slots.tolist():
            self.owner[slot] = None
        self.live_rows -= len(job.slots)
        job.slots = np.zeros(0, dtype=np.int64)

    def recount(self, jobs: list[Job]) -> None:
        """Live rows and the left padding they all share, after the layout changed."""
        live = [job.slots for job in jobs]
        self.live_rows = rows = sum(len(slots) for slots in live)
        pad = self.cache.pad
        if rows == len(pad):  # no free slot (a batch just started, say): every row counts
            self.min_live_pad = int(pad.min()) if rows else 0
        else:
            self.min_live_pad = int(pad[np.concatenate(live)].min()) if live else 0

    def account_step(self, live: int) -> None:
        """A step ran over every row, ``live`` of them a job's (rows that finished at this step
        count as live: they made a token): add what the free rows and unneeded columns cost."""
        self.waste += len(self.owner) - live  # free slots (owner: one entry per row)
        if self.min_live_pad:
            self.waste += COLUMN_COST * live * self.min_live_pad / self.cache.P

    def limit(self) -> float:
        """Compact once idle rows and unneeded columns have cost about what a compaction costs.

        A compaction copies the cache once, roughly the memory traffic of part of a step;
        a free slot wastes a row of every step. So compact after about half a batch of
        row-steps (at most 16: a free row never lingers long), a ski-rental rule.
        """
        return min(COMPACT_AFTER_ROWS * max(self.cache.rows, 1), MAX_IDLE_ROW_STEPS)

    def reset(self) -> None:
        """Drop every row, copying nothing (the batch emptied, failed, or the engine stops)."""
        self.cache.clear()
        self.owner = []
        self.tokens = NO_TOKENS
        self.live_rows = self.min_live_pad = 0
        self.waste, self.waste_limit = 0.0, self.limit()
