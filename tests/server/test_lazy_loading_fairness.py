"""Lazy loading under a budget of one model: a model whose load fails costs the healthy resident
model nothing, and steady traffic to the resident model cannot keep another model's load waiting
forever. The repository: the bundled translator under a few names (``pair_repo``)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from attnserve.benchmarks.many_pairs import pair_repo
from attnserve.client import AttnServeError
from attnserve.server.shared.locations import bundled_model_repo

TEXT = "Monday, March 3, 2025 at 3:45 PM"
JSON = {"Content-Type": "application/json"}
ONE = dict(max_loaded_models=1, max_tokens_in_flight=2048, min_resident_seconds=0)


@pytest.fixture
def repo(tmp_path) -> Path:
    base = bundled_model_repo()
    if base is None:
        pytest.skip("the bundled models are not installed")
    root = tmp_path / "repo"
    pair_repo(base / "translator-en-de", root, (("en", "de"), ("de", "en"), ("fr", "en"), ("es", "en")))
    return root


def _corrupt(path: Path) -> None:
    """``path`` (a link into the shared model) replaced by a file of the same size, its end zeroed."""
    data = bytearray(path.resolve().read_bytes())
    data[-100:] = bytes(100)
    path.unlink()
    path.write_bytes(bytes(data))


def _loads(server, name: str, outcome: str = "ok") -> float:
    return server.metric("attnserve_model_loads_total", model=name, outcome=outcome)


def _refused(client, source: str, target: str) -> str:
    with pytest.raises(AttnServeError) as refused:
        client.translate([TEXT], source_language=source, target_language=target)
    assert refused.value.code == grpc.StatusCode.UNAVAILABLE
    return refused.value.details


def test_a_model_with_broken_files_evicts_nothing_and_loads_once_they_are_fixed(serve, repo):
    decoder = repo / "mt-de-en" / "decoder.onnx"
    good = decoder.resolve()
    with serve(repo, **ONE, model_load_retry_seconds=0.2, http_port=0) as server, server.client() as client:
        assert client.translate([TEXT], source_language="en", target_language="de")[0].text
        _corrupt(decoder)  # the same size: the index took it; its sha256 does not match model.json
        (repo / "mt-fr-en" / "model.json").write_text("{not json")
        for _ in range(3):  # clients retrying, past the backoff too
            assert "decoder.onnx" in _refused(client, "de", "en")
            assert "model.json" in _refused(client, "fr", "en")
            assert list(server.app.registry.models) == ["mt-en-de"]  # the healthy model stays
            time.sleep(0.25)
        assert server.metric("attnserve_model_evictions_total", model="mt-en-de") == 0
        assert _loads(server, "mt-en-de") == 1  # its clients never paid a reload
        body = json.dumps({"q": TEXT, "source": "de", "target": "en"}).encode()
        request = urllib.request.Request(f"http://{server.http_address}/translate", body, JSON)
        with pytest.raises(urllib.error.HTTPError) as http_refused:
            urllib.request.urlopen(request, timeout=10)
        assert http_refused.value.code == 503 and "decoder.onnx" in http_refused.value.read().decode()
        listed = {m.name: m for m in client.list_models()}
        assert not listed["mt-de-en"].ready and "sha256" in listed["mt-de-en"].error
        assert listed["mt-en-de"].ready and listed["mt-en-de"].loaded
        decoder.unlink()
        decoder.symlink_to(good)  # fixed: its next request loads it, without a reload
        assert client.translate([TEXT], source_language="de", target_language="en")[0].text


def test_a_model_that_fails_only_when_loaded_is_refused_without_evicting_until_its_files_change(serve, repo):
    broken = repo / "mt-es-en"
    decoder = broken / "decoder.onnx"
    good = decoder.resolve()
    decoder.unlink()
    decoder.write_bytes(b"not an onnx graph" * 100)  # listed with its true sha256: only onnxruntime refuses it
    manifest = json.loads((broken / "model.json").read_text())
    manifest["files"]["decoder.onnx"] = {"sha256": hashlib.sha256(decoder.read_bytes()).hexdigest(), "bytes": 1700}
    (broken / "model.json").write_text(json.dumps(manifest))
    with serve(repo, **ONE, model_load_retry_seconds=0.2) as server, server.client() as client:
        assert client.translate([TEXT], source_language="en", target_language="de")[0].text
        assert "decoder.onnx" in _refused(client, "es", "en")  # seen only by loading it: en-de made room
        assert client.translate([TEXT], source_language="en", target_language="de")[0].text
        assert _loads(server, "mt-en-de") == 2
        for _ in range(3):  # its files unchanged: refused at once with the reason, past the backoff too
            time.sleep(0.25)
            assert "decoder.onnx" in _refused(client, "es", "en")
            assert list(server.app.registry.models) == ["mt-en-de"]
        assert _loads(server, "mt-es-en", "failed") == 1 and _loads(server, "mt-en-de") == 2
        decoder.unlink()
        decoder.symlink_to(good)
        manifest["files"]["decoder.onnx"] = {"sha256": hashlib.sha256(good.read_bytes()).hexdigest()}
        manifest["files"]["decoder.onnx"]["bytes"] = good.stat().st_size
        (broken / "model.json").write_text(json.dumps(manifest))  # fixed in place: tried again at once
        assert client.translate([TEXT], source_language="es", target_language="en")[0].text


def test_steady_traffic_to_the_resident_model_cannot_keep_another_models_load_waiting(serve, repo):
    with serve(repo, **dict(ONE, min_resident_seconds=0.5)) as server, server.client() as client:
        assert client.translate([TEXT], source_language="en", target_language="de")[0].text
        stop = threading.Event()
        errors: list[Exception] = []

        def steady() -> int:  # requests overlapping back to back: en-de is never idle
            served = 0
            while not stop.is_set():
                try:
                    client.translate([TEXT], source_language="en", target_language="de", timeout=30)
                    served += 1
                except AttnServeError as exc:
                    errors.append(exc)
            return served

        with ThreadPoolExecutor(2) as pool:
            traffic = [pool.submit(steady) for _ in range(2)]
            try:
                time.sleep(0.3)
                started = time.monotonic()
                assert client.translate([TEXT], source_language="de", target_language="en", timeout=8)[0].text
                waited = time.monotonic() - started
                time.sleep(1.5)  # en-de's clients, waiting meanwhile, get their model back in turn
            finally:
                stop.set()
            served = [t.result(30) for t in traffic]
        assert waited < 5, f"de-en waited {waited:.1f} s"
        assert not errors and all(served)  # en-de's requests waited for their turn, none failed
        assert _loads(server, "mt-en-de") >= 2 and _loads(server, "mt-de-en") == 1


def test_a_request_for_a_model_waiting_its_turn_gets_deadline_exceeded_at_its_deadline(serve, repo):
    with serve(repo, **dict(ONE, min_resident_seconds=0.3)) as server, server.client() as client:
        registry, lt = server.app.registry, server.loop_thread
        held, release = threading.Event(), threading.Event()

        async def hold() -> None:  # a long request in flight on en-de
            async with registry.use("mt-en-de", None):
                held.set()
                while not release.is_set():
                    await asyncio.sleep(0.01)

        holder = asyncio.run_coroutine_threadsafe(hold(), lt.loop)
        assert held.wait(30)
        try:
            with ThreadPoolExecutor(1) as pool:
                waiting = pool.submit(client.translate, [TEXT], source_language="de", target_language="en", timeout=30)
                deadline = time.monotonic() + 5
                while "mt-en-de" in registry.models and time.monotonic() < deadline:
                    time.sleep(0.02)  # de-en waited its grace: en-de takes no new request
                assert "mt-en-de" not in registry.models
                started = time.monotonic()
                with pytest.raises(AttnServeError) as late:  # waits behind de-en's load, within its deadline
                    client.translate([TEXT], source_language="en", target_language="de", timeout=0.5)
                assert late.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
                assert time.monotonic() - started < 3
                release.set()  # en-de's last request finishes: it is unloaded, de-en loads
                assert waiting.result(30)[0].text
        finally:
            release.set()
        holder.result(10)
        assert list(registry.models) == ["mt-de-en"]
        assert client.translate([TEXT], source_language="en", target_language="de")[0].text  # its turn again
