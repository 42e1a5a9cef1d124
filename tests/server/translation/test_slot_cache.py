"""The in-place cache (model.json ``kv_cache: in-place``): rows at their own lengths in one buffer
written by the decoder, through joins, leaves, beam copies, compactions and growth; and the
engine on an in-place directory against the PyTorch reference and a left-padded directory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnserve.models import greedy_decode
from attnserve.server.translation import DecodeOptions, EngineSettings, slot_cache
from attnserve.server.translation.cache import DevicePlacement, KVCache, Placement
from attnserve.server.translation.slot_cache import InPlaceCache
from tests.support.cache_model import SlotModel

from .conftest import MAX_TARGET_LEN, random_texts, translate_once
from .test_cache import _new_rows

H, D, LAYERS = 2, 3, 1


def _decoder_step(cache: InPlaceCache, value: float) -> None:
    """What GroupQueryAttention does to the bound buffers: row r's new key/value (value + r) at
    column seqlens_k[r]; then the cache advances."""
    cache.reserve()
    positions, seqlens, total = cache.step_inputs()
    assert int(total) == int(seqlens.max()) + 1 <= cache.capacity
    assert (positions[:, 0] == seqlens).all()
    for i, t in enumerate(cache.past):
        a = cache.placement.to_host(t)
        for r in range(cache.rows):
            a[r, :, seqlens[r]] = value + r
        cache.past[i] = cache.placement.from_host(a)
    cache.advance()


@pytest.mark.parametrize("placement", [Placement(), DevicePlacement("cpu")], ids=["host", "ortvalue"])
def test_rows_keep_their_own_cache_through_joins_leaves_copies_compactions_and_growth(placement):
    """A model of the cache: each live slot's history must be columns 0..len - 1 of its row, at
    its own length, whatever joins, leaves, is copied (beam search), compacted, or outgrows the
    capacity (which then doubles, its columns copied)."""
    rng = np.random.default_rng(0)
    cache = InPlaceCache(LAYERS, H, D, placement, initial_capacity=4)
    host = placement.to_host
    model = SlotModel(cache, H, D)

    def step() -> None:  # a decoder step: every live slot appends one value
        _decoder_step(cache, model.next_value)
        for r in model.live():
            model.history[r].append(model.next_value + r)
        model.next_value += 100

    for _ in range(300):
        model.act(rng, step, actions=6)
        past, cross, src_mask = host(cache.past[0]), host(cache.cross[0]), host(cache.src_mask)
        assert past.shape == (len(model.history), H, cache.capacity, D)
        for r in range(len(model.history)):
            if model.history[r] is None:
                assert cache.seqlens[r] == 0 and cache.live[r] == 0
                continue
            assert cache.seqlens[r] == len(model.history[r]) and cache.positions[r, 0] == len(model.history[r])
            assert past[r, 0, : len(model.history[r]), 0].tolist() == model.history[r]
            valid = src_mask[r].astype(bool)
            assert (cross[r, 0, valid, 0] == model.source[r]).all() and valid.sum() == cache.src_len[r]
        per_token = 2 * LAYERS * H * D
        batch_bytes = len(model.history) * per_token * 4 * (cache.capacity + cache.L)
        if placement.device is None:  # a compaction in place keeps the buffers' rows past the batch
            assert cache.nbytes == _allocated(cache.past + cache.cross) >= batch_bytes
        else:
            assert cache.nbytes == batch_bytes
    assert model.compactions > 10 and cache.growths >= 2 and cache.capacity >= 16
    cache.clear()
    assert cache.rows == cache.nbytes == 0


def _allocated(arrays: list[np.ndarray]) -> int:
    """Bytes of the memory ``arrays`` are views of (each buffer once)."""
    bases = {id(b): b for b in (a if a.base is None else a.base for a in arrays)}
    return sum(b.nbytes for b in bases.values())


def test_a_compaction_within_the_buffers_moves_only_the_rows_that_change_place():
    """Rows 1 and 3 of 5 leave; the slot table's order [0, 4, 2] keeps rows 0 and 2 where they are
    and moves row 4 into slot 1, in the same buffers, whose first three rows become the batch (a
    view: nothing is allocated). The cross K/V, the encoder's output adopted at the start, is
    copied into buffers of the cache's own once, then kept too while its width does not change."""
    cache = InPlaceCache(LAYERS, H, D, initial_capacity=4)
    cache.start(_new_rows([3, 5, 2, 4, 6], 100.0))
    for step in range(3):
        _decoder_step(cache, float(10 * step))

    def address(t: np.ndarray) -> int:
        return t.__array_interface__["data"][0]

    past, rows = [address(t) for t in cache.past], cache.past[0].copy()
    cache.free(np.array([1, 3]))
    cache.compact(np.array([0, 4, 2]))
    assert [address(t) for t in cache.past] == past and cache.rows == 3
    for new, old in enumerate([0, 4, 2]):
        np.testing.assert_array_equal(cache.past[0][new, :, :3], rows[old, :, :3])
    assert cache.seqlens.tolist() == [3, 3, 3] and cache.src_len.tolist() == [3, 6, 2]
    cross = [address(t) for t in cache.cross]
    cache.free(np.array([0]))
    cache.compact(np.array([2, 1]), extra=1)  # the longest source stays: the cross K/V keeps its width
    assert [address(t) for t in cache.past + cache.cross] == past + cross and cache.rows == 3
    np.testing.assert_array_equal(cache.past[0][0, :, :3], rows[2, :, :3])
    np.testing.assert_array_equal(cache.past[0][1, :, :3], rows[4, :, :3])
    assert cache.seqlens.tolist() == [3, 3, 0] and cache.src_len.tolist() == [2, 6, 0]
    assert [cache.cross[0][r, 0, 0, 0] for r in (0, 1)] == [102.0, 104.0]  # the sources of rows 2 and 4
    assert cache.src_mask[2].sum() == 0 and cache.src_mask[0].sum() == 2


def test_the_capacity_doubles_but_never_past_what_a_running_row_may_reach():
    cache = InPlaceCache(LAYERS, H, D, initial_capacity=4)
    cache.limit = 6  # the longest running row's max_new_tokens
    cache.start(_new_rows([3, 5], 100.0))
    for step in range(6):
        _decoder_step(cache, float(step))
    assert cache.capacity == 6 and cache.growths == 1  # 4 -> 6, not 8
    assert cache.row_bytes == 2 * LAYERS * H * D * 4 * (6 + 5)
    assert [cache.past[0][r, 0, :6, 0].tolist() for r in range(2)] == [[0.0, 1, 2, 3, 4, 5], [1.0, 2, 3, 4, 5, 6]]


def test_a_compaction_gives_back_the_columns_no_running_row_can_reach():
    cache = InPlaceCache(LAYERS, H, D, initial_capacity=4)
    cache.start(_new_rows([3, 5], 100.0))
    for step in range(10):
        _decoder_step(cache, float(step))
    assert cache.capacity == 16  # 4 -> 8 -> 16
    cache.free(np.array([1]))
    cache.limit = 12  # the long row left: the one running may reach 12 tokens
    cache.compact(np.array([0]))
    assert cache.capacity == 12 and cache.rows == 1 and cache.seqlens.tolist() == [10]
    assert cache.past[0][0, 0, :10, 0].tolist() == [float(s) for s in range(10)]


def test_the_engine_serves_an_in_place_directory_with_its_cache_written_in_place(tiny, long_text):
    """Rows that outgrow the initial capacity (long outputs joining at different steps) keep the
    reference's tokens; the buffers the decoder writes are the ones the cache holds (no present
    comes back as a new tensor)."""
    engine = tiny.engine(EngineSettings(max_active_sequences=4))
    cache = engine._scheduler.cache
    assert tiny.manifest.kv_cache == "in-place" and isinstance(cache, InPlaceCache)
    seen = []
    runner = engine._scheduler.runner
    step = runner._step_in_place

    def spy(c, ids):
        before = [t.__array_interface__["data"][0] for t in c.past]
        logits = step(c, ids)
        seen.append(before == [t.__array_interface__["data"][0] for t in c.past])
        return logits

    runner._step_in_place = spy
    texts = [long_text, *random_texts(3, seed=5), long_text]
    options = DecodeOptions(max_new_tokens=MAX_TARGET_LEN)
    results = translate_once(engine, texts, options)
    for text, result in zip(texts, results):
        src = torch.tensor([tiny.tokenizer.encode(text).ids])
        assert result.hypotheses[0].token_ids == greedy_decode(tiny.model, src, MAX_TARGET_LEN)[0].tokens
    assert MAX_TARGET_LEN > 32 and cache.growths >= 1, "the rows never outgrew the initial capacity"
    assert sum(seen) >= len(seen) - cache.growths and len(seen) >= MAX_TARGET_LEN


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_left_padded_directory_still_loads_and_translates_the_same(tiny, tiny_left_padded, beam_size):
    """Directories exported before the in-place cache (no kv_cache in model.json) load with the
    left-padded cache, and both layouts give the same hypotheses and scores."""
    assert tiny_left_padded.manifest.kv_cache == "left-padded"
    texts = random_texts(6, seed=beam_size)
    options = DecodeOptions(beam_size=beam_size, num_hypotheses=beam_size, max_new_tokens=20)
    old = tiny_left_padded.engine()
    assert isinstance(old._scheduler.cache, KVCache)
    left = translate_once(old, texts, options)
    right = translate_once(tiny.engine(), texts, options)
    for a, b in zip(left, right):
        assert [h.token_ids for h in a.hypotheses] == [h.token_ids for h in b.hypotheses]
        assert [h.logprob for h in a.hypotheses] == pytest.approx([h.logprob for h in b.hypotheses], abs=1e-4)


@pytest.mark.parametrize("row_copy_bytes", [0, 1 << 30], ids=["row-by-row", "one-gather"])
@pytest.mark.parametrize(("dst", "src"), [([1, 4], [5, 0]), ([0, 2, 3], [2, 0, 4])], ids=["disjoint", "swap"])
def test_copied_rows_take_their_sources_columns_and_lengths(monkeypatch, row_copy_bytes, dst, src):
    """Beam search's copies, rows of different lengths: each destination holds its source's cached
    columns as they were before any copy (a swap included), at the source's length."""
    monkeypatch.setattr(slot_cache, "ROW_COPY_BYTES", row_copy_bytes)
    cache = InPlaceCache(LAYERS, H, D, initial_capacity=8)
    cache.start(_new_rows([3, 5, 2, 4, 6, 3], 100.0))
    for step in range(3):
        _decoder_step(cache, float(10 * step))
    cache.free(np.array([4, 5]))
    cache.assign(np.array([4, 5]), _new_rows([2, 2], 200.0))
    for step in range(2):
        _decoder_step(cache, float(100 + 10 * step))
    before, lengths = [t.copy() for t in cache.past], cache.seqlens.copy()
    assert lengths.tolist() == [5, 5, 5, 5, 2, 2]
    cache.copy_rows(np.array(dst), np.array(src))
    for t, old in zip(cache.past, before):
        for d, s in zip(dst, src):
            np.testing.assert_array_equal(t[d, :, : lengths[s]], old[s, :, : lengths[s]])
    assert [int(cache.seqlens[d]) for d in dst] == [int(lengths[s]) for s in src]
    untouched = [r for r in range(6) if r not in dst]
    np.testing.assert_array_equal(cache.past[0][untouched], before[0][untouched])
