"""Beam search's next rows in the slot table: which rows move, which caches are copied."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from attnserve.server.translation.slots import SlotTable


class RecordingCache:
    """The part of a cache the slot table calls when beams are placed, recording the copies."""

    rows = 8

    def __init__(self) -> None:
        self.copies: list[tuple[list[int], list[int], list[bool]]] = []
        self.freed: list[int] = []

    def copy_rows(self, dst, src, fresh=None) -> None:
        self.copies.append((dst.tolist(), src.tolist(), fresh.tolist()))

    def free(self, slots) -> None:
        self.freed += slots.tolist()


def _table_with_beams(slots: list[int], rows: int = 8) -> tuple[SlotTable, SimpleNamespace, RecordingCache]:
    cache = RecordingCache()
    table = SlotTable(cache, start_id=1, pad_id=0)
    job = SimpleNamespace(slots=np.array(slots, dtype=np.int64), parents=None, next_tokens=None)
    table.owner = [job if i in slots else None for i in range(rows)]
    table.tokens = np.zeros(rows, dtype=np.int64)
    return table, job, cache


def test_a_beam_continuing_its_parent_keeps_the_parents_row_and_only_siblings_are_copied():
    table, job, cache = _table_with_beams([2, 5, 6, 7])
    job.parents, job.next_tokens = [1, 1, 0, 3], [10, 11, 12, 13]  # beam 0 and 1 both continue beam 1 (row 5)
    table._place_beams([job], [])
    # beams 0, 2, 3 stay on their parents' rows 5, 2, 7; beam 1 takes row 6, whose parent left
    assert job.slots.tolist() == [5, 6, 2, 7]
    assert cache.copies == [([6], [5], [False])]  # one row copied, within the job (same source)
    assert table.tokens[[5, 6, 2, 7]].tolist() == [10, 11, 12, 13]


def test_beams_that_keep_their_parents_in_order_copy_nothing():
    table, job, cache = _table_with_beams([0, 1, 2, 3])
    job.parents, job.next_tokens = [2, 0, 3, 1], [4, 5, 6, 7]
    table._place_beams([job], [])
    assert job.slots.tolist() == [2, 0, 3, 1] and cache.copies == []


def test_the_first_expansion_copies_the_start_row_into_free_slots_with_its_source():
    table, job, cache = _table_with_beams([3])
    job.parents, job.next_tokens = [0, 0, 0, 0], [4, 5, 6, 7]
    free = [7, 6, 5, 4, 2, 1, 0]  # popped from the end: lowest first
    table._place_beams([job], free)
    assert job.slots.tolist() == [3, 0, 1, 2]
    assert cache.copies == [([0, 1, 2], [3, 3, 3], [True, True, True])]
    assert [table.owner[i] is job for i in range(4)] == [True] * 4


def test_fewer_beams_free_the_rows_left_over():
    table, job, cache = _table_with_beams([0, 1, 2, 3])
    job.parents, job.next_tokens = [1, 1], [4, 5]
    table._place_beams([job], [])
    assert job.slots.tolist() == [1, 0] and cache.copies == [([0], [1], [False])]
    assert cache.freed == [2, 3] and table.owner[2] is None and table.owner[3] is None


class ContentCache(RecordingCache):
    """Rows holding a label each: a copy gives the destination its source's label (sources read first)."""

    def __init__(self, rows: int) -> None:
        super().__init__()
        self.content = list(range(rows))

    def copy_rows(self, dst, src, fresh=None) -> None:
        super().copy_rows(dst, src, fresh)
        labels = [self.content[s] for s in src.tolist()]
        for d, label in zip(dst.tolist(), labels):
            self.content[d] = label


def test_many_jobs_beams_each_land_on_a_copy_of_their_parents_row_in_one_copy():
    """Random parents for several jobs (beams that share a parent, parents left without a child,
    fewer beams than rows): every beam's row holds its parent's cache, rows are never shared,
    only the siblings are copied, all in one call, and every row takes its beam's token."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        rows, k = 24, 4
        cache = ContentCache(rows)
        table = SlotTable(cache, start_id=1, pad_id=0)
        order = rng.permutation(rows).tolist()
        jobs = []
        for j in range(4):
            slots = order[j * k : j * k + int(rng.integers(1, k + 1))]
            n = int(rng.integers(1, k + 1))
            parents = rng.integers(0, len(slots), n).tolist()
            tokens = rng.integers(10, 99, n).tolist()
            jobs.append(SimpleNamespace(slots=np.array(slots, dtype=np.int64), parents=parents, next_tokens=tokens))
        table.owner = [next((job for job in jobs if i in job.slots.tolist()), None) for i in range(rows)]
        table.tokens = np.zeros(rows, dtype=np.int64)
        before = [(job.slots.tolist(), list(job.parents), list(job.next_tokens)) for job in jobs]
        free = sorted((i for i in range(rows) if table.owner[i] is None), reverse=True)
        table._place_beams(jobs, free)
        placed = [slot for job in jobs for slot in job.slots.tolist()]
        assert len(placed) == len(set(placed))
        assert len(cache.copies) <= 1
        copied = len(cache.copies[0][0]) if cache.copies else 0
        assert copied == sum(len(p) - len(set(p)) for _, p, _ in before)
        for job, (old, parents, tokens) in zip(jobs, before):
            assert [cache.content[s] for s in job.slots.tolist()] == [old[p] for p in parents]
            assert table.tokens[job.slots].tolist() == tokens
            assert all(table.owner[s] is job for s in job.slots.tolist())
            assert job.parents is None and job.next_tokens is None
