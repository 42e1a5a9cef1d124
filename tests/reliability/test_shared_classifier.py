"""``attnserve-server --workers 2 --shared-classifier``: the workers' classification models run in
one more process, which runs the batches of both workers, merged where they arrive together; its
death stops the set as a worker's does."""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Pipe

import grpc
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
from attnserve.server.entry.session_host import SessionHost, merge_runs
from attnserve.server.shared.config import Settings
from attnserve.server.shared.remote_sessions import Segment
from tests.server.conftest import DIGIT_LABELS, digit_png
from tests.support.server import direct_probs

from .test_workers import BIN, TIMEOUT, Workers

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Unix sockets and /dev/shm")


def _host_pid(server: Workers) -> int:
    for line in server.log:
        if m := re.search(r"shared classifier process \(pid (\d+)\) ready", line):
            return int(m.group(1))
    raise AssertionError("no session host in the log:\n" + "".join(server.log))


def _histogram(server: Workers, name: str) -> dict[str, tuple[float, float]]:
    """Per worker, the count and sum of histogram ``name`` for the digits model (the parent's /metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    out: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (f"{name}_count", f"{name}_sum") and sample.labels.get("model") == "digits":
                out.setdefault(sample.labels["worker"], [0.0, 0.0])[sample.name.endswith("_sum")] = sample.value
    return {w: (c, t) for w, (c, t) in out.items()}


def _classify_many(server: Workers, images: list[bytes], rounds: int) -> list[pb.ClassifyResponse]:
    """Every image ``rounds`` times, 16 at once over 16 connections (both workers)."""
    channels = server.channels()
    stubs = [pb_grpc.InferenceServiceStub(c) for c in channels]

    def one(i: int) -> pb.ClassifyResponse:
        request = pb.ClassifyRequest(model="digits", images=[pb.ImageInput(encoded=images[i % len(images)])], top_k=10)
        return stubs[i % len(stubs)].Classify(request, timeout=TIMEOUT)

    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(one, range(rounds * len(images))))


def test_two_workers_classify_through_one_process_with_the_in_process_numbers(vit_dirs, tmp_path):
    """Both workers answer, every answer is onnxruntime's in process on the same pixels, and the
    model's session is opened once, in the shared process, which ran the workers' batches."""
    repo = tmp_path / "repo"
    shutil.copytree(vit_dirs["digits"], repo / "digits")
    images = [digit_png(d) for d in range(10)]
    expected = direct_probs(vit_dirs["digits"], images)
    server = Workers(repo, "--shared-classifier", "--max-queue-delay-ms", "20")
    try:
        host = _host_pid(server)
        replies = _classify_many(server, images, rounds=8)
        served = server.requests_by_worker("Classify", "digits")
        assert set(served) == {"0", "1"}, served
        # every batch of each worker ran in one of the host's runs, as big as the batch or bigger
        batches, runs = _histogram(server, "attnserve_batch_size"), _histogram(server, "attnserve_shared_run_rows")
        assert set(runs) == {"0", "1"} and runs == {w: (n, runs[w][1]) for w, (n, _) in batches.items()}
        assert all(rows >= batches[w][1] for w, (_, rows) in runs.items())
        for i, reply in enumerate(replies):
            probs = np.zeros(len(DIGIT_LABELS), np.float32)
            for label in reply.results[0].labels:
                probs[label.index] = label.probability
            np.testing.assert_allclose(probs, expected[i % len(images)], atol=1e-5)
        assert server.stop() == 0
    finally:
        server.stop()
    time.sleep(0.5)  # the log reader thread catches up
    log = "".join(server.log)
    assert log.count("session host: model.onnx opened") == 1, log
    runs, batches = map(int, re.search(r"session host stopped after (\d+) runs of (\d+) batches", log).groups())
    assert 2 <= batches <= len(replies) and runs <= batches  # whether two arrived together is timing's
    with pytest.raises(ProcessLookupError):
        os.kill(host, 0)


def _digits_v2(out):
    """Another ``digits`` model (other weights): what a reload brings."""
    import torch

    from attnserve.export.modeldir import write_vit_dir
    from attnserve.models import VisionTransformer, ViTConfig

    torch.manual_seed(7)
    cfg = ViTConfig(image_size=16, patch_size=8, in_channels=1, num_classes=10, dim=16, depth=1, num_heads=2)
    write_vit_dir(
        VisionTransformer(cfg).eval(), out, name="digits", labels=DIGIT_LABELS, preprocessing={"invert": True}
    )


def test_a_reload_opens_the_new_version_in_the_shared_process_and_closes_the_old_with_its_last_worker(
    vit_dirs, tmp_path
):
    """SIGHUP after the model directory was replaced: both workers load the new version, the host
    opens it once and closes the old one once no worker runs it, and the answers are the new
    version's numbers."""
    repo = tmp_path / "repo"
    shutil.copytree(vit_dirs["digits"], repo / "digits")
    _digits_v2(tmp_path / "v2")
    images = [digit_png(d) for d in range(10)]
    before, after = direct_probs(repo / "digits", images), direct_probs(tmp_path / "v2", images)
    assert not np.allclose(before, after, atol=1e-3), "the new version computes the same numbers"
    server = Workers(repo, "--shared-classifier", "--metrics-port", "-1")
    try:
        _classify_many(server, images, rounds=2)
        shutil.rmtree(repo / "digits")
        shutil.copytree(tmp_path / "v2", repo / "digits")
        server.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + TIMEOUT
        while "no worker runs it" not in "".join(server.log) and time.monotonic() < deadline:
            time.sleep(0.1)
        for i, reply in enumerate(_classify_many(server, images, rounds=4)):
            best = reply.results[0].labels[0]
            assert best.index == int(np.argmax(after[i % 10]))
            assert abs(best.probability - float(after[i % 10].max())) < 1e-5
        assert server.stop() == 0
    finally:
        server.stop()
    time.sleep(0.5)
    log = "".join(server.log)
    assert log.count("session host: model.onnx opened") == 2, log
    closed = "session host: model.onnx closed (no worker runs it)"
    assert log.count(closed) == 2, log  # the old version after the reload, the new one as the workers stopped
    assert log.index(closed) < log.index("received SIGTERM"), log


def test_the_shared_process_killed_refuses_as_unavailable_and_stops_the_set(vit_dirs, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(vit_dirs["digits"], repo / "digits")
    server = Workers(repo, "--shared-classifier", "--metrics-port", "-1")
    try:
        os.kill(_host_pid(server), signal.SIGKILL)
        channel = server.channels(1)[0]
        request = pb.ClassifyRequest(model="digits", images=[pb.ImageInput(encoded=digit_png(4))])
        with pytest.raises(grpc.RpcError) as refused:
            pb_grpc.InferenceServiceStub(channel).Classify(request, timeout=TIMEOUT)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value.details()
        assert server.proc.wait(60) == 1
    finally:
        server.stop()
    time.sleep(0.5)
    assert any("shared classifier process exited with code -9" in line for line in server.log), "".join(server.log)


def test_the_setting_without_workers_is_refused_at_start(tmp_path):
    out = subprocess.run(
        [str(BIN / "attnserve-server"), "--model-repo", str(tmp_path), "--shared-classifier"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "shared_classifier" in out.stderr and "--workers 2 or more" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_batches_of_the_same_model_and_shapes_run_as_one_and_each_gets_its_rows(vit_dirs):
    """The host's merge on two workers' messages (pipes standing in for their connections): one
    session run, each batch its own rows, the numbers of each batch run alone; a batch of other
    shapes, or past the row limit, runs on its own."""
    host = SessionHost(Settings(max_batch_size=8))
    path = vit_dirs["digits"] / "model.onnx"
    stamp = path.stat()
    key = (str(path), stamp.st_size, stamp.st_mtime_ns)
    meta = host.open(key, "cpu", 1, os.getpid())
    assert [i.name for i in meta["inputs"]] == ["pixels"]
    rng = np.random.default_rng(0)
    batches = [rng.random((n, 1, 16, 16), np.float32) for n in (3, 4, 2)]
    workers, runs, segments = [], [], []
    for pixels in batches:
        ours, theirs = Pipe()
        segment = Segment(pixels.nbytes)
        np.frombuffer(segment.map, np.float32, pixels.size, 0)[:] = pixels.reshape(-1)
        specs = [("pixels", pixels.dtype.str, pixels.shape, 0)]
        runs += host.handle(theirs, ("run", key, ["logits"], specs, segment.path, segment.size))
        workers.append(ours)
        segments.append(segment)
    groups = merge_runs(runs, host.max_rows)
    assert [[r.rows for r in g] for g in groups] == [[3, 4], [2]]  # 3 + 4 + 2 > 8 rows
    for group in groups:
        host.run(group)
    alone = host.sessions[key]
    for ours, pixels in zip(workers, batches):
        status, (outputs, rows) = ours.recv()
        assert status == "ok" and outputs[0].shape == (len(pixels), len(DIGIT_LABELS))
        np.testing.assert_allclose(outputs[0], alone.run(["logits"], {"pixels": pixels})[0], atol=1e-5)
    assert host.runs == 2 and host.batches == 3
    for segment in segments:
        segment.unlink()
    other = rng.random((1, 1, 8, 8), np.float32)  # another shape: never merged with the others
    assert len(merge_runs([*runs[:1], _run_like(runs[0], other)], 64)) == 2


def _run_like(run, pixels):
    return type(run)(run.conn, run.key, run.outputs, {"pixels": pixels}, len(pixels))


def test_a_segment_leaves_nothing_in_dev_shm_once_unlinked():
    segment = Segment(10)
    path = segment.path
    assert os.path.exists(path) and segment.size >= 10
    segment.unlink()
    assert not os.path.exists(path)
    segment.map[:4] = b"abcd"  # still mapped in this process
    segment.unlink()  # twice: nothing to do


def test_a_remote_session_runs_like_its_own_and_a_graph_the_host_cannot_load_fails_the_load(vit_dirs, tmp_path):
    """RemoteSession over the host's socket: the graph's inputs and outputs, onnxruntime's numbers,
    a batch bigger than its first file (a new one is mapped); a file that is no graph is refused as
    a load failure naming it; the session closes with its last hold; a host gone cannot be reached."""
    from multiprocessing.connection import Listener

    from attnserve.server.shared.errors import ProcessGone
    from attnserve.server.shared.onnx_sessions import ProviderError, create_session
    from attnserve.server.shared.remote_sessions import RemoteSession

    address = str(tmp_path / "host.sock")
    host = SessionHost(Settings(max_batch_size=32))
    listener = Listener(address, family="AF_UNIX", authkey=multiprocessing.current_process().authkey)
    thread = threading.Thread(target=host.serve, args=(listener,), daemon=True)
    thread.start()
    try:
        graph = vit_dirs["digits"] / "model.onnx"
        remote, local = RemoteSession(address, graph, "cpu", 1), create_session(graph, "cpu", 1)
        assert [i.name for i in remote.get_inputs()] == [i.name for i in local.get_inputs()]
        assert remote.get_providers()[0] == "CPUExecutionProvider"
        for n in (1, 3, 400):  # 400 images outgrow the first 1 MiB file
            pixels = np.random.default_rng(n).random((n, 1, 16, 16), np.float32)
            (got,) = remote.run(None, {"pixels": pixels})
            np.testing.assert_allclose(got, local.run(None, {"pixels": pixels})[0], atol=1e-5)
            staged = remote.staging(pixels.shape)  # a batch assembled in the mapped file, as the classifier does
            staged[:] = pixels[::-1]
            (got,) = remote.run(None, {"pixels": staged})
            np.testing.assert_allclose(got, local.run(None, {"pixels": pixels[::-1].copy()})[0], atol=1e-5)
        # a model reloaded with the same graph (its labels changed): two holds on one session, and
        # the old version's close leaves the new one running
        again = RemoteSession(address, graph, "cpu", 1)
        assert again.key == remote.key and len(host.sessions) == 1
        remote.close()
        np.testing.assert_allclose(
            again.run(None, {"pixels": pixels})[0], local.run(None, {"pixels": pixels})[0], atol=1e-5
        )
        again.close()
        assert host.sessions == {}, "the last hold closed and the session stayed open"
        bad = tmp_path / "model.onnx"
        bad.write_bytes(b"not a graph")
        with pytest.raises(ProviderError, match="model.onnx"):
            RemoteSession(address, bad, "cpu", 1)
    finally:
        host.stopping = True
        thread.join(5)
        listener.close()
    for conn in list(host.maps):
        host.drop(conn)
    with pytest.raises(ProcessGone):  # a run: UNAVAILABLE
        remote.run(None, {"pixels": np.zeros((1, 1, 16, 16), np.float32)})
    with pytest.raises(ProviderError, match="cannot be reached"):  # a load: a load failure
        RemoteSession(address, graph, "cpu", 1)
    assert not [p for p in os.listdir("/dev/shm") if p.startswith(f"attnserve-{os.getpid()}-")]


def _sleep_until_terminated() -> None:
    time.sleep(120)


def test_a_session_host_dead_before_the_parent_waits_still_stops_the_set():
    """The host may die between its start-up and the parent's wait for the set (a kill right after
    start-up): the parent still sees it, stops the workers and reports the failure, promptly."""
    from types import SimpleNamespace

    from attnserve.server.entry.workers import Workers as Parent

    ctx = multiprocessing.get_context("spawn")
    host, worker = ctx.Process(target=int), ctx.Process(target=_sleep_until_terminated)
    host.start()
    host.join(30)
    assert not host.is_alive()
    worker.start()
    parent = Parent(Settings(workers=2, grace_seconds=1.0))
    parent.procs, parent.host = [worker], SimpleNamespace(proc=host)
    started = time.monotonic()
    try:
        assert parent.wait_all() == 1
    finally:
        worker.kill()
    assert time.monotonic() - started < 30 and not worker.is_alive()
