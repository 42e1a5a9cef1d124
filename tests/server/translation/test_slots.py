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
