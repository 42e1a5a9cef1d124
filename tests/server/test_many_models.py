"""Many language pairs on one server (issue 36): a repository indexed at start and its models
loaded on first use within a memory budget, and pairs without a model through a pivot language.

The repository: the bundled translator-en-de under 24 names, each model.json with its own pair
(English to and from 12 languages; ``attnserve.benchmarks.many_pairs.pair_repo``), so fr -> de
has no model of its own and goes fr -> en -> de.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from attnserve.benchmarks.many_pairs import PAIRS, pair_repo
from attnserve.client import AttnServeError
from attnserve.contract.deadline import Deadline
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
from attnserve.server.entry.app import create_server
from attnserve.server.runtime.registry import RepositoryError
from attnserve.server.shared.calls import LOAD_MS_KEY
from attnserve.server.shared.locations import bundled_model_repo
from tests.support.server import ServerProcess, resident_bytes

from .conftest import settings_for

TEXT = "Monday, March 3, 2025 at 3:45 PM"
HTML = "<p>On <b>Monday, March 3, 2025</b> at 3:45 PM.</p>\n<p>More than 1,500 miles.</p>"
# min_resident_seconds 0: the tests of loading and unloading as such switch models at once (its own test below)
BUDGET = dict(max_loaded_models=4, max_tokens_in_flight=2048, min_resident_seconds=0)


@pytest.fixture(scope="module")
def pairs_repo(tmp_path_factory) -> Path:
    base = bundled_model_repo()
    if base is None:
        pytest.skip("the bundled models are not installed")
    root = tmp_path_factory.mktemp("pairs") / "repo"
    pair_repo(base / "translator-en-de", root)
    return root


def _loads(server) -> float:
    return sum(server.metric("attnserve_model_loads_total", model=f"mt-{s}-{t}", outcome="ok") for s, t in PAIRS)


def test_a_repository_of_24_models_is_indexed_at_start_with_no_weights_loaded(serve, pairs_repo):
    started = time.perf_counter()
    with serve(pairs_repo, **BUDGET) as server:
        print(f"24-model repository: serving after {time.perf_counter() - started:.2f} s")  # reported, not asserted
        assert server.app.registry.models == {}
        assert len(server.app.registry.index) == 24
        assert _loads(server) == 0
        with server.client() as client:
            models = client.list_models()
            assert len(models) == 24 and all(m.ready and not m.loaded for m in models)
            (result,) = client.translate([TEXT], source_language="en", target_language="de")
            assert result.text
            assert [m.name for m in client.list_models() if m.loaded] == ["mt-en-de"]


def test_every_pair_round_robin_within_4_models_answers_what_a_server_loading_all_answers(serve, pairs_repo):
    expected = {}
    with serve(pairs_repo, load_models="eager", max_tokens_in_flight=2048) as eager:
        assert len(eager.app.registry.models) == 24
        with eager.client() as client:
            for s, t in PAIRS:
                expected[s, t] = client.translate([TEXT, HTML], source_language=s, target_language=t, format="html")
    with serve(pairs_repo, **BUDGET) as lazy, lazy.client() as client:
        for _ in range(2):
            for s, t in PAIRS:
                got = client.translate([TEXT, HTML], source_language=s, target_language=t, format="html")
                assert [r.text for r in got] == [r.text for r in expected[s, t]]
                assert len(lazy.app.registry.models) <= 4
        assert _loads(lazy) == 48  # every pair loaded once per round: 4 models never hold 24 pairs
        evictions = sum(lazy.metric("attnserve_model_evictions_total", model=f"mt-{s}-{t}") for s, t in PAIRS)
        assert evictions == 48 - len(lazy.app.registry.models)


def test_concurrent_requests_for_a_cold_model_share_one_load_and_hear_its_time(serve, pairs_repo):
    with serve(pairs_repo, **BUDGET) as server:
        channel = grpc.insecure_channel(server.address)
        stub = pb_grpc.InferenceServiceStub(channel)
        request = pb.TranslateRequest(
            texts=[TEXT], options=pb.DecodingOptions(source_language="fr", target_language="en")
        )
        with ThreadPoolExecutor(8) as pool:
            calls = list(pool.map(lambda _: stub.Translate.with_call(request, timeout=30), range(8)))
        assert server.metric("attnserve_model_loads_total", model="mt-fr-en", outcome="ok") == 1
        waited = [dict(call.trailing_metadata()).get(LOAD_MS_KEY) for _, call in calls]
        assert all(w is not None and float(w) > 0 for w in waited)  # each waited for the one load
        reply, call = stub.Translate.with_call(request, timeout=30)  # loaded now: no wait to report
        assert LOAD_MS_KEY not in dict(call.trailing_metadata())
        assert server.metric("attnserve_model_load_seconds_count", model="mt-fr-en") == 1
        assert server.metric("attnserve_loaded_model_bytes", model="mt-fr-en") > 16_000_000
        channel.close()


def test_a_model_in_use_is_never_unloaded_and_a_request_waits_for_room_within_its_deadline(serve, pairs_repo):
    # a load that has waited --min-resident-seconds drains the model in its way (test_lazy_loading_fairness.py):
    # 2 s, past the first request's deadline
    with serve(pairs_repo, max_loaded_models=1, max_tokens_in_flight=2048, min_resident_seconds=2) as server:
        registry, lt = server.app.registry, server.loop_thread
        held = asyncio.Event()
        release = asyncio.Event()

        async def hold() -> None:
            async with registry.use("mt-en-de", None, Deadline.from_timeout(30, "test")):
                held.set()
                await release.wait()

        holder = asyncio.run_coroutine_threadsafe(hold(), lt.loop)
        lt.run(asyncio.wait_for(held.wait(), 30))
        with server.client() as client:
            with pytest.raises(AttnServeError) as refused:
                client.translate([TEXT], source_language="de", target_language="en", timeout=1.0)
            assert refused.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            assert list(registry.models) == ["mt-en-de"]  # still loaded: a request holds it
            with ThreadPoolExecutor(1) as pool:
                waiting = pool.submit(client.translate, [TEXT], source_language="de", target_language="en", timeout=30)
                time.sleep(0.5)
                assert not waiting.done()  # waits for room rather than fails
                lt.loop.call_soon_threadsafe(release.set)
                assert waiting.result(30)[0].text
            holder.result(10)
            assert list(registry.models) == ["mt-de-en"]


def test_a_rotation_over_more_models_than_the_budget_cannot_evict_a_model_in_steady_use(serve, pairs_repo):
    # one client rotating among more pairs than --max-loaded-models made every request of the
    # others pay a load (p50 40 ms -> 1.1 s): a model used less than --min-resident-seconds ago stays
    with serve(pairs_repo, max_loaded_models=2, max_tokens_in_flight=2048, min_resident_seconds=2.0) as server:
        registry = server.app.registry
        channel = grpc.insecure_channel(server.address)
        stub = pb_grpc.InferenceServiceStub(channel)

        def translate(source: str, target: str, timeout: float):
            options = pb.DecodingOptions(source_language=source, target_language=target)
            return stub.Translate.with_call(pb.TranslateRequest(texts=[TEXT], options=options), timeout=timeout)

        translate("en", "de", 30)  # the other client's model
        translate("fr", "en", 30)  # the rotation's first: room for it
        with pytest.raises(grpc.RpcError) as refused:  # both used just now: no room within half a second
            translate("es", "en", 0.5)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "--min-resident-seconds" in refused.value.details() and "room is made in" in refused.value.details()
        with ThreadPoolExecutor(1) as pool:
            rotation = pool.submit(translate, "es", "en", 30)  # waits for room rather than evicts
            while not rotation.done():  # the other client keeps using its model, never paying a load
                _, call = translate("en", "de", 30)
                assert LOAD_MS_KEY not in dict(call.trailing_metadata())
                time.sleep(0.1)
            rotation.result()
        assert sorted(registry.models) == ["mt-en-de", "mt-es-en"]  # fr-en, unused for 2 s, made the room
        assert server.metric("attnserve_model_loads_total", model="mt-en-de", outcome="ok") == 1
        channel.close()


def test_pinned_models_load_at_start_and_stay(serve, pairs_repo):
    pinned = dict(pinned_models="mt-en-de", max_tokens_in_flight=2048, min_resident_seconds=0)
    with serve(pairs_repo, max_loaded_models=2, **pinned) as server:
        assert list(server.app.registry.models) == ["mt-en-de"]
        with server.client() as client:
            for s, t in PAIRS[:6]:
                client.translate([TEXT], source_language=s, target_language=t)
        assert "mt-en-de" in server.app.registry.models and len(server.app.registry.models) == 2


def test_a_budget_too_small_for_the_largest_model_is_refused_at_start(loop_thread, pairs_repo):
    settings = settings_for(pairs_repo, model_memory_bytes=10_000_000)
    with pytest.raises(RepositoryError, match=r"model_memory_bytes 10,000,000 cannot hold model mt-\w\w-\w\w"):
        loop_thread.run(create_server("127.0.0.1:0", settings))
    with pytest.raises(RepositoryError, match="pinned_models: no servable model named nope"):
        loop_thread.run(
            create_server("127.0.0.1:0", settings_for(pairs_repo, max_loaded_models=2, pinned_models="nope"))
        )


def test_a_model_that_fails_to_load_is_unavailable_with_its_reason_and_retried_after_a_backoff(
    serve, pairs_repo, tmp_path
):
    repo = tmp_path / "repo"
    shutil.copytree(pairs_repo, repo, symlinks=True)
    broken = repo / "mt-fr-en" / "encoder.onnx"
    good = broken.resolve()
    _corrupt(broken)  # the same size: indexed fine; its sha256 fails at load
    settings = dict(BUDGET, model_load_retry_seconds=0.5, model_load_attempts=2, http_port=0)
    with serve(repo, **settings) as server, server.client() as client:
        for _ in range(3):  # the first load fails; the next requests within the backoff do not load again
            with pytest.raises(AttnServeError) as failed:
                client.translate([TEXT], source_language="fr", target_language="en")
            assert failed.value.code == grpc.StatusCode.UNAVAILABLE
            assert "mt-fr-en/encoder.onnx" in failed.value.details and "sha256" in failed.value.details
        assert server.metric("attnserve_model_loads_total", model="mt-fr-en", outcome="failed") == 1
        body = json.dumps({"q": TEXT, "source": "fr", "target": "en"}).encode()
        request = urllib.request.Request(
            f"http://{server.http_address}/translate", body, {"Content-Type": "application/json"}
        )
        with pytest.raises(urllib.error.HTTPError) as http_failed:
            urllib.request.urlopen(request, timeout=10)
        assert http_failed.value.code == 503 and "could not be loaded" in http_failed.value.read().decode()
        assert client.translate([TEXT], source_language="en", target_language="de")[0].text  # the others serve
        index = _index(server)
        assert index["mt-fr-en"][0] == "UNAVAILABLE" and "sha256" in index["mt-fr-en"][1]
        assert str(tmp_path) not in index["mt-fr-en"][1]  # the repository's path is the operator's
        listed = {m.name: m for m in client.list_models()}  # attnserve-client models says as much
        assert not listed["mt-fr-en"].ready and "mt-fr-en/encoder.onnx" in listed["mt-fr-en"].error
        assert str(tmp_path) not in listed["mt-fr-en"].error and listed["mt-de-en"].ready
        assert index["mt-en-de"] == ("READY", "") and index["mt-de-en"][0] == "UNAVAILABLE"
        with pytest.raises(urllib.error.HTTPError) as not_ready:
            urllib.request.urlopen(f"http://{server.http_address}/v2/models/mt-fr-en/ready", timeout=10)
        assert not_ready.value.code == 400 and "could not be loaded" in not_ready.value.read().decode()
        assert client.health("mt-fr-en") == "NOT_SERVING" and client.health("mt-de-en") == "SERVING"
        time.sleep(0.6)  # the backoff passes: the next request tries again (and fails again)
        with pytest.raises(AttnServeError):
            client.translate([TEXT], source_language="fr", target_language="en")
        assert server.metric("attnserve_model_loads_total", model="mt-fr-en", outcome="failed") == 2
        time.sleep(1.1)  # the doubled backoff passes too, but --model-load-attempts 2 are spent: no third load
        with pytest.raises(AttnServeError) as spent:
            client.translate([TEXT], source_language="fr", target_language="en")
        assert "2 attempts" in spent.value.details and "reload" in spent.value.details
        assert server.metric("attnserve_model_loads_total", model="mt-fr-en", outcome="failed") == 2
        broken.unlink()
        broken.symlink_to(good)  # fixed; a hot reload indexes it again and forgets the failures
        server.loop_thread.run(server.app.reload(["mt-fr-en"]))
        assert client.translate([TEXT], source_language="fr", target_language="en")[0].text
        assert client.health("mt-fr-en") == "SERVING"


def test_a_model_whose_files_are_fixed_after_its_load_failed_reads_ready_before_a_request(serve, pairs_repo, tmp_path):
    """Readiness probes see the operator's fix: they check a failed model's files again (their
    stamps, without loading it), so no translation request is needed to bring it back."""
    repo = tmp_path / "repo"
    shutil.copytree(pairs_repo, repo, symlinks=True)
    broken = repo / "mt-fr-en" / "encoder.onnx"
    good = broken.resolve()
    _corrupt(broken)
    ready_url = "http://{}/v2/models/mt-fr-en/ready"
    with serve(repo, **BUDGET, http_port=0) as server, server.client() as client:
        with pytest.raises(AttnServeError):
            client.translate([TEXT], source_language="fr", target_language="en")
        assert client.health("mt-fr-en") == "NOT_SERVING"
        assert not {m.name: m for m in client.list_models()}["mt-fr-en"].ready
        broken.unlink()
        broken.symlink_to(good)  # fixed in place: no reload, no request
        assert urllib.request.urlopen(ready_url.format(server.http_address), timeout=10).status == 200
        assert client.health("mt-fr-en") == "SERVING"
        listed = {m.name: m for m in client.list_models()}["mt-fr-en"]
        assert listed.ready and not listed.error
        assert _index(server)["mt-fr-en"] == ("UNAVAILABLE", "not loaded: loads on its first request")
        assert server.metric("attnserve_model_loads_total", model="mt-fr-en", outcome="ok") == 0  # probes load nothing
        assert client.translate([TEXT], source_language="fr", target_language="en")[0].text
        assert server.metric("attnserve_model_loads_total", model="mt-fr-en", outcome="failed") == 1


def _corrupt(path: Path) -> None:
    """``path`` (a link into the shared model) replaced by a file of the same size, its end zeroed."""
    data = bytearray(path.resolve().read_bytes())
    data[-100:] = bytes(100)
    path.unlink()
    path.write_bytes(bytes(data))


def test_a_model_changed_on_disk_while_unloaded_is_checked_again_when_it_comes_back(serve, pairs_repo, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(pairs_repo, repo, symlinks=True)
    with (
        serve(repo, max_loaded_models=1, max_tokens_in_flight=2048, min_resident_seconds=0) as server,
        server.client() as client,
    ):
        assert client.translate([TEXT], source_language="en", target_language="de")[0].text
        assert client.translate([TEXT], source_language="de", target_language="en")[0].text  # en-de unloaded
        assert list(server.app.registry.models) == ["mt-de-en"]
        _corrupt(repo / "mt-en-de" / "decoder.onnx")
        with pytest.raises(AttnServeError) as failed:
            client.translate([TEXT], source_language="en", target_language="de")
        assert failed.value.code == grpc.StatusCode.UNAVAILABLE and "decoder.onnx.sha256" in failed.value.details


def test_a_hot_reload_of_a_lazily_served_repository(serve, pairs_repo, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(pairs_repo, repo, symlinks=True)
    with serve(repo, **BUDGET) as server, server.client() as client:
        before = client.translate([TEXT], source_language="en", target_language="de")[0].text
        manifest = json.loads((repo / "mt-en-de" / "model.json").read_text())
        (repo / "mt-en-de" / "model.json").write_text(json.dumps({**manifest, "extra": {"task": "v2"}}))
        fr_en = json.loads((repo / "mt-fr-en" / "model.json").read_text())
        fr_en["languages"] = {**fr_en["languages"], "source": ["it"], "default_source": "it", "target": ["de"]}
        fr_en["languages"]["default_target"] = "de"
        (repo / "mt-fr-en" / "model.json").write_text(json.dumps(fr_en))
        outcomes = {o.name: o.action for o in server.loop_thread.run(server.app.reload())}
        assert outcomes["mt-en-de"] == "reloaded" and outcomes["mt-fr-en"] == "reloaded"
        assert outcomes["mt-de-en"] == "unchanged"
        assert server.app.registry.models["mt-en-de"].manifest.extra == {"task": "v2"}  # loaded: swapped in
        assert "mt-fr-en" not in server.app.registry.models  # not loaded: indexed again, loads on use
        assert client.translate([TEXT], source_language="en", target_language="de")[0].text == before
        (direct,) = client.translate([TEXT], source_language="it", target_language="de")
        assert direct.pivot_language == ""  # the new pair routes to the re-indexed model
        assert [m.name for m in client.list_models() if m.loaded] == ["mt-en-de", "mt-fr-en"]


def _post(server, path: str, body: dict | None = None) -> dict | list:
    data = json.dumps(body or {}).encode()
    request = urllib.request.Request(f"http://{server.http_address}{path}", data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read() or b"{}")


def _index(server) -> dict[str, tuple[str, str]]:
    """KServe's repository index (Triton's REST: POST /v2/repository/index)."""
    return {m["name"]: (m["state"], m["reason"]) for m in _post(server, "/v2/repository/index")}


def test_the_repository_api_loads_and_unloads_lazily_served_models(serve, pairs_repo):
    with serve(pairs_repo, **BUDGET, enable_admin=True, http_port=0) as server:
        index = _index(server)
        assert len(index) == 24 and {state for state, _ in index.values()} == {"UNAVAILABLE"}
        assert index["mt-en-de"][1] == "not loaded: loads on its first request"
        _post(server, "/v2/repository/models/mt-en-de/load")
        assert _index(server)["mt-en-de"] == ("READY", "")
        _post(server, "/v2/repository/models/mt-en-de/unload")
        assert "mt-en-de" not in server.app.registry.models
        assert _index(server)["mt-en-de"] == ("UNAVAILABLE", "unloaded")
        with server.client() as client, pytest.raises(AttnServeError) as gone:
            client.translate([TEXT], "mt-en-de")
        assert gone.value.code == grpc.StatusCode.NOT_FOUND  # unloaded on purpose: not loaded on demand
        _post(server, "/v2/repository/models/mt-en-de/load")
        assert _index(server)["mt-en-de"] == ("READY", "")
        ready = urllib.request.urlopen(f"http://{server.http_address}/v2/models/mt-de-en/ready", timeout=10)
        assert ready.status == 200  # not loaded, yet served: a request loads it


def test_fr_to_de_through_english_equals_the_two_models_by_hand_on_html(serve, pairs_repo):
    with serve(pairs_repo, **BUDGET, http_port=0) as server, server.client() as client:
        by_hand_en = client.translate([HTML], "mt-fr-en", format="html")[0].text
        by_hand = client.translate([by_hand_en], "mt-en-de", format="html")[0].text
        (pivoted,) = client.translate([HTML], source_language="fr", target_language="de", format="html")
        assert pivoted.text == by_hand and pivoted.pivot_language == "en"
        assert pivoted.text.count("<p>") == 2 and "<b>" in pivoted.text  # the markup went through both legs
        (direct,) = client.translate([HTML], source_language="en", target_language="de", format="html")
        assert direct.pivot_language == ""
        chunks = list(client.translate_stream(HTML, source_language="fr", target_language="de", format="html"))
        assert "".join(c.delta for c in chunks) == by_hand
        assert chunks[-1].pivot_language == "en" and all(c.pivot_language == "" for c in chunks[:-1])  # named once
        direct_chunks = list(client.translate_stream(HTML, source_language="en", target_language="de", format="html"))
        assert direct_chunks[-1].finish_reason and direct_chunks[-1].pivot_language == ""
        pairs = {(p.source, p.target): p for p in client.language_pairs()}
        assert pairs["fr", "de"].models == ["mt-fr-en", "mt-en-de"] and pairs["fr", "de"].pivot_language == "en"
        assert pairs["en", "de"].models == ["mt-en-de"] and pairs["en", "de"].pivot_language == ""
        assert len(pairs) == 24 + 12 * 11  # every X -> Y through English
        body = json.dumps({"q": HTML, "source": "fr", "target": "de", "format": "html"}).encode()
        request = urllib.request.Request(
            f"http://{server.http_address}/translate", body, {"Content-Type": "application/json"}
        )
        reply = json.loads(urllib.request.urlopen(request, timeout=30).read())
        assert reply == {"translatedText": by_hand, "pivot": "en"}
        languages = json.loads(urllib.request.urlopen(f"http://{server.http_address}/languages", timeout=10).read())
        fr = next(lang for lang in languages if lang["code"] == "fr")
        assert "de" in fr["targets"] and "en" in fr["targets"] and "fr" not in fr["targets"]


def test_a_glossary_holds_through_a_pivot(serve, pairs_repo):
    """Leg 1 keeps each source term as it is; leg 2 writes the target term in its place."""
    with serve(pairs_repo, **BUDGET) as server, server.client() as client:
        (plain,) = client.translate([TEXT], source_language="fr", target_language="de")
        (termed,) = client.translate(
            [TEXT], source_language="fr", target_language="de", glossary={"March": "MÄRZ"}, keep=["Monday"]
        )
    assert termed.pivot_language == "en"
    assert "MÄRZ" not in plain.text and "Monday" not in plain.text, plain.text
    assert "MÄRZ" in termed.text and "Monday" in termed.text, termed.text


def test_no_pivot_language_no_pivot(serve, pairs_repo):
    with serve(pairs_repo, **BUDGET, pivot_language="") as server, server.client() as client:
        with pytest.raises(AttnServeError) as refused:
            client.translate([TEXT], source_language="fr", target_language="de")
        assert (
            refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
            and "no model serves fr -> de" in refused.value.details
        )


@pytest.mark.integration
def test_a_lazy_server_process_stays_within_its_budget_of_memory(pairs_repo):
    """RSS: 24 pairs round robin under a budget of 4 models against a process that loads all 24."""
    peaks = {}
    for label, flags in (("eager", ["--load-models", "eager"]), ("lazy", ["--max-loaded-models", "4"])):
        server = ServerProcess(pairs_repo, "--metrics-port", "-1", "--max-tokens-in-flight", "2048", *flags)
        try:
            from attnserve.client import Client

            with Client(server.address, timeout=60, retries=0) as client:
                for s, t in PAIRS:
                    client.translate([TEXT], source_language=s, target_language=t)
            peaks[label] = resident_bytes(server.proc.pid)[1]
        finally:
            server.stop()
    print({k: f"{v / 2**20:.0f} MiB" for k, v in peaks.items()})
    assert peaks["lazy"] < 0.5 * peaks["eager"]
