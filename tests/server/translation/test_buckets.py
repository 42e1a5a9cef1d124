"""Decoder steps at fixed batch sizes into persistent buffers (step buckets), the shape CUDA
graphs need, on the CPU provider: the same tokens as without them, stable addresses, and the
steps that run without a graph."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from attnserve.server.translation import DecodeOptions, EngineSettings, load_translation_sessions
from attnserve.server.translation.buckets import GRAPH_ID, MAX_CAPTURES, bucket_for, step_buckets
from attnserve.server.translation.cache import DevicePlacement, Placement
from attnserve.server.translation.jobs import CollectSink, Job
from attnserve.server.translation.scheduler import DecodeScheduler
from attnserve.server.translation.sessions import model_spec
from tests.support.sessions import DeviceSession

from .conftest import MAX_TARGET_LEN, random_texts


def test_bucket_sizes_are_powers_of_two_up_to_the_batch_limit():
    assert step_buckets(64) == (1, 2, 4, 8, 16, 32, 64)
    assert step_buckets(48) == (1, 2, 4, 8, 16, 32, 48)
    assert step_buckets(1) == (1,)
    sizes = step_buckets(48)
    assert [bucket_for(sizes, n) for n in (1, 2, 3, 5, 17, 33, 48, 50)] == [1, 2, 4, 8, 32, 48, 48, 50]


def test_an_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="step_buckets must be one of off, on, cuda-graphs"):
        EngineSettings(step_buckets="yes")


class GraphSession:
    """A CPU session that says its CUDA provider has graphs and records each step's graph id
    (what onnxruntime would capture or replay) and the graphs released."""

    def __init__(self, session, scheduler=None) -> None:
        self.session, self.graph_ids, self.events = session, [], []
        self.scheduler, self.totals = scheduler, []  # (graph id, total bound, bucket's capacity, cache's total)

    def get_provider_options(self):
        return {"CUDAExecutionProvider": {"enable_cuda_graph": "1"}}

    def run_with_iobinding(self, binding, run_options=None):
        self.graph_ids.append(int(run_options.get_run_config_entry(GRAPH_ID)))
        self.events.append(("run", self.graph_ids[-1]))
        if self.scheduler is not None:
            bucket = next(b for b in self.scheduler.runner.buckets._buckets.values() if b.binding is binding)
            total = int(bucket.host["total"])
            self.totals.append((self.graph_ids[-1], total, bucket.capacity, int(self.scheduler.cache.total)))
        return self.session.run_with_iobinding(binding)

    def release_captured_graph(self, graph_id: int) -> None:
        self.events.append(("release", graph_id))

    def __getattr__(self, name):
        return getattr(self.session, name)


def _scheduler(tiny, buckets: str, placement=None, max_rows: int = 6, wrap=None):
    encoder, decoder = load_translation_sessions(tiny.path, tiny.manifest, intra_op_threads=1)
    settings = EngineSettings(max_active_sequences=max_rows, step_buckets=buckets)
    scheduler = DecodeScheduler(encoder, decoder, model_spec(tiny.manifest), settings, placement)
    if wrap is not None:
        scheduler.runner.decoder = wrap(decoder, scheduler)
    return scheduler


def _decode(scheduler, tiny, texts, options_for):
    """Every text through ``scheduler`` at once (more than its rows: they join as others leave);
    the finished hypotheses' tokens per text and (rows, live rows) of every step."""
    spec, sinks, steps = model_spec(tiny.manifest), [CollectSink() for _ in texts], []
    jobs = [
        Job(tiny.tokenizer.encode(t).ids, options_for(i), options_for(i).max_new_tokens, spec.eos_id, s)
        for i, (t, s) in enumerate(zip(texts, sinks))
    ]
    step = scheduler._step

    def spy():
        steps.append((scheduler.cache.rows, scheduler.slots.live_rows))
        step()

    scheduler._step = spy
    scheduler.run_until_idle(jobs)
    assert all(s.error is None for s in sinks)
    return [[h.tokens for h in s.finished] for s in sinks], steps


def _options(beam_size: int):
    # max_new_tokens up to the model's limit: rows outgrow the cache's first capacity (32)
    return lambda i: DecodeOptions(
        beam_size=beam_size, num_hypotheses=beam_size, max_new_tokens=(12, 25, MAX_TARGET_LEN)[i % 3]
    )


@pytest.mark.parametrize("beam_size", [1, 3])
@pytest.mark.parametrize("placement", [Placement(), DevicePlacement("cpu")], ids=["host", "device"])
def test_buckets_give_the_same_tokens_as_steps_at_the_batchs_own_size(tiny, beam_size, placement):
    """Rows join and leave, beams are copied, the capacity grows past 32 tokens: every step runs at
    a bucket size, padding rows past the batch, and every text gets the tokens it gets without."""
    texts = random_texts(9, seed=41)
    plain = _scheduler(tiny, "off", placement)
    expected, plain_steps = _decode(plain, tiny, texts, _options(beam_size))
    bucketed = _scheduler(tiny, "on", placement)
    got, steps = _decode(bucketed, tiny, texts, _options(beam_size))
    assert got == expected
    assert bucketed.cache.growths >= 1, "no row outgrew the first capacity"
    sizes = step_buckets(6)
    padded = [(rows, bucket_for(sizes, rows)) for rows, _ in steps if bucket_for(sizes, rows) > rows]
    assert padded, "no step ran with padding rows"
    shapes = [b.rows for b in bucketed.runner.buckets._buckets.values()]
    assert set(shapes) <= set(sizes) and len(shapes) >= 2


def test_the_device_path_updates_persistent_buffers_in_place(tiny):
    """On a device a host input is copied when bound (DeviceSession plays that on the CPU): the
    bucket's ids, positions and lengths are device buffers updated in place at every step, and
    the cache's boundary copies write into its device buffers, so nothing is rebound between
    layouts and the tokens are the reference's."""
    texts = random_texts(9, seed=42)
    expected, _ = _decode(_scheduler(tiny, "off"), tiny, texts, _options(3))

    def device(decoder, scheduler):
        cache, runner = scheduler.cache, scheduler.runner
        return DeviceSession(
            decoder, lambda: [*cache.past, *cache.cross, cache.src_mask, *runner.buckets.device_values()]
        )

    scheduler = _scheduler(tiny, "on", DevicePlacement("cpu"), wrap=device)
    got, _ = _decode(scheduler, tiny, texts, _options(3))
    assert got == expected


def test_a_buckets_bound_addresses_change_only_when_the_cache_replaces_a_buffer(tiny, long_text):
    """What a CUDA graph needs: step after step, every value a bucket binds (its own buffers, the
    cache's KV buffers, cross K/V, source mask, logits) stays at its address; three texts that run
    to the model's limit change them once, when the capacity grows past 32 tokens."""
    scheduler = _scheduler(tiny, "on", max_rows=8)
    spec = model_spec(tiny.manifest)
    options = DecodeOptions(max_new_tokens=MAX_TARGET_LEN)
    jobs = [
        Job(tiny.tokenizer.encode(long_text).ids, options, MAX_TARGET_LEN, spec.eos_id, CollectSink()) for _ in range(3)
    ]
    with scheduler.waiting.locked() as waiting:
        waiting.extend(jobs)
    seen, logits = [], set()
    while scheduler._jobs or len(scheduler.waiting):
        scheduler.run_once(scheduler.plan())
        bucket = scheduler.runner.buckets.bucket(3)
        if scheduler._jobs:
            seen.append(bucket.addresses)
            logits.add(bucket.logits.ctypes.data)
    assert bucket.rows == 4 and len(seen) == MAX_TARGET_LEN - 1
    changes = sum(a != b for a, b in zip(seen, seen[1:]))
    assert changes == 1 and scheduler.cache.growths == 1
    moved = {name for (name, ptr, _), (_, ptr2, _) in zip(seen[0], seen[-1]) if ptr != ptr2}
    assert moved == set(spec.decoder_io.past), "something but the grown KV buffers moved"
    assert len(logits) == 1


def test_graph_ids_per_bucket_and_the_steps_that_run_without_one(tiny, monkeypatch):
    """With graphs: the first token's step runs without one, every later step with its bucket's
    graph, one size per graph; a capacity growth captures another, and a bucket keeping one graph
    releases the one it had (never run again). The tokens are the same."""
    monkeypatch.setattr("attnserve.server.translation.buckets.GRAPHS_PER_BUCKET", 1)
    texts = random_texts(9, seed=43)
    expected, _ = _decode(_scheduler(tiny, "off"), tiny, texts, _options(1))
    scheduler = _scheduler(tiny, "cuda-graphs", wrap=lambda decoder, _: GraphSession(decoder))
    session = scheduler.runner.decoder
    got, steps = _decode(scheduler, tiny, texts, _options(1))
    assert got == expected
    ids = session.graph_ids
    assert ids[0] == -1 and len(ids) == len(steps)
    assert all(i >= 1 for i in ids[1:]), "a later step ran without its graph"
    buckets = [bucket_for(step_buckets(6), rows) for rows, _ in steps]
    graph_of = {}
    for bucket, graph in zip(buckets[1:], ids[1:]):
        graph_of.setdefault(graph, set()).add(bucket)
    assert all(len(b) == 1 for b in graph_of.values()), "a graph ran at two batch sizes"
    assert scheduler.runner.buckets.captures == len(set(ids[1:]))
    released = [graph for event, graph in session.events if event == "release"]
    assert released, "the capacity grew and no graph was released"
    for graph in released:
        after = session.events[session.events.index(("release", graph)) :]
        assert ("run", graph) not in after, "a released graph ran again"


def test_a_burst_like_the_last_one_replays_its_graphs_without_capturing_again(tiny):
    """An engine between bursts on a device: the cache gives its device buffers back to its
    placement when the batch empties (and those of the capacities it grew through), the next burst
    gets the same buffers for the same shapes, and every bucket replays the graph captured on
    them; the tokens are the first burst's. Without the buffers kept, each burst captured again."""
    texts = random_texts(4, seed=48)
    options = lambda i: DecodeOptions(max_new_tokens=MAX_TARGET_LEN)  # noqa: E731 - rows outgrow 32 tokens
    scheduler = _scheduler(tiny, "cuda-graphs", DevicePlacement("cpu"), max_rows=4, wrap=GraphSession)
    session, buckets, placement = scheduler.runner.decoder, scheduler.runner.buckets, scheduler.cache.placement
    first, _ = _decode(scheduler, tiny, texts, options)
    captured, runs = buckets.captures, len(session.graph_ids)
    assert captured >= 2 and scheduler.cache.growths >= 1, "one layout: nothing to find again"
    assert placement.pooled_bytes > 0 and scheduler.cache.rows == 0
    for _ in range(2):
        again, _ = _decode(scheduler, tiny, texts, options)
        assert again == first
    assert buckets.captures == captured, "a burst like the last one captured its graphs again"
    later = session.graph_ids[runs:]
    assert set(later) - {-1} == set(session.graph_ids[:runs]) - {-1}
    assert not [e for e in session.events if e[0] == "release"]
    assert placement.pooled_bytes <= placement.pool_limit


def test_the_device_buffers_kept_between_bursts_are_bounded(tiny):
    """The placement keeps what the cache released within twice the most it released at once:
    bursts of other shapes (more rows, longer sources) replace the oldest buffers, never add up."""
    placement = DevicePlacement("cpu")
    scheduler = _scheduler(tiny, "cuda-graphs", placement, max_rows=6, wrap=GraphSession)
    options = lambda i: DecodeOptions(max_new_tokens=12)  # noqa: E731
    for n, seed in ((1, 50), (3, 51), (6, 52), (2, 53), (6, 54)):
        _decode(scheduler, tiny, random_texts(n, seed=seed), options)
        assert 0 < placement.pooled_bytes <= placement.pool_limit
    shapes = {key for key, _ in placement._pool}
    assert len({shape[0] for shape, _ in shapes}) >= 2, "one burst's buffers only: nothing was bounded"


def test_a_step_that_runs_a_graph_is_given_the_buffers_capacity_as_its_total(tiny):
    """GroupQueryAttention reads total_sequence_length on the host when its kernels are launched,
    so a replayed graph keeps the total it was captured with (on an H200 the tokens went wrong
    after 16 steps): every step that runs a graph binds the buffers' capacity, the steps without
    one the cache's total, and the tokens are those without graphs."""
    texts = random_texts(9, seed=45)
    expected, _ = _decode(_scheduler(tiny, "off"), tiny, texts, _options(1))
    scheduler = _scheduler(tiny, "cuda-graphs", wrap=GraphSession)
    got, _ = _decode(scheduler, tiny, texts, _options(1))
    assert got == expected
    totals = scheduler.runner.decoder.totals
    graphs = [(total, capacity) for graph, total, capacity, _ in totals if graph >= 0]
    assert graphs and all(total == capacity for total, capacity in graphs)
    assert len({capacity for _, capacity in graphs}) > 1, "the capacity never grew: one capacity tested"
    assert all(total == actual for graph, total, _, actual in totals if graph < 0)


def test_steps_that_keep_their_attention_run_without_a_graph_and_keep_the_same_attention(tiny, caplog):
    texts = random_texts(5, seed=47)
    assert model_spec(tiny.manifest).decoder_io.attention, "the tiny decoder returns its steps' attention"

    def options(i):
        return DecodeOptions(max_new_tokens=10, return_attention=i % 2 == 0)

    def attention(scheduler):
        spec, sinks = model_spec(tiny.manifest), [CollectSink() for _ in texts]
        jobs = [
            Job(tiny.tokenizer.encode(t).ids, options(i), 10, spec.eos_id, s)
            for i, (t, s) in enumerate(zip(texts, sinks))
        ]
        scheduler.run_until_idle(jobs)
        return [
            (s.finished[0].tokens, job.attention.of(s.finished[0].tokens) if job.attention else None)
            for job, s in zip(jobs, sinks)
        ]

    expected = attention(_scheduler(tiny, "off"))
    scheduler = _scheduler(tiny, "cuda-graphs", wrap=lambda decoder, _: GraphSession(decoder))
    with caplog.at_level(logging.INFO, logger="attnserve.server.translation.buckets"):
        got = attention(scheduler)
    for (tokens, weights), (want_tokens, want_weights) in zip(got, expected):
        assert tokens == want_tokens
        if want_weights is None:
            assert weights is None
        else:
            assert weights is not None and weights.shape == want_weights.shape
            np.testing.assert_allclose(weights, want_weights, atol=1e-6)
    assert set(scheduler.runner.decoder.graph_ids) == {-1}  # a row kept its attention at every step
    assert sum("attention output" in r.message for r in caplog.records) == 1


def test_graphs_stop_after_the_capture_limit_and_the_tokens_stay(tiny, monkeypatch, caplog):
    """A batch whose buffers keep being replaced would capture without end: past MAX_CAPTURES the
    steps run without a graph, said once."""
    monkeypatch.setattr("attnserve.server.translation.buckets.MAX_CAPTURES", 2)
    texts = random_texts(9, seed=44)
    expected, _ = _decode(_scheduler(tiny, "off"), tiny, texts, _options(3))
    scheduler = _scheduler(tiny, "cuda-graphs", wrap=lambda decoder, _: GraphSession(decoder))
    with caplog.at_level(logging.INFO, logger="attnserve.server.translation.buckets"):
        got, _ = _decode(scheduler, tiny, texts, _options(3))
    assert got == expected
    ids = scheduler.runner.decoder.graph_ids
    assert scheduler.runner.buckets.captures == 2 and len(set(ids) - {-1}) == 2
    assert ids.count(-1) > 1
    assert sum("graphs were captured already" in r.message for r in caplog.records) == 1
    assert MAX_CAPTURES > 2


def test_a_session_without_graphs_runs_the_buckets_without_and_says_so(tiny, caplog):
    """cuda-graphs on the CPU provider: the buckets still run (no graph id on any run), said once."""
    with caplog.at_level(logging.INFO, logger="attnserve.server.translation.buckets"):
        scheduler = _scheduler(tiny, "cuda-graphs")
    assert scheduler.runner.buckets is not None and not scheduler.runner.buckets.graphs
    assert sum("no CUDA graphs" in r.message for r in caplog.records) == 1
    texts = random_texts(4, seed=45)
    expected, _ = _decode(_scheduler(tiny, "off"), tiny, texts, _options(1))
    got, _ = _decode(scheduler, tiny, texts, _options(1))
    assert got == expected


def test_a_left_padded_decoder_ignores_the_setting(tiny_left_padded):
    scheduler = _scheduler(tiny_left_padded, "on")
    assert scheduler.runner.buckets is None
    texts = random_texts(4, seed=46)
    got, _ = _decode(scheduler, tiny_left_padded, texts, _options(1))
    expected, _ = _decode(_scheduler(tiny_left_padded, "off"), tiny_left_padded, texts, _options(1))
    assert got == expected and np.all([len(t[0]) for t in got])


def test_the_servers_setting_reaches_the_decoder_steps(tiny):
    """A model loaded by the server with --decode-step-buckets on steps at bucket sizes; the CPU
    provider makes no CUDA-graph session (its decoder is the one the reference check ran)."""
    from attnserve.server.runtime.model_loader import load_model
    from attnserve.server.shared.config import Settings

    model = load_model(tiny.path, tiny.manifest, Settings(provider="cpu", decode_step_buckets="cuda-graphs"))
    runner = model.engine._scheduler.runner
    assert runner.buckets is not None and runner.buckets.sizes == step_buckets(64)
    assert not runner.buckets.graphs and runner.buckets._buckets, "the warm-up ran no bucketed step"
