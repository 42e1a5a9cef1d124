"""The KV-cache layout under compaction, and the io-binding (device) path of the decoder step."""

from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import pytest
import torch

from attnserve.models import beam_search, greedy_decode
from attnserve.server.translation import DecodeOptions, EngineSettings, load_translation_sessions
from attnserve.server.translation.cache import DevicePlacement, KVCache, NewRows, Placement
from attnserve.server.translation.jobs import CollectSink, Job, JobState
from attnserve.server.translation.scheduler import DecodeScheduler
from attnserve.server.translation.sessions import model_spec
from tests.support.cache_model import SlotModel, new_rows
from tests.support.sessions import DeviceSession

from .conftest import random_texts

H, D, LAYERS = 2, 3, 1


def _new_rows(lengths: list[int], tag: float) -> NewRows:
    return new_rows(lengths, tag, H, D)


@pytest.mark.parametrize("placement", [Placement(), DevicePlacement("cpu")], ids=["host", "ortvalue"])
def test_rows_keep_their_own_cache_through_joins_leaves_copies_and_compactions(placement):
    """A model of the cache: each live slot's logical history is a list of values; the left-padded
    tensor must show exactly that history in slots pad..P-1, whatever joins, leaves, is copied
    (beam search) or compacted, and a compaction keeps no column that no live row needs."""
    rng = np.random.default_rng(0)
    cache = KVCache(LAYERS, H, D, placement)
    host = placement.to_host
    model = SlotModel(cache, H, D)

    def joined(lengths: list[int], width: int) -> None:
        assert cache.L == max(width, *lengths), "cross K/V widened beyond the longest source"

    def compacted() -> None:
        kept = [h for h in model.history if h is not None]
        assert cache.P == max(map(len, kept)), "kept columns nobody needs"
        assert cache.L == int(cache.src_len.max(initial=0)), "kept source columns nobody needs"

    def step() -> None:  # a decoder step: every slot appends one value
        positions, self_mask = cache.step_inputs()
        past = host(cache.past[0])  # (B, H, P, D)
        new = np.zeros((cache.rows, H, 1, D), np.float32)
        for r in range(cache.rows):
            new[r] = model.next_value + r
            if model.history[r] is not None:
                history = model.history[r]
                assert positions[r, 0] == len(history) and self_mask[r].sum() == len(history) + 1
                history.append(model.next_value + r)
        model.next_value += 100
        present = np.concatenate([past, new], axis=2)  # what the decoder graph returns
        cache.advance([placement.from_host(present), placement.from_host(present.copy())])

    for _ in range(200):
        model.act(rng, step, join_check=joined, compact_check=compacted)
        past, cross, src_mask = host(cache.past[0]), host(cache.cross[0]), host(cache.src_mask)
        assert past.shape == (cache.rows, H, cache.P, D) == (len(model.history), H, cache.P, D)
        for r in model.live():
            history = model.history[r]
            pad = int(cache.pad[r])
            assert pad == cache.P - len(history)
            assert past[r, 0, pad:, 0].tolist() == history
            valid = src_mask[r].astype(bool)
            assert (cross[r, 0, valid, 0] == model.source[r]).all() and valid.sum() == cache.src_len[r]
        assert cache.nbytes == (cache.rows and cache.rows * 2 * LAYERS * H * D * 4 * (cache.P + cache.L))
    assert model.compactions > 10
    cache.clear()
    assert cache.rows == cache.nbytes == 0


def test_step_inputs_follow_every_row_across_many_steps_and_joins():
    """positions and self_mask are views of tables built at boundaries (a row of positions per
    step, the mask a slice of a wider buffer): they must equal their definition at every step,
    past the tables' 64 steps, after a row leaves and after one joins into its slot."""
    cache = KVCache(LAYERS, H, D)
    cache.start(_new_rows([4, 2, 3], 1.0))

    def step() -> None:
        positions, self_mask = cache.step_inputs()
        P, pad = cache.P, cache.pad
        assert positions.shape == (cache.rows, 1) and self_mask.shape == (cache.rows, P + 1)
        assert positions.flags.c_contiguous  # fed to onnxruntime as it is
        assert positions[:, 0].tolist() == (P - pad).tolist()
        expected = (np.arange(P + 1)[None, :] >= pad[:, None]).astype(np.int32)
        assert self_mask.dtype == np.int32 and (self_mask == expected).all()
        present = np.zeros((cache.rows, H, P + 1, D), np.float32)
        cache.advance([present, present])

    for _ in range(70):  # past the 64 columns the first buffer holds
        step()
    cache.free(np.array([1]))
    for _ in range(5):
        step()
    cache.assign(np.array([1]), _new_rows([5], 9.0))  # a newcomer, left-padded to P
    assert cache.pad.tolist() == [0, 75, 0]
    for _ in range(150):  # past the rebuilt buffer's width too
        step()


def test_step_inputs_of_batches_started_from_idle_in_turn():
    """A batch started from idle reads its step inputs from tables kept for the largest such
    batch so far: a smaller batch after a larger one, and a larger one after that, still get
    exactly their own rows' positions and masks, past the tables' 64 steps."""
    cache = KVCache(LAYERS, H, D)
    for lengths in ([4, 2, 3], [5], [2, 2, 2, 2, 2, 2], [3, 3]):
        cache.clear()
        cache.start(_new_rows(lengths, 1.0))
        for _ in range(70):
            positions, self_mask = cache.step_inputs()
            assert positions.flags.c_contiguous and positions[:, 0].tolist() == [cache.P] * len(lengths)
            assert self_mask.shape == (len(lengths), cache.P + 1) and self_mask.all()
            present = np.zeros((cache.rows, H, cache.P + 1, D), np.float32)
            cache.advance([present, present])


@pytest.mark.parametrize("placement", [Placement(), DevicePlacement("cpu")], ids=["host", "ortvalue"])
def test_a_batch_started_from_idle_adopts_the_encoder_output(placement):
    """start(): the newcomers are the whole batch; on the host their cross K/V is not copied."""
    cache = KVCache(LAYERS, H, D, placement)
    new = _new_rows([5, 3, 2], 10.0)
    cache.start(new)
    host = placement.to_host
    assert (cache.rows, cache.P, cache.L) == (3, 0, 5)
    assert host(cache.past[0]).shape == (3, H, 0, D)
    assert (host(cache.cross[1]) == new.cross[1]).all() and (host(cache.src_mask) == new.src_mask).all()
    assert cache.src_len.tolist() == [5, 3, 2] and cache.pad.tolist() == [0, 0, 0]
    if placement.device is None:
        assert all(np.shares_memory(c, n) for c, n in zip(cache.cross, new.cross)), "copied the encoder output"
    positions, self_mask = cache.step_inputs()
    assert positions[:, 0].tolist() == [0, 0, 0] and self_mask.tolist() == [[1], [1], [1]]


def test_cross_kv_is_sized_to_the_longest_source_exactly(tiny_any):
    """The kv_cache_bytes gauge: a batch from an idle engine holds cross K/V for the longest
    source, no more (it was rounded up to a multiple of 8 before), and self-attention columns for
    the longest row (left-padded) or for the buffer's capacity (in place)."""
    tiny = tiny_any
    encoder, decoder = load_translation_sessions(tiny.path, tiny.manifest, intra_op_threads=1)
    spec = model_spec(tiny.manifest)
    scheduler = DecodeScheduler(encoder, decoder, spec, EngineSettings())
    options = DecodeOptions(max_new_tokens=3)
    sources = [[5, 6, 7, 2], [8, 9, 10, 11, 12, 2], [13, 2]]  # longest: 6 tokens
    jobs = [Job(src, options, 3, spec.eos_id, CollectSink()) for src in sources]
    scheduler.submit(jobs)
    scheduler.run_once(scheduler.plan())  # admission and the first step
    per_column = 2 * spec.num_layers * spec.num_heads * spec.head_dim * 4  # bytes of one row's column, all layers
    assert (scheduler.cache.rows, scheduler.cache.P, scheduler.cache.L) == (3, 1, 6)
    columns = scheduler.cache.capacity if spec.decoder_io.in_place else 1
    assert scheduler.kv_cache_bytes == 3 * per_column * (columns + 6)
    scheduler.run_until_idle([])
    assert all(job.state is JobState.FINISHED for job in jobs) and scheduler.kv_cache_bytes == 0


def test_a_slot_a_waiting_text_takes_at_the_next_boundary_wastes_nothing(tiny):
    """A row whose text finished at a step made a token in that step: while waiting texts take
    every freed slot at the next boundary, no row-step was wasted and the in-place cache is not
    compacted (counting the finished rows as idle compacted a full batch every few steps; a
    left-padded cache still compacts there, to drop the columns the oldest rows leave unneeded)."""
    encoder, decoder = load_translation_sessions(tiny.path, tiny.manifest, intra_op_threads=1)
    spec = model_spec(tiny.manifest)
    scheduler = DecodeScheduler(encoder, decoder, spec, EngineSettings(max_active_sequences=4))
    # 4 rows that end one step apart, then texts of 4 tokens: about one row ends at every step
    lengths = [1, 2, 3, 4] + [4] * 16
    jobs = [
        Job([5 + i, 6, 7, spec.eos_id], DecodeOptions(), n, spec.eos_id, CollectSink()) for i, n in enumerate(lengths)
    ]
    with scheduler.waiting.locked() as waiting:
        waiting.extend(jobs)
    refilled = 0
    while len(scheduler.waiting) >= 4:  # whatever ends at a step is replaced at the next boundary
        before = scheduler.slots.compactions
        scheduler.run_once(scheduler.plan())
        assert scheduler.slots.compactions == before, "compacted a batch whose free slots were all refilled"
        refilled += 1
    assert refilled >= 10
    scheduler.run_until_idle([])
    assert all(job.state is JobState.FINISHED for job in jobs)


def _decode_with_placement(tiny, placement, texts, options, sessions=None):
    encoder, decoder = sessions or load_translation_sessions(tiny.path, tiny.manifest, intra_op_threads=1)
    scheduler = DecodeScheduler(encoder, decoder, model_spec(tiny.manifest), EngineSettings(), placement)
    sinks = [CollectSink() for _ in texts]
    jobs = [
        Job(tiny.tokenizer.encode(t).ids, options, options.max_new_tokens, tiny.manifest.tokenizer.eos_id, s)
        for t, s in zip(texts, sinks)
    ]
    scheduler.run_until_idle(jobs)
    assert all(s.error is None for s in sinks)
    return [s.finished for s in sinks], scheduler


@pytest.mark.parametrize("beam_size", [1, 3])
def test_io_binding_path_gives_the_reference_tokens(tiny, beam_size):
    """The CUDA code path (OrtValues + io binding), run on the CPU device."""
    texts = random_texts(5, seed=21)
    options = DecodeOptions(beam_size=beam_size, num_hypotheses=beam_size, max_new_tokens=15)
    finished, scheduler = _decode_with_placement(tiny, DevicePlacement("cpu"), texts, options)
    for text, hyps in zip(texts, finished):
        src = torch.tensor([tiny.tokenizer.encode(text).ids])
        if beam_size == 1:
            expected = greedy_decode(tiny.model, src, 15)
        else:
            expected = beam_search(tiny.model, src, beam_size, 15, 1.0, beam_size)[0]
        assert [h.tokens for h in hyps] == [h.tokens for h in expected]
    assert scheduler.kv_cache_bytes == 0 and scheduler.active_sequences == 0


@pytest.mark.parametrize("beam_size", [1, 3])
def test_the_device_path_reads_each_steps_inputs_where_a_binding_copies_them_when_bound(tiny_any, beam_size):
    """On CUDA onnxruntime copies a host input to the device when it is bound, not at each run
    (tests.support.sessions.DeviceSession plays that on the CPU): bound once per layout, the
    in-place step's token ids, positions and lengths stayed the values they had then, and the
    tokens on an H200 were wrong (29% equal). Both layouts give the reference's tokens."""
    texts = random_texts(5, seed=22)
    options = DecodeOptions(beam_size=beam_size, num_hypotheses=beam_size, max_new_tokens=40)
    encoder, decoder = load_translation_sessions(tiny_any.path, tiny_any.manifest, intra_op_threads=1)
    spec = model_spec(tiny_any.manifest)
    scheduler = DecodeScheduler(encoder, decoder, spec, EngineSettings(), DevicePlacement("cpu"))
    cache = scheduler.cache
    scheduler.runner.decoder = DeviceSession(decoder, lambda: [*cache.past, *cache.cross, cache.src_mask])
    sinks = [CollectSink() for _ in texts]
    jobs = [
        Job(tiny_any.tokenizer.encode(t).ids, options, options.max_new_tokens, spec.eos_id, s)
        for t, s in zip(texts, sinks)
    ]
    scheduler.run_until_idle(jobs)
    for text, sink in zip(texts, sinks):
        src = torch.tensor([tiny_any.tokenizer.encode(text).ids])
        if beam_size == 1:
            expected = greedy_decode(tiny_any.model, src, options.max_new_tokens)
        else:
            expected = beam_search(tiny_any.model, src, beam_size, options.max_new_tokens, 1.0, beam_size)[0]
        assert sink.error is None and [h.tokens for h in sink.finished] == [h.tokens for h in expected]


def _cuda_device() -> bool:
    return "CUDAExecutionProvider" in ort.get_available_providers() and os.path.exists("/dev/nvidia0")


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_device(), reason="needs a CUDA device and onnxruntime's CUDA provider")
def test_cuda_engine_keeps_the_cache_on_the_device_and_matches_the_reference(tiny_left_padded):
    # fp32 on CUDA is the left-padded layout (GroupQueryAttention has no fp32 CUDA kernel); the fp16
    # in-place cache on a device is benchmarks/kv_inplace_cuda.py's (cuda_checks' kv-inplace step:
    # its tokens against the CPU's fp32 ones)
    tiny = tiny_left_padded
    encoder, decoder = load_translation_sessions(tiny.path, tiny.manifest, provider="cuda")
    assert "CUDAExecutionProvider" in decoder.get_providers()
    from attnserve.server.translation.cache import placement_for

    placement = placement_for(decoder)
    assert placement.device == "cuda"
    texts = random_texts(4, seed=31)
    for beam_size in (1, 3):  # greedy, and beams that copy their cache rows on the device
        options = DecodeOptions(beam_size=beam_size, num_hypotheses=beam_size, max_new_tokens=12)
        finished, scheduler = _decode_with_placement(tiny, placement, texts, options, sessions=(encoder, decoder))
        for text, hyps in zip(texts, finished):
            src = torch.tensor([tiny.tokenizer.encode(text).ids])
            if beam_size == 1:
                expected = greedy_decode(tiny.model, src, 12)
            else:
                expected = beam_search(tiny.model, src, beam_size, 12, 1.0, beam_size)[0]
            assert [h.tokens for h in hyps] == [h.tokens for h in expected]
        assert scheduler.kv_cache_bytes == 0 and scheduler.active_sequences == 0
