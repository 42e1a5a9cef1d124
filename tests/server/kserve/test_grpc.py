"""Triton's own gRPC client (tritonclient.grpc) against a live server: KServe v2 on the gRPC port.

Readiness, metadata and config as perf_analyzer reads them, inference for both kinds,
the classification extension, decoupled streaming, parameters, errors with attnserve.v1's
statuses and messages, deadlines, metrics and statistics.
"""

from __future__ import annotations

import queue
import threading
import time

import grpc
import numpy as np
import pytest

from attnserve.client import Client

from ..conftest import direct_probs
from .conftest import DIGIT_LABELS, MAX_TARGET, reverse

tritonclient_grpc = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

TEXTS = ["t5 t9 t17", "t4", "t23 t8 t8 t11 t6 t20", "t12 t13"]


@pytest.fixture(scope="module")
def triton(server):
    client = tritonclient_grpc.InferenceServerClient(server.address)
    yield client
    client.close()


def text_input(texts: list[str], shape: list[int] | None = None):
    tensor = tritonclient_grpc.InferInput("TEXT", shape or [len(texts)], "BYTES")
    tensor.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=object).reshape(shape or [len(texts)]))
    return tensor


def image_input(images: list[bytes]):
    tensor = tritonclient_grpc.InferInput("IMAGE", [len(images)], "BYTES")
    tensor.set_data_from_numpy(np.array(images, dtype=object))
    return tensor


def decoded(array: np.ndarray) -> list:
    return [x.decode() for x in array.reshape(-1)]


def test_health_and_server_metadata(triton):
    assert triton.is_server_live() and triton.is_server_ready()
    assert triton.is_model_ready("reverser") and triton.is_model_ready("digits", "1")
    assert not triton.is_model_ready("nope") and not triton.is_model_ready("digits", "2")
    meta = triton.get_server_metadata(as_json=True)
    assert meta["name"] == "attnserve"
    assert {"classification", "model_configuration", "binary_tensor_data", "statistics"} <= set(meta["extensions"])
    assert "model_repository" not in meta["extensions"]  # load/unload need --enable-admin


def test_model_metadata_and_config_say_what_perf_analyzer_reads(triton):
    meta = triton.get_model_metadata("reverser", as_json=True)
    assert meta["versions"] == ["1"]
    assert [(t["name"], t["datatype"], t["shape"]) for t in meta["inputs"]] == [("TEXT", "BYTES", ["-1"])]
    assert [(t["name"], t["datatype"], t["shape"]) for t in meta["outputs"]] == [("TRANSLATION", "BYTES", ["-1"])]
    config = triton.get_model_config("reverser", as_json=True)["config"]
    assert config.get("max_batch_size", 0) == 0  # the batch is the first dimension, -1; the server batches
    assert config["parameters"]["max_items_per_request"] == {"string_value": "8"}  # --max-texts-per-request
    assert config["parameters"]["max_text_chars"] == {"string_value": "50000"}  # --max-text-chars
    assert config["model_transaction_policy"] == {"decoupled": True}

    meta = triton.get_model_metadata("digits", as_json=True)
    assert [(t["name"], t["datatype"], t["shape"]) for t in meta["inputs"]] == [
        ("IMAGE", "BYTES", ["-1"]),
        ("PIXELS", "FP32", ["-1", "1", "16", "16"]),
    ]
    assert meta["outputs"][0]["shape"] == ["-1", str(len(DIGIT_LABELS))]
    config = triton.get_model_config("digits", as_json=True)["config"]
    assert [i.get("optional", False) for i in config["input"]] == [True, True]  # send one of the two
    assert "model_transaction_policy" not in config and "dynamic_batching" in config


def test_translate_a_batch(triton, server):
    result = triton.infer("reverser", [text_input(TEXTS)], request_id="batch-1")
    assert decoded(result.as_numpy("TRANSLATION")) == [reverse(t) for t in TEXTS]
    assert result.get_response().id == "batch-1" and result.get_response().model_version == "1"
    # the same texts over attnserve.v1 get the same translations
    with Client(server.address, retries=0) as client:
        assert [r.text for r in client.translate(TEXTS)] == [reverse(t) for t in TEXTS]
    # [N, 1] works too and keeps its shape
    result = triton.infer("reverser", [text_input(TEXTS[:2], [2, 1])])
    assert result.as_numpy("TRANSLATION").shape == (2, 1)
    assert decoded(result.as_numpy("TRANSLATION")) == [reverse(t) for t in TEXTS[:2]]


def test_a_glossary_is_a_json_request_parameter(triton):
    result = triton.infer("reverser", [text_input(["t5 t9 t17"])], parameters={"glossary": '{"t9": "t20"}'})
    assert decoded(result.as_numpy("TRANSLATION"))[0].split().count("t20") == 1
    with pytest.raises(InferenceServerException) as err:  # a target its vocabulary cannot spell
        triton.infer("reverser", [text_input(["t5 t9"])], parameters={"glossary": '{"t9": "zz"}'})
    assert "StatusCode.INVALID_ARGUMENT" in str(err.value.status()) and "'t9'" in err.value.message()


def test_decoding_options_are_request_parameters(triton):
    params = {"beam_size": 4, "num_hypotheses": 2, "max_new_tokens": MAX_TARGET, "length_penalty": 1.0}
    result = triton.infer("reverser", [text_input(TEXTS[:3])], parameters=params)
    hyps = result.as_numpy("TRANSLATION")
    assert hyps.shape == (3, 2)  # [N, num_hypotheses], best first
    assert [h[0].decode() for h in hyps] == [reverse(t) for t in TEXTS[:3]]
    # max_new_tokens cuts the output; mode sampling with a seed repeats itself
    short = triton.infer("reverser", [text_input(["t5 t9 t17"])], parameters={"max_new_tokens": 2})
    assert decoded(short.as_numpy("TRANSLATION")) == ["t17 t9"]
    sampled = [
        decoded(
            triton.infer(
                "reverser", [text_input(TEXTS)], parameters={"mode": "sampling", "temperature": 1.5, "seed": 7}
            ).as_numpy("TRANSLATION")
        )
        for _ in range(2)
    ]
    assert sampled[0] == sampled[1]


def test_classify_images_probabilities_and_the_classification_extension(triton, server, vit_dirs, digit_images):
    images = digit_images[:4]
    expected = direct_probs(vit_dirs["digits"], images)  # (4, 10)
    result = triton.infer("digits", [image_input(images)])
    np.testing.assert_allclose(result.as_numpy("PROBABILITIES"), expected, atol=1e-5)
    out = tritonclient_grpc.InferRequestedOutput("PROBABILITIES", class_count=3)
    top = triton.infer("digits", [image_input(images)], outputs=[out]).as_numpy("PROBABILITIES")
    assert top.shape == (4, 3)
    for row, probs in zip(top, expected):
        fields = [x.decode().split(":") for x in row]
        order = np.argsort(-probs, kind="stable")[:3]
        assert [int(f[1]) for f in fields] == list(order)
        assert [f[2] for f in fields] == [DIGIT_LABELS[i] for i in order]
        np.testing.assert_allclose([float(f[0]) for f in fields], probs[order], atol=1e-5)
    # attnserve.v1 gives the same labels
    with Client(server.address, retries=0) as client:
        labels = client.classify(images, top_k=3)
    assert [[s.index for s in r.labels] for r in labels] == [
        [int(f.decode().split(":")[1]) for f in row] for row in top
    ]


def test_classify_preprocessed_pixels(triton, vit_dirs, digit_images):
    from attnserve.contract.manifest import load_manifest
    from attnserve.server.images.preprocess import preprocess_image

    prep = load_manifest(vit_dirs["digits"]).preprocessing
    pixels = np.stack([preprocess_image(d, prep) for d in digit_images[:3]])  # (3, 1, 16, 16)
    tensor = tritonclient_grpc.InferInput("PIXELS", list(pixels.shape), "FP32")
    tensor.set_data_from_numpy(pixels)
    result = triton.infer("digits", [tensor])
    np.testing.assert_allclose(
        result.as_numpy("PROBABILITIES"), direct_probs(vit_dirs["digits"], digit_images[:3]), atol=1e-5
    )


class Stream:
    """tritonclient's callback stream, collected per request id."""

    def __init__(self, client) -> None:
        self.client, self.results = client, queue.Queue()
        client.start_stream(callback=lambda result, error: self.results.put((result, error)))

    def take(self, count: int, timeout: float = 60.0) -> list:
        return [self.results.get(timeout=timeout) for _ in range(count)]

    def until_final(self, request_id: str, timeout: float = 60.0) -> list:
        got, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            result, error = self.results.get(timeout=timeout)
            assert error is None, error
            if result.get_response().id != request_id:
                continue
            got.append(result)
            if result.get_response().parameters["triton_final_response"].bool_param:
                return got
        raise AssertionError(f"no final response for {request_id}")

    def close(self) -> None:
        self.client.stop_stream()


def test_decoupled_streaming_sends_deltas_then_a_final_response(server):
    client = tritonclient_grpc.InferenceServerClient(server.address)
    stream = Stream(client)
    try:
        text = "t23 t8 t8 t11 t6 t20"
        client.async_stream_infer("reverser", [text_input([text])], request_id="s1")
        pieces = stream.until_final("s1")
        deltas = [r.as_numpy("TRANSLATION")[0].decode() for r in pieces]
        assert len(pieces) >= 6 and "".join(deltas) == reverse(text)
        assert [p.get_response().parameters["triton_final_response"].bool_param for p in pieces[:-1]] == [False] * (
            len(pieces) - 1
        )
        # Triton's convention: with enable_empty_final_response the end is an extra empty response
        client.async_stream_infer(
            "reverser", [text_input(["t5 t9"])], request_id="s2", enable_empty_final_response=True
        )
        pieces = stream.until_final("s2")
        assert pieces[-1].get_response().outputs == [] and len(pieces) >= 3
        assert "".join(p.as_numpy("TRANSLATION")[0].decode() for p in pieces[:-1]) == "t9 t5"
        # several requests in flight on one stream, answered by id; a bad one in-band, the stream goes on
        for i, t in enumerate(TEXTS):
            client.async_stream_infer("reverser", [text_input([t])], request_id=f"m{i}")
        client.async_stream_infer("reverser", [text_input(["t5", "t6"])], request_id="bad")
        client.async_stream_infer("digits", [image_input([b"not an image"])], request_id="bad-image")
        texts: dict[str, str] = {}
        errors = []
        finals = 0
        while finals < len(TEXTS) or len(errors) < 2:
            result, error = stream.results.get(timeout=60)
            if error is not None:
                errors.append(error.message())
                continue
            response = result.get_response()
            texts[response.id] = texts.get(response.id, "") + result.as_numpy("TRANSLATION")[0].decode()
            finals += response.parameters["triton_final_response"].bool_param
        assert texts == {f"m{i}": reverse(t) for i, t in enumerate(TEXTS)}
        assert any("one text per request" in e for e in errors)
        assert any("image does not decode" in e for e in errors)
    finally:
        stream.close()
        client.close()
    assert (
        server.metric("attnserve_requests_total", model="reverser", method="kserve.ModelStreamInfer", status="OK") >= 6
    )


def test_errors_have_attnserve_v1_statuses_and_messages(triton, server):
    def error_of(call) -> InferenceServerException:
        with pytest.raises(InferenceServerException) as err:
            call()
        return err.value

    e = error_of(lambda: triton.infer("nope", [text_input(["t5"])]))
    assert e.status() == "StatusCode.NOT_FOUND" and "unknown model 'nope'" in e.message()
    e = error_of(lambda: triton.infer("reverser", [text_input(["t5"])], model_version="3"))
    assert e.status() == "StatusCode.NOT_FOUND" and "no version '3'" in e.message()
    # the same message as attnserve.v1 for the same mistake
    with pytest.raises(Exception) as v1:
        with Client(server.address, retries=0) as client:
            client.translate(["t5"], temperature=-1.0)
    e = error_of(lambda: triton.infer("reverser", [text_input(["t5"])], parameters={"temperature": -1.0}))
    assert e.status() == "StatusCode.INVALID_ARGUMENT" and e.message() == v1.value.details
    e = error_of(lambda: triton.infer("reverser", [text_input(["t5"] * 9)]))
    assert "9 texts in one request; the limit is 8" in e.message()
    e = error_of(lambda: triton.infer("reverser", [text_input(["t5"])], parameters={"beam_size": 9}))
    assert e.status() == "StatusCode.INVALID_ARGUMENT" and "beam_size must be in 1..4" in e.message()
    e = error_of(lambda: triton.infer("reverser", [text_input(["t5"])], parameters={"temprature": 1.0}))
    assert "unknown request parameter(s) temprature" in e.message()
    e = error_of(lambda: triton.infer("reverser", [text_input(["t5"])], parameters={"beam_size": "four"}))
    assert "parameters.beam_size: expected an integer" in e.message()
    e = error_of(lambda: triton.infer("digits", [text_input(["t5"])]))
    assert "unknown input 'TEXT'; this model takes IMAGE or PIXELS" in e.message()
    out = tritonclient_grpc.InferRequestedOutput("TRANSLATION", class_count=2)
    e = error_of(lambda: triton.infer("reverser", [text_input(["t5"])], outputs=[out]))
    assert "classification applies to classification models only" in e.message()
    e = error_of(lambda: triton.infer("digits", [image_input([b"\x89PNG\r\n\x1a\n"])]))
    assert e.status() == "StatusCode.INVALID_ARGUMENT" and "images[0]: image does not decode" in e.message()
    wrong = tritonclient_grpc.InferInput("PIXELS", [1, 1, 16, 16], "FP64")
    wrong.set_data_from_numpy(np.zeros((1, 1, 16, 16), np.float64))
    e = error_of(lambda: triton.infer("digits", [wrong]))
    assert "input PIXELS must be FP32, got FP64" in e.message()
    assert server.metric("attnserve_requests_total", model="reverser", method="kserve.ModelInfer", status="OK") > 0
    assert (
        server.metric(
            "attnserve_requests_total", model="reverser", method="kserve.ModelInfer", status="INVALID_ARGUMENT"
        )
        >= 4
    )


def test_timeout_parameter_and_client_deadline_drop_the_work(server, triton):
    """Triton's ``timeout`` parameter (microseconds) and a gRPC deadline both stop a decode mid-way."""
    engine = server.app.registry.models["reverser"].engine
    original = engine.on_step

    def slow(rows, generated):  # a decoder step of ~50 ms, so 12 steps outlast the limits below
        time.sleep(0.05)
        if original is not None:
            original(rows, generated)

    engine.on_step = slow
    try:
        with pytest.raises(InferenceServerException) as err:
            triton.infer("reverser", [text_input(["t5 t9 t17 t4 t6"])], timeout=150_000)
        assert err.value.status() == "StatusCode.DEADLINE_EXCEEDED" and "timeout of 150 ms" in err.value.message()
        with pytest.raises(InferenceServerException) as err:
            triton.infer("reverser", [text_input(["t5 t9 t17 t4 t6"])], client_timeout=0.15)
        assert err.value.status() == "StatusCode.DEADLINE_EXCEEDED"
        deadline = time.monotonic() + 10
        while engine.active_sequences and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.active_sequences == 0  # the rows were freed, not left decoding
    finally:
        engine.on_step = original
    assert server.metric(
        "attnserve_requests_total", model="reverser", method="kserve.ModelInfer", status="DEADLINE_EXCEEDED"
    ) == pytest.approx(2)


def test_statistics_count_what_was_answered(triton, digit_images):
    before = triton.get_inference_statistics("digits", as_json=True)["model_stats"][0]
    triton.infer("digits", [image_input(digit_images[:3])])
    after = triton.get_inference_statistics("digits", as_json=True)["model_stats"][0]
    assert int(after["inference_count"]) - int(before.get("inference_count", 0)) == 3
    success = [int(s["inference_stats"]["success"].get("count", 0)) for s in (before, after)]
    assert success[1] == success[0] + 1
    assert int(after["last_inference"]) > 0 and int(after["execution_count"]) >= 1
    everything = triton.get_inference_statistics(as_json=True)["model_stats"]
    assert sorted(s["name"] for s in everything) == ["digits", "reverser"]


def test_repository_index_and_admin_only_load(triton):
    index = triton.get_model_repository_index(as_json=True)["models"]
    assert sorted((m["name"], m["state"]) for m in index) == [("digits", "READY"), ("reverser", "READY")]
    with pytest.raises(InferenceServerException) as err:
        triton.unload_model("digits")
    assert err.value.status() == "StatusCode.UNIMPLEMENTED" and "--enable-admin" in err.value.message()
    assert triton.is_model_ready("digits")


def test_load_and_unload_with_admin(serve, kserve_repo, digit_images):
    with serve(kserve_repo, enable_admin=True) as handle:
        client = tritonclient_grpc.InferenceServerClient(handle.address)
        assert "model_repository" in client.get_server_metadata(as_json=True)["extensions"]
        client.unload_model("digits")
        assert not client.is_model_ready("digits")
        with pytest.raises(InferenceServerException) as err:
            client.infer("digits", [image_input(digit_images[:1])])
        assert err.value.status() == "StatusCode.NOT_FOUND" and "unloaded" in err.value.message()
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        assert index["digits"]["state"] == "UNAVAILABLE"
        client.load_model("digits")
        assert client.is_model_ready("digits")
        assert client.infer("digits", [image_input(digit_images[:1])]).as_numpy("PROBABILITIES").shape == (1, 10)
        with pytest.raises(InferenceServerException) as err:
            client.load_model("no-such-model")
        assert err.value.status() == "StatusCode.INVALID_ARGUMENT" and "no model directory" in err.value.message()
        client.close()


def test_tokens_and_request_ids(serve, kserve_repo):
    token = "k" * 32
    with serve(kserve_repo, auth_tokens=token) as handle:
        client = tritonclient_grpc.InferenceServerClient(handle.address)
        # health stays open, like grpc.health.v1
        assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("reverser")
        with pytest.raises(InferenceServerException) as err:
            client.get_model_metadata("reverser")
        assert err.value.status() == "StatusCode.UNAUTHENTICATED"
        with pytest.raises(InferenceServerException) as err:
            client.infer("reverser", [text_input(["t5"])], headers={"authorization": "Bearer wrong"})
        assert err.value.status() == "StatusCode.UNAUTHENTICATED"
        result = client.infer("reverser", [text_input(["t5 t6"])], headers={"authorization": f"Bearer {token}"})
        assert decoded(result.as_numpy("TRANSLATION")) == ["t6 t5"]
        assert handle.metric("attnserve_unauthenticated_total", method="ModelInfer") == 1
        client.close()
        # the request id of the metadata comes back in the trailers, as with attnserve.v1
        with grpc.insecure_channel(handle.address) as channel:
            from attnserve.protos.attnserve.triton import grpc_service_pb2 as gs

            call = channel.unary_unary(
                "/inference.GRPCInferenceService/ServerMetadata",
                request_serializer=gs.ServerMetadataRequest.SerializeToString,
                response_deserializer=gs.ServerMetadataResponse.FromString,
            )
            reply, rpc = call.with_call(
                gs.ServerMetadataRequest(), metadata=[("authorization", f"Bearer {token}"), ("x-request-id", "abc-42")]
            )
            assert reply.name == "attnserve" and dict(rpc.trailing_metadata())["x-request-id"] == "abc-42"


def test_cancelled_stream_frees_its_row(server):
    engine = server.app.registry.models["reverser"].engine
    original = engine.on_step
    stepped = threading.Event()

    def slow(rows, generated):
        stepped.set()
        time.sleep(0.05)
        if original is not None:
            original(rows, generated)

    engine.on_step = slow
    client = tritonclient_grpc.InferenceServerClient(server.address)
    try:
        client.start_stream(callback=lambda result, error: None)
        client.async_stream_infer("reverser", [text_input(["t5 t9 t17 t4 t6 t7"])], request_id="c")
        assert stepped.wait(30)
        client.stop_stream(cancel_requests=True)
        deadline = time.monotonic() + 10
        while engine.active_sequences and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.active_sequences == 0
    finally:
        engine.on_step = original
        client.close()


def test_a_lazily_served_model_not_loaded_yet_has_statistics_and_classifies(serve, kserve_repo, digit_images):
    """Its statistics before its first request and its first classification, which loads it: its
    labels are the model's, whether or not its classifier is running yet."""
    with serve(kserve_repo, load_models="lazy") as handle:
        client = tritonclient_grpc.InferenceServerClient(handle.address)
        before = client.get_inference_statistics("digits", as_json=True)["model_stats"][0]
        assert before["name"] == "digits" and int(before.get("execution_count", 0)) == 0
        answer = client.infer(
            "digits",
            [image_input(digit_images[:2])],
            outputs=[tritonclient_grpc.InferRequestedOutput("PROBABILITIES", class_count=3)],
        )
        fields = [entry.decode().split(":") for entry in answer.as_numpy("PROBABILITIES").reshape(-1)]
        assert len(fields) == 6 and all(f[2] == DIGIT_LABELS[int(f[1])] for f in fields)
        after = client.get_inference_statistics("digits", as_json=True)["model_stats"][0]
        assert int(after["execution_count"]) >= 1
        client.close()
