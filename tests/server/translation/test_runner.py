"""The model runner: a boundary's encoder runs (sources grouped by length, every job given its
own cross K/V), and a decoder step that hands out the waiting results right before it runs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from attnserve.server.translation import DecodeOptions
from attnserve.server.translation.cache import DevicePlacement, Placement
from attnserve.server.translation.jobs import CollectSink, Job
from attnserve.server.translation.runner import ModelRunner, length_runs
from attnserve.server.translation.sessions import load_translation_sessions, model_spec
from attnserve.server.translation.slot_cache import make_cache
from attnserve.server.translation.slots import SlotTable

from .conftest import SessionWrapper


def cost(lengths: list[int], runs: list[list[int]], run_cost: int) -> int:
    """Positions the runs compute (rows x each run's longest source) plus ``run_cost`` per run."""
    return sum(run_cost + len(run) * max(lengths[i] for i in run) for run in runs)


def test_short_and_long_sources_go_in_separate_runs():
    lengths = [9, 41, 9, 9, 41, 10]
    runs = length_runs(lengths, run_cost=16)
    assert sorted(i for run in runs for i in run) == list(range(len(lengths)))
    assert [sorted(lengths[i] for i in run) for run in runs] == [[9, 9, 9, 10], [41, 41]]
    assert cost(lengths, runs, 16) < cost(lengths, [list(range(6))], 16)


def test_close_lengths_stay_one_run_in_the_given_order():
    # padding two positions costs less than a second run: one run, order kept (its rows are used without a copy)
    assert length_runs([12, 11, 12, 13], run_cost=16) == [[0, 1, 2, 3]]
    assert length_runs([7, 7, 7]) == [[0, 1, 2]]
    assert length_runs([5]) == [[0]]
    assert length_runs([]) == []


@pytest.mark.parametrize("seed", range(20))
def test_the_runs_cost_no_more_than_any_split_of_the_sorted_lengths(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 60, rng.integers(1, 12)).tolist()
    runs = length_runs(lengths, run_cost=8)
    assert sorted(i for run in runs for i in run) == list(range(len(lengths)))
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    best = min(  # every way to cut the sorted order into consecutive runs
        cost(lengths, [order[a:b] for a, b in zip((0, *cuts), (*cuts, len(order)))], 8)
        for k in range(len(order))
        for cuts in itertools.combinations(range(1, len(order)), k)
    )
    assert cost(lengths, runs, 8) == best


def test_each_job_gets_the_cross_kv_of_its_own_source(tiny):
    encoder, decoder = load_translation_sessions(tiny.path, tiny.manifest, intra_op_threads=1)
    spec = model_spec(tiny.manifest)
    recorder = SessionWrapper(encoder)
    runner = ModelRunner(recorder, decoder, spec, Placement())
    rng = np.random.default_rng(0)
    sources = [rng.integers(4, 64, n).tolist() + [spec.eos_id] for n in (2, 19, 2, 1, 20)]
    jobs = [Job(src, DecodeOptions(), 4, spec.eos_id, CollectSink()) for src in sources]

    assert runner.encode(jobs) is None  # two runs: no single output to place without a copy
    assert sorted(recorder.shapes) == [(2, 21), (3, 3)]  # (rows, padded length): 2 + 1 + 2 tokens, then 19 and 20
    io = spec.encoder_io
    for job, src in zip(jobs, sources):
        feeds = {io.src_ids: np.array([src]), io.src_mask: np.ones((1, len(src)), np.int32)}
        alone = encoder.run(runner.cross_names, feeds)  # the source encoded on its own
        assert len(job.encoded) == len(alone)
        for mine, ref in zip(job.encoded, alone):
            assert mine.shape == ref[0].shape  # (H, Lj, D): no padding kept
            np.testing.assert_allclose(mine, ref[0], rtol=1e-4, atol=1e-5)

    same = [Job(src, DecodeOptions(), 4, spec.eos_id, CollectSink()) for src in (sources[1], sources[4][:-1])]
    recorder.shapes.clear()
    outputs = runner.encode(same)  # 20 and 20 tokens: one run, rows in the given order
    assert recorder.shapes == [(2, 20)]
    assert outputs is not None and outputs[0].shape[0] == 2
    np.testing.assert_array_equal(outputs[0][1, :, :20], same[1].encoded[0])


def test_with_device_placement_every_source_goes_in_one_run(tiny):
    # not measured on a GPU yet, where a run's fixed cost weighs more: one run, as before
    encoder, decoder = load_translation_sessions(tiny.path, tiny.manifest, intra_op_threads=1)
    spec = model_spec(tiny.manifest)
    recorder = SessionWrapper(encoder)
    runner = ModelRunner(recorder, decoder, spec, DevicePlacement("cpu"))
    jobs = [Job([5] * n + [spec.eos_id], DecodeOptions(), 4, spec.eos_id, CollectSink()) for n in (2, 19, 2)]
    outputs = runner.encode(jobs)
    assert recorder.shapes == [(3, 20)]
    assert outputs is not None and [job.encoded[0].shape[1] for job in jobs] == [3, 20, 3]


class CallOrder:
    """A session that notes in ``log`` when it runs (``session.run`` or io binding), as ``name``."""

    def __init__(self, session, log: list[str], name: str) -> None:
        self.session, self.log, self.name = session, log, name

    def run(self, *args, **kwargs):
        self.log.append(f"{self.name} runs")
        return self.session.run(*args, **kwargs)

    def run_with_iobinding(self, *args, **kwargs):
        self.log.append(f"{self.name} runs")
        return self.session.run_with_iobinding(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.session, name)


@pytest.mark.parametrize("placement", [Placement(), DevicePlacement("cpu")], ids=["host", "io binding"])
def test_results_go_out_with_a_runs_inputs_ready_right_before_the_model_runs(tiny, placement):
    # the event loops turn the results into messages while onnxruntime runs without the GIL
    encoder, decoder = load_translation_sessions(tiny.path, tiny.manifest, intra_op_threads=1)
    spec = model_spec(tiny.manifest)
    log: list[str] = []
    sessions = CallOrder(encoder, log, "encoder"), CallOrder(decoder, log, "decoder")
    runner = ModelRunner(*sessions, spec, placement, before_run=lambda: log.append("results out"))
    slots = SlotTable(make_cache(spec, decoder, placement), spec.start_id, spec.pad_id)
    jobs = [Job(src, DecodeOptions(), 4, spec.eos_id, CollectSink()) for src in ([5, 9, spec.eos_id], [7] * 30)]

    outputs = runner.encode(jobs)
    runs = 1 if placement.device else 2  # 3 and 30 tokens: two runs of like lengths on the host
    assert log == ["results out", "encoder runs"] * runs
    slots.start(jobs, runner.new_rows(jobs, (outputs, jobs) if outputs is not None else None))
    log.clear()
    logits = runner.step(slots.cache, slots.tokens[:, None])
    assert log == ["results out", "decoder runs"]
    assert logits.shape == (2, tiny.model.cfg.vocab_size) and slots.cache.P == 1
    runner.decoder = CallOrder(decoder, log, "swapped decoder")  # a session swapped in is the one that runs
    runner.step(slots.cache, np.array([[7], [8]]))
    assert log[2:] == ["results out", "swapped decoder runs"] and slots.cache.P == 2
