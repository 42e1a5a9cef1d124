"""Fuzzing KServe v2 on both transports: malformed tensors, wrong datatypes and shapes, huge
BYTES claims, bad parameters, bad JSON and binary framing, raw bytes on the wire.

Documented outcomes only: gRPC OK, INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED (a
ModelStreamInfer request's error comes back in-band and the stream goes on); HTTP 200, 400,
404, 413, 429, each error with a JSON ``{"error": ...}``. Never INTERNAL / 500, never a
hang; after every example the server still classifies a digit as before and nothing of the
translator's decode batch is left behind.
"""

from __future__ import annotations

import json
import struct
import urllib.error
import urllib.request
from collections import Counter

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnserve.protos.attnserve.triton import grpc_service_pb2 as gs
from attnserve.server.doors.kserve.tensors import DATATYPES, join_bytes

from .conftest import digit_png

MAX_MESSAGE = 1 << 20
CALL_TIMEOUT = 60.0
FUZZ = settings(
    max_examples=120,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
GRPC_OK = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND}
GRPC_OK |= {grpc.StatusCode.RESOURCE_EXHAUSTED}
HTTP_OK = {200, 400, 404, 413, 429}
TRIED: Counter = Counter()
STATUSES: Counter = Counter()
SERVICE = "/inference.GRPCInferenceService"


@pytest.fixture(scope="module")
def server(serve, full_repo):
    with serve(
        full_repo,
        http_port=0,
        max_message_bytes=MAX_MESSAGE,
        max_image_bytes=50_000,
        max_images_per_request=4,
        max_texts_per_request=8,
        max_beam_size=4,
        max_active_sequences=16,
    ) as handle:
        yield handle


@pytest.fixture(scope="module")
def channel(server):
    options = [("grpc.max_send_message_length", 8 * MAX_MESSAGE), ("grpc.max_receive_message_length", 8 * MAX_MESSAGE)]
    with grpc.insecure_channel(server.address, options=options) as channel:
        yield channel


def _infer(channel, serializer=gs.ModelInferRequest.SerializeToString):
    return channel.unary_unary(
        f"{SERVICE}/ModelInfer", request_serializer=serializer, response_deserializer=gs.ModelInferResponse.FromString
    )


@pytest.fixture(scope="module")
def still_serving(server, channel):
    """The same digit classified again, identically, and the translator idle."""
    request = gs.ModelInferRequest(model_name="digits", raw_input_contents=[join_bytes([digit_png(3)])])
    request.inputs.add(name="IMAGE", datatype="BYTES", shape=[1])
    expected = np.frombuffer(_infer(channel)(request, timeout=CALL_TIMEOUT).raw_output_contents[0], "<f4")
    engine = server.app.registry.models["mt"].engine

    def check() -> None:
        got = np.frombuffer(_infer(channel)(request, timeout=CALL_TIMEOUT).raw_output_contents[0], "<f4")
        np.testing.assert_allclose(got, expected, atol=1e-6)
        assert engine.queued == 0  # nothing of a refused or finished request waits for admission

    return check


# ------------------------------------------------------------------------- strategies

NAMES = st.one_of(st.sampled_from(["TEXT", "IMAGE", "PIXELS", ""]), st.text(max_size=12))
DTYPES = st.one_of(st.sampled_from(DATATYPES), st.sampled_from(["BF16", "", "fp32", "STRING"]))
SHAPES = st.one_of(
    st.sampled_from([[1], [2], [1, 1], [2, 1], [1, 1, 16, 16], [2, 3, 16, 16], [], [0], [3, 2]]),
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5),
    st.lists(st.integers(-2, 20), max_size=4),
)
TEXTS = st.one_of(
    st.lists(st.sampled_from(["t5", "t17", "t42", "hello", "</s>"]), max_size=12).map(" ".join),
    st.text(max_size=30),
    st.sampled_from(["", "t5 " * 3000, "🙂" * 50]),
).map(lambda t: t.encode("utf-8", "surrogatepass"))
ELEMENTS = st.one_of(
    TEXTS, st.sampled_from([digit_png(7), b"\x89PNG\r\n\x1a\n", b"\xff\xfe\xfd"]), st.binary(max_size=64)
)
# BYTES layouts, well formed or not: a length past the end, a huge claim, trailing bytes
BYTES_RAW = st.one_of(
    st.lists(ELEMENTS, max_size=5).map(join_bytes),
    st.sampled_from(
        [struct.pack("<I", 0xFFFFFFFF) + b"x", struct.pack("<I", 10) + b"abc", join_bytes([b"t5"]) + b"\x01"]
    ),
    st.binary(max_size=64),
)
NUMBERS_RAW = st.one_of(
    st.sampled_from([0.0, np.nan, np.inf, 1e38, 3.0]).map(lambda v: np.full(256, v, "<f4").tobytes()),
    st.binary(max_size=2048),
)
PARAM = st.one_of(st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(), st.text(max_size=8))
PARAM_NAMES = st.sampled_from(
    ["beam_size", "num_hypotheses", "max_new_tokens", "temperature", "top_k", "top_p", "seed", "mode"]
    + ["length_penalty", "timeout", "triton_enable_empty_final_response", "priority", "temprature"]
)
PARAMS = st.dictionaries(PARAM_NAMES, PARAM, max_size=4)


def _set(message_parameters, values: dict) -> None:
    for key, value in values.items():
        p = message_parameters[key]
        if isinstance(value, bool):
            p.bool_param = value
        elif isinstance(value, int):
            p.int64_param = value
        elif isinstance(value, float):
            p.double_param = value
        else:
            p.string_param = value


@st.composite
def infer_requests(draw) -> gs.ModelInferRequest:
    request = gs.ModelInferRequest(
        model_name=draw(st.sampled_from(["mt", "digits", "", "nope"])),
        model_version=draw(st.sampled_from(["", "", "1", "2"])),
        id=draw(st.text(max_size=8)),
    )
    _set(request.parameters, draw(PARAMS))
    raw = draw(st.booleans())
    for _ in range(draw(st.integers(0, 3))):
        tensor = request.inputs.add(name=draw(NAMES), datatype=draw(DTYPES), shape=draw(SHAPES))
        if raw:
            request.raw_input_contents.append(draw(BYTES_RAW if tensor.datatype == "BYTES" else NUMBERS_RAW))
        elif tensor.datatype == "BYTES":
            tensor.contents.bytes_contents.extend(draw(st.lists(ELEMENTS, max_size=4)))
        else:
            tensor.contents.fp32_contents.extend(draw(st.lists(st.floats(width=32), max_size=300)))
    if raw and draw(st.booleans()):
        request.raw_input_contents.append(b"extra")  # one more entry than inputs
    for _ in range(draw(st.integers(0, 2))):
        output = request.outputs.add(name=draw(st.sampled_from(["TRANSLATION", "PROBABILITIES", "X"])))
        if draw(st.booleans()):
            output.parameters["classification"].int64_param = draw(st.integers(-3, 2**40))
    return request


def _grpc_outcome(call) -> grpc.StatusCode:
    try:
        call()
    except grpc.RpcError as exc:
        STATUSES[f"grpc {exc.code().name}"] += 1
        assert exc.code() in GRPC_OK, f"{exc.code()}: {exc.details()}"
        assert "Traceback" not in (exc.details() or "")
        return exc.code()
    STATUSES["grpc OK"] += 1
    return grpc.StatusCode.OK


# ----------------------------------------------------------------------------- gRPC


@FUZZ
@given(request=infer_requests())
def test_fuzz_model_infer(channel, still_serving, request):
    TRIED["ModelInfer"] += 1
    _grpc_outcome(lambda: _infer(channel)(request, timeout=CALL_TIMEOUT))
    still_serving()


@settings(FUZZ, max_examples=80)
@given(
    model=st.sampled_from(["mt", "digits"]),
    items=st.lists(st.sampled_from(["t5 t17", "t42", "t4 t5 t6 t7", "hello"]), min_size=1, max_size=4),
    params=PARAMS,
    class_count=st.integers(0, 12),
)
def test_fuzz_valid_tensors_with_random_parameters(channel, still_serving, model, items, params, class_count):
    """Well-formed tensors with random parameters: answered, or refused for the parameter."""
    TRIED["ModelInfer (valid tensors)"] += 1
    request = gs.ModelInferRequest(model_name=model)
    _set(request.parameters, params)
    if model == "mt":
        request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(items)])
        request.raw_input_contents.append(join_bytes([t.encode() for t in items]))
    else:
        request.inputs.add(name="IMAGE", datatype="BYTES", shape=[len(items)])
        request.raw_input_contents.append(join_bytes([digit_png(len(t)) for t in items]))
        request.outputs.add(name="PROBABILITIES").parameters["classification"].int64_param = class_count
    code = _grpc_outcome(lambda: _infer(channel)(request, timeout=CALL_TIMEOUT))
    if not params:
        assert code == grpc.StatusCode.OK
    still_serving()


@settings(FUZZ, max_examples=60)
@given(
    messages=st.lists(
        st.one_of(infer_requests().map(lambda r: r.SerializeToString()), st.binary(max_size=80)), max_size=4
    )
)
def test_fuzz_model_stream_infer(channel, still_serving, messages):
    """Every message of a stream is answered (in-band when it fails); the stream itself ends OK."""
    TRIED["ModelStreamInfer"] += len(messages)
    stream = channel.stream_stream(
        f"{SERVICE}/ModelStreamInfer",
        request_serializer=None,
        response_deserializer=gs.ModelStreamInferResponse.FromString,
    )
    replies = list(stream(iter(messages), timeout=CALL_TIMEOUT))
    finished = sum(
        1 for r in replies if r.error_message or r.infer_response.parameters["triton_final_response"].bool_param
    )
    assert finished == len(messages), replies[:3]
    assert all("Traceback" not in r.error_message and "internal error" not in r.error_message for r in replies)
    STATUSES["stream replies"] += len(replies)
    still_serving()


@settings(FUZZ, max_examples=80)
@given(
    method=st.sampled_from(["ModelInfer", "ModelMetadata", "ModelConfig", "ModelStatistics", "RepositoryIndex"]),
    payload=st.binary(max_size=200),
)
def test_fuzz_raw_bytes(channel, still_serving, method, payload):
    TRIED["raw bytes"] += 1
    call = channel.unary_unary(f"{SERVICE}/{method}", request_serializer=None, response_deserializer=None)
    _grpc_outcome(lambda: call(payload, timeout=CALL_TIMEOUT))
    still_serving()


# ----------------------------------------------------------------------------- REST


def _post(server, path: str, body: bytes, headers: dict) -> int:
    request = urllib.request.Request(f"http://{server.http_address}{path}", data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=CALL_TIMEOUT) as reply:
            reply.read()
            status = reply.status
    except urllib.error.HTTPError as err:
        status = err.code
        doc = json.loads(err.read())
        assert isinstance(doc["error"], str) and "Traceback" not in doc["error"], doc
    STATUSES[f"http {status}"] += 1
    assert status in HTTP_OK, status
    return status


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10)),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@st.composite
def rest_bodies(draw) -> tuple[bytes, dict]:
    kind = draw(st.sampled_from(["tensors", "json", "bytes", "nested", "binary"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300)), {}
    if kind == "json":
        return json.dumps(draw(JSON_VALUES)).encode(), {}
    if kind == "nested":  # deeper than the JSON parser recurses
        depth = draw(st.sampled_from([10, 5000, 200_000]))
        return ("[" * depth + "]" * depth).encode(), {}
    inputs, binary = [], b""
    for _ in range(draw(st.integers(0, 3))):
        tensor = {"name": draw(NAMES), "datatype": draw(DTYPES), "shape": draw(SHAPES)}
        if kind == "binary":
            data = draw(BYTES_RAW if tensor["datatype"] == "BYTES" else NUMBERS_RAW)
            tensor["parameters"] = {"binary_data_size": draw(st.sampled_from([len(data), len(data) + 7, -1, 2**40]))}
            binary += data
        else:
            tensor["data"] = draw(st.one_of(st.lists(st.text(max_size=20), max_size=4), JSON_VALUES))
        inputs.append(tensor)
    doc = {"inputs": inputs, "parameters": draw(st.one_of(PARAMS, JSON_VALUES))}
    if draw(st.booleans()):
        doc["outputs"] = [{"name": "PROBABILITIES", "parameters": {"classification": draw(st.integers(-2, 50))}}]
    head = json.dumps(doc, allow_nan=True).encode()
    header = str(draw(st.sampled_from([len(head), len(head) + 3, 0, -5]))) if kind == "binary" else None
    return head + binary, ({"Inference-Header-Content-Length": header} if header is not None else {})


@FUZZ
@given(model=st.sampled_from(["mt", "digits", "nope"]), body=rest_bodies())
def test_fuzz_rest_infer(server, still_serving, model, body):
    TRIED["REST infer"] += 1
    _post(server, f"/v2/models/{model}/infer", *body)
    still_serving()


def test_rest_oversize_and_huge_bytes(server, still_serving):
    TRIED["REST oversize"] += 2
    big = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["t5 " * MAX_MESSAGE]}]})
    assert _post(server, "/v2/models/mt/infer", big.encode(), {}) == 413
    claim = json.dumps(
        {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 8}}]}
    )
    body = claim.encode() + struct.pack("<I", 0xFFFFFFF0) + b"abcd"  # an element claiming 4 GB
    assert _post(server, "/v2/models/mt/infer", body, {"Inference-Header-Content-Length": str(len(claim))}) == 400
    still_serving()


def test_report_inputs_tried(figures, server):
    """Runs last in this module: reports the counts; nothing failed inside the server."""
    for kind, n in sorted(TRIED.items()):
        figures(f"kserve fuzz inputs tried ({kind})", n)
    for status, n in sorted(STATUSES.items()):
        figures(f"kserve fuzz replies {status}", n)
    assert sum(TRIED.values()) > 0
    for metric in server.app.metrics.registry.collect():
        for sample in metric.samples:
            if sample.name == "attnserve_requests_total" and sample.labels["method"].startswith("kserve"):
                assert sample.labels["status"] != "INTERNAL" or sample.value == 0, sample
