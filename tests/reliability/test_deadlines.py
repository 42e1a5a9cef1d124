"""Deadlines and cancellation storms (issue 8, "Load and overload").

Decoder steps are slowed by a fixed sleep (through the engine's per-step hook) so that a
deadline surely passes while a request is queued or decoding, whatever the machine's load:
the assertions count tokens and rows, never time.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

from .conftest import MAX_TARGET

TIMEOUT = 60.0


def _slow_steps(server, seconds: float) -> None:
    engine = server.app.registry.models["mt"].engine
    metrics_hook = engine.on_step

    def slow(rows: int, generated: int) -> None:
        metrics_hook(rows, generated)
        time.sleep(seconds)

    engine.on_step = slow


def _wait_for(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def _idle(server) -> bool:
    return all(
        server.metric(name, model="mt") == 0
        for name in (
            "attnserve_active_sequences",
            "attnserve_kv_cache_bytes",
            "attnserve_tokens_in_flight",
            "attnserve_queued_items",
        )
    )


def _long(text: str) -> pb.TranslateRequest:
    return pb.TranslateRequest(model="mt", texts=[text], options=pb.DecodingOptions(max_new_tokens=MAX_TARGET))


def _tokens(server) -> float:
    return server.metric("attnserve_tokens_generated_total", model="mt")


@pytest.fixture
def slow_server(serve, full_repo):
    with serve(full_repo, max_active_sequences=1) as server:
        _slow_steps(server, 0.01)  # >= 3 s for a 300-token decode
        yield server


def test_a_deadline_passing_while_decoding_stops_the_work(slow_server, long_source, figures):
    server = slow_server
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.InferenceServiceStub(channel)
        before = _tokens(server)
        with pytest.raises(grpc.RpcError) as err:
            stub.Translate(_long(long_source), timeout=0.5)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert _wait_for(lambda: _idle(server)), "the expired request still holds its row"
        settled = _tokens(server) - before
        time.sleep(0.3)
        assert _tokens(server) - before == settled, "decoding went on after the row was freed"
        assert settled < MAX_TARGET / 2
        figures("tokens decoded for a 300-token request with a 0.5 s deadline", settled)


def test_a_deadline_passing_while_queued_is_never_admitted(slow_server, mt, long_source):
    server = slow_server
    expected = mt.greedy(long_source, 60).tokens
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.InferenceServiceStub(channel)
        before = _tokens(server)
        request = pb.TranslateRequest(
            model="mt", texts=[long_source], options=pb.DecodingOptions(max_new_tokens=60, return_token_ids=True)
        )
        running = stub.TranslateStream(request, timeout=TIMEOUT)  # holds the only row for >= 0.6 s
        first = list(next(running).token_ids)
        with pytest.raises(grpc.RpcError) as err:
            stub.Translate(_long("t5 t17"), timeout=0.2)  # waits for the row, and its deadline passes
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert _wait_for(lambda: server.metric("attnserve_queued_items", model="mt") == 0)
        assert first + [t for chunk in running for t in chunk.token_ids] == expected
        assert _wait_for(lambda: _idle(server))
        assert _tokens(server) - before == len(expected), "the expired request was decoded after all"


def test_a_cancellation_storm_leaks_no_rows_or_cache(serve, full_repo, mt, long_source, figures):
    with serve(full_repo, max_active_sequences=32, max_translation_queue=512) as server:
        _slow_steps(server, 0.002)
        rng = random.Random(0)
        plans = [rng.choice(["cancel", "cancel", "deadline", "close"]) for _ in range(48)]
        cut_after = [rng.randint(1, 5) for _ in plans]
        outcomes: list[str] = []
        lock = threading.Lock()

        def one(i: int) -> None:
            with grpc.insecure_channel(server.address) as channel:
                stub = pb_grpc.InferenceServiceStub(channel)
                plan = plans[i]
                try:
                    if plan == "deadline":
                        stub.Translate(_long(long_source), timeout=0.05 + 0.05 * cut_after[i])
                        result = "finished"
                    else:
                        call = stub.TranslateStream(_long(long_source), timeout=TIMEOUT)
                        for _ in range(cut_after[i]):
                            next(call)
                        if plan == "cancel":
                            call.cancel()
                        result = plan  # "close": the channel closes under the stream
                except grpc.RpcError as exc:
                    result = exc.code().name
            with lock:
                outcomes.append(result)

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(one, range(len(plans))))
        assert _wait_for(lambda: _idle(server), 60), {
            n: server.metric(n, model="mt")
            for n in ("attnserve_active_sequences", "attnserve_kv_cache_bytes", "attnserve_tokens_in_flight")
        }
        generated = _tokens(server)
        assert generated < len(plans) * MAX_TARGET / 2, "cancelled work kept decoding"
        assert set(outcomes) <= {"cancel", "close", "DEADLINE_EXCEEDED", "finished"}, outcomes
        with server.client() as client:
            (result,) = client.translate(["t5 t17 t9"], "mt", max_new_tokens=20, return_token_ids=True)
            assert result.hypotheses[0].token_ids == mt.greedy("t5 t17 t9", 20).tokens
        figures("cancellation storm: requests", len(plans))
        figures("cancellation storm: tokens decoded (of 300 each if nothing stopped)", generated)
