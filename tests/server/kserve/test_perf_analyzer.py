"""Triton's perf_analyzer against a live server: both kinds, concurrency 1..4, no errors.

The binary comes from the tritonclient 2.50.0 wheel (``attnserve.benchmarks.perf_analyzer``,
installed by ``make``); the test is skipped, with the reason, only where it cannot run.
"""

from __future__ import annotations

import base64
import json
import struct

import pytest

from attnserve.benchmarks import perf_analyzer

from .conftest import digit_png

CONCURRENCY = (1, 4)


@pytest.fixture(scope="module")
def binary():
    try:
        return perf_analyzer.check()
    except perf_analyzer.PerfAnalyzerError as exc:
        pytest.skip(f"perf_analyzer cannot run here: {exc}")


def _errors(server, model: str) -> dict[str, float]:
    """Requests of ``model`` that did not end OK, by (method, status), from the server's own metrics."""
    out = {}
    for metric in server.app.metrics.registry.collect():
        for sample in metric.samples:
            labels = sample.labels
            if sample.name == "attnserve_requests_total" and labels.get("model") == model and labels["status"] != "OK":
                out[(labels["method"], labels["status"])] = sample.value
    return out


def _ok(server, model: str, method: str) -> float:
    return server.metric("attnserve_requests_total", model=model, method=method, status="OK")


def _check(rows, server, model: str, method: str, before: float) -> None:
    assert [r.concurrency for r in rows] == list(range(CONCURRENCY[0], CONCURRENCY[1] + 1))
    assert all(r.throughput > 0 and 0 < r.p50_ms <= r.p99_ms for r in rows), rows
    assert _errors(server, model) == {}
    assert _ok(server, model, method) - before >= 4 * 3 * 20  # levels x windows x requests per window


def test_translation_over_decoupled_grpc_streaming(binary, server, tmp_path):
    data = tmp_path / "texts.json"
    texts = ["t5 t9 t17", "t4 t6", "t23 t8 t8 t11 t6 t20", "t12"]
    data.write_text(json.dumps({"data": [{"TEXT": {"content": [t], "shape": [1]}} for t in texts]}))
    before = _ok(server, "reverser", "kserve.ModelStreamInfer")
    rows, output = perf_analyzer.run("reverser", server.address, "grpc", CONCURRENCY, data, streaming=True)
    _check(rows, server, "reverser", "kserve.ModelStreamInfer", before)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_classification(binary, server, tmp_path, protocol):
    # BYTES given as base64 hold the tensor's own layout: a 4-byte length, then the PNG
    images = [struct.pack("<I", len(p)) + p for p in (digit_png(d) for d in (0, 3, 7))]
    steps = [{"IMAGE": {"b64": base64.b64encode(i).decode(), "shape": [1]}} for i in images]
    data = tmp_path / "images.json"
    data.write_text(json.dumps({"data": steps}))
    url = server.address if protocol == "grpc" else server.http_address
    method = "kserve.ModelInfer" if protocol == "grpc" else "kserve.http.ModelInfer"
    before = _ok(server, "digits", method)
    rows, output = perf_analyzer.run("digits", url, protocol, CONCURRENCY, data)
    _check(rows, server, "digits", method, before)


@pytest.fixture(scope="module")
def shm_server(serve, kserve_repo):  # noqa: F811
    with serve(kserve_repo, shared_memory="system") as handle:
        yield handle


def test_translation_through_system_shared_memory(binary, shm_server, tmp_path):
    """perf_analyzer creates and registers its own regions (``--shared-memory system``): each text
    travels in one and the translation comes back in one. (Its shared memory refuses models with
    optional inputs, as the classifiers' IMAGE and PIXELS are.)"""
    data = tmp_path / "texts.json"
    texts = ["t5 t9 t17", "t4 t6", "t23 t8 t8 t11 t6 t20", "t12"]
    data.write_text(json.dumps({"data": [{"TEXT": {"content": [t], "shape": [1]}} for t in texts]}))
    before = _ok(shm_server, "reverser", "kserve.ModelStreamInfer")
    extra = ["--shared-memory", "system", "--output-shared-memory-size", "4096"]
    rows, output = perf_analyzer.run(
        "reverser", shm_server.address, "grpc", CONCURRENCY, data, streaming=True, extra=extra
    )
    _check(rows, shm_server, "reverser", "kserve.ModelStreamInfer", before)
    registered = shm_server.metric(
        "attnserve_requests_total", model="-", method="kserve.SystemSharedMemoryRegister", status="OK"
    )
    assert registered >= 2, output  # an input and an output region at least
