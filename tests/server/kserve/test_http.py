"""KServe v2 REST on the HTTP port: Triton's HTTP client (tritonclient.http) and plain HTTP requests.

Health, metadata and config as Triton writes them (numbers as JSON numbers), inference
with JSON data and with Triton's binary-data extension, the classification extension,
errors as ``{"error": ...}`` with the HTTP status of the gRPC status, request ids,
metrics labels and a graceful drain.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from attnserve.server.doors.kserve import rest
from tests.support.bounded import within

from ..conftest import direct_probs
from .conftest import DIGIT_LABELS, reverse

tritonclient_http = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

TEXTS = ["t5 t9 t17", "t4", "t23 t8 t8 t11 t6 t20"]


@pytest.fixture(scope="module")
def triton(server):
    client = tritonclient_http.InferenceServerClient(server.http_address, network_timeout=60)
    yield client
    client.close()


def request(server, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    """(status, headers, body) of one plain HTTP request."""
    req = urllib.request.Request(f"http://{server.http_address}{path}", data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as reply:
            return reply.status, dict(reply.headers), reply.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def text_input(texts: list[str], binary: bool = True):
    tensor = tritonclient_http.InferInput("TEXT", [len(texts)], "BYTES")
    tensor.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=object), binary_data=binary)
    return tensor


def text(x) -> str:
    return x.decode() if isinstance(x, bytes) else x  # tritonclient gives bytes for binary data, str for JSON


def image_input(images: list[bytes]):
    tensor = tritonclient_http.InferInput("IMAGE", [len(images)], "BYTES")
    tensor.set_data_from_numpy(np.array(images, dtype=object))
    return tensor


def test_health_metadata_and_config(triton, server):
    assert triton.is_server_live() and triton.is_server_ready()
    assert triton.is_model_ready("reverser") and not triton.is_model_ready("nope")
    assert request(server, "GET", "/v2/models/nope/ready")[0] == 400  # Triton's "not ready"
    assert triton.get_server_metadata()["name"] == "attnserve"
    meta = triton.get_model_metadata("digits")
    assert meta["inputs"][1] == {"name": "PIXELS", "datatype": "FP32", "shape": [-1, 1, 16, 16]}  # numbers
    assert meta["outputs"] == [{"name": "PROBABILITIES", "datatype": "FP32", "shape": [-1, len(DIGIT_LABELS)]}]
    assert triton.get_model_metadata("reverser", model_version="1")["versions"] == ["1"]
    config = triton.get_model_config("reverser")
    assert config["max_batch_size"] == 0 and config["model_transaction_policy"]["decoupled"] is True
    assert config["input"][0]["data_type"] == "TYPE_STRING"
    assert triton.get_model_config("digits")["input"][1]["dims"] == [-1, 1, 16, 16]


def test_model_ready_of_an_unknown_model_or_version_is_400_with_a_json_error_naming_it(server):
    """400 is Triton's "not ready" (tritonclient reads only the status); the body says why, as every error does."""
    status, headers, body = request(server, "GET", "/v2/models/nosuch/ready")
    assert status == 400 and headers["Content-Type"].startswith("application/json")
    assert json.loads(body) == {"error": "not ready: unknown model 'nosuch'; served: digits, reverser"}
    status, _, body = request(server, "GET", "/v2/models/digits/versions/2/ready")
    assert status == 400
    assert json.loads(body) == {"error": "not ready: model 'digits' has no version '2'; it serves version 1"}
    assert request(server, "GET", "/v2/models/digits/versions/1/ready")[:3:2] == (200, b"")


@pytest.mark.parametrize("binary", [True, False], ids=["binary-data", "json"])
def test_translate(triton, binary):
    out = tritonclient_http.InferRequestedOutput("TRANSLATION", binary_data=binary)
    result = triton.infer("reverser", [text_input(TEXTS, binary)], outputs=[out], request_id="r-1")
    assert [text(x) for x in result.as_numpy("TRANSLATION")] == [reverse(t) for t in TEXTS]
    assert result.get_response()["id"] == "r-1"
    hyps = triton.infer("reverser", [text_input(TEXTS, binary)], parameters={"beam_size": 3, "num_hypotheses": 3})
    assert hyps.as_numpy("TRANSLATION").shape == (3, 3)
    assert [text(h[0]) for h in hyps.as_numpy("TRANSLATION")] == [reverse(t) for t in TEXTS]


def test_classify_binary_json_and_the_classification_extension(triton, vit_dirs, digit_images):
    images = digit_images[3:7]
    expected = direct_probs(vit_dirs["digits"], images)  # (4, 10)
    probs = triton.infer("digits", [image_input(images)]).as_numpy("PROBABILITIES")
    np.testing.assert_allclose(probs, expected, atol=1e-5)
    as_json = triton.infer(
        "digits", [image_input(images)], outputs=[tritonclient_http.InferRequestedOutput("PROBABILITIES", False)]
    )
    assert "data" in as_json.get_response()["outputs"][0]
    np.testing.assert_allclose(as_json.as_numpy("PROBABILITIES"), expected, atol=1e-5)
    top = triton.infer(
        "digits",
        [image_input(images)],
        outputs=[tritonclient_http.InferRequestedOutput("PROBABILITIES", class_count=2)],
    ).as_numpy("PROBABILITIES")
    assert top.shape == (4, 2)
    assert [[int(x.decode().split(":")[1]) for x in row] for row in top] == [
        list(np.argsort(-p, kind="stable")[:2]) for p in expected
    ]


def test_plain_json_with_nested_data_and_pixels(server, vit_dirs, digit_images):
    """What a curl user sends: JSON only, nested data allowed; the reply is JSON."""
    body = {
        "id": "plain",
        "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2, 1], "data": [["t5 t6"], ["t9"]]}],
    }
    status, headers, reply = request(
        server, "POST", "/v2/models/reverser/infer", json.dumps(body).encode(), {"X-Request-Id": "my-id-7"}
    )
    assert status == 200 and headers["X-Request-Id"] == "my-id-7"
    doc = json.loads(reply)
    assert doc["id"] == "plain" and doc["model_name"] == "reverser"
    assert doc["outputs"] == [{"name": "TRANSLATION", "datatype": "BYTES", "shape": [2, 1], "data": ["t6 t5", "t9"]}]

    from attnserve.contract.manifest import load_manifest
    from attnserve.server.images.preprocess import preprocess_image

    pixels = preprocess_image(digit_images[1], load_manifest(vit_dirs["digits"]).preprocessing)  # (1, 16, 16)
    body = {"inputs": [{"name": "PIXELS", "datatype": "FP32", "shape": [1, 1, 16, 16], "data": [pixels.tolist()]}]}
    status, _, reply = request(server, "POST", "/v2/models/digits/versions/1/infer", json.dumps(body).encode())
    assert status == 200
    got = np.array(json.loads(reply)["outputs"][0]["data"], np.float32)
    np.testing.assert_allclose(got, direct_probs(vit_dirs["digits"], digit_images[1:2])[0], atol=1e-5)


def test_images_in_json_data_are_their_base64_text(triton, server, vit_dirs, digit_images):
    """JSON carries text only: tritonclient's binary_data=False refuses bytes that are not UTF-8,
    and KServe's examples send an image as its base64 text. Each such image reads as its bytes
    sent as binary data do; a data URL (a browser's FileReader) and base64's line breaks too."""
    images = digit_images[3:6]
    expected = direct_probs(vit_dirs["digits"], images)  # (3, 10)
    tensor = tritonclient_http.InferInput("IMAGE", [len(images)], "BYTES")
    tensor.set_data_from_numpy(np.array([base64.b64encode(i) for i in images], dtype=object), binary_data=False)  # JSON
    np.testing.assert_allclose(triton.infer("digits", [tensor]).as_numpy("PROBABILITIES"), expected, atol=1e-5)

    texts = [
        "data:image/png;base64," + base64.b64encode(images[0]).decode(),
        base64.encodebytes(images[1]).decode(),  # wrapped at 76 characters, as the base64 command writes it
    ]
    body = {"inputs": [{"name": "IMAGE", "datatype": "BYTES", "shape": [2, 1], "data": [[t] for t in texts]}]}
    status, _, reply = request(server, "POST", "/v2/models/digits/infer", json.dumps(body).encode())
    assert status == 200, reply
    got = np.array(json.loads(reply)["outputs"][0]["data"], np.float32).reshape(2, -1)
    np.testing.assert_allclose(got, expected[:2], atol=1e-5)

    body = {"inputs": [{"name": "IMAGE", "datatype": "BYTES", "shape": [1], "data": ["\u00e9t\u00e9 PNG"]}]}
    status, _, reply = request(server, "POST", "/v2/models/digits/infer", json.dumps(body).encode())
    assert status == 400
    assert json.loads(reply)["error"].startswith("inputs[0] (IMAGE) element 0: not base64 ('été PNG'); an image")


def test_an_image_of_base64_in_tiny_words_is_read_in_bounded_memory():
    """The infer body's parse (run in the parse process for a large body) reads base64 wrapped
    every two characters without an object per word: 8 MB of them took 190 MB more than the body."""
    body = {"inputs": [{"name": "IMAGE", "datatype": "BYTES", "shape": [1], "data": ["QU " * 2_800_000]}]}
    kind, parsed = within(rest.parse_infer, json.dumps(body).encode(), None, "digits", memory_bytes=100 << 20)
    assert kind == "ok" and [len(v) for v in parsed.inputs[0].data] == [len(base64.b64decode("QU" * 2_800_000))]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "fragment"),
    [
        ("POST", "/v2/models/reverser/infer", b"{not json", 400, "not valid JSON"),
        ("POST", "/v2/models/reverser/infer", b"[1, 2]", 400, "JSON object with 'inputs'"),
        ("POST", "/v2/models/reverser/infer", b'{"inputs": [{"name": "TEXT"}]}', 400, "inputs[0].datatype"),
        (
            "POST",
            "/v2/models/reverser/infer",
            b'{"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2], "data": ["t5"]}]}',
            400,
            "1 values for shape [2]",
        ),
        ("POST", "/v2/models/nope/infer", b'{"inputs": []}', 404, "unknown model 'nope'"),
        ("POST", "/v2/models/reverser/versions/2/infer", b'{"inputs": []}', 404, "no version '2'"),
        ("GET", "/v2/models/nope", None, 404, "unknown model"),
        ("GET", "/v2/models/reverser/infer", None, 405, "Method Not Allowed"),
        ("GET", "/v2/models/reverser/nothing", None, 404, "Not Found"),
        ("POST", "/v2/repository/models/digits/unload", b"", 501, "--enable-admin"),
        (
            "POST",
            "/v2/models/digits/infer",
            b'{"inputs": [{"name": "PIXELS", "datatype": "FP32", "shape": [1, 1, 16, 16], "parameters": '
            b'{"shared_memory_region": "r", "shared_memory_byte_size": 1024}}]}',
            501,
            "inputs[0]: system shared memory is served on the KServe gRPC door only",
        ),
        (
            "POST",
            "/v2/models/reverser/infer",
            b'{"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["t5"]}], "outputs": '
            b'[{"name": "TRANSLATION", "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 64}}]}',
            501,
            "outputs[0]: system shared memory",
        ),
    ],
)
def test_errors_are_json_with_the_status_of_their_grpc_code(server, method, path, body, status, fragment):
    got, headers, reply = request(server, method, path, body, {"Content-Type": "application/json"})
    assert got == status
    assert fragment in json.loads(reply)["error"]


def test_client_errors_carry_the_http_status(triton):
    with pytest.raises(InferenceServerException) as err:
        triton.infer("reverser", [text_input(["t5"] * 9)])
    assert err.value.status() == "400" and "9 texts in one request; the limit is 8" in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        triton.infer("digits", [image_input([b"GIF89a" + b"\xff" * 10])])
    assert err.value.status() == "400" and "image does not decode" in err.value.message()


def test_tritons_extensions_not_served_over_http_are_404_in_its_shape(triton):
    """Triton's client reads a refusal's ``{"error": ...}``: the paths it asks for under /v2 keep
    that shape beside the DeepL door's ``{"message": ...}`` for the rest of /v2."""
    for ask in (triton.get_log_settings, triton.get_trace_settings, triton.get_system_shared_memory_status):
        with pytest.raises(InferenceServerException) as err:
            ask()
        assert err.value.status() == "404" and err.value.message() == "Not Found", ask


def test_oversize_body_is_413_and_the_metrics_name_the_protocol(serve, kserve_repo):
    with serve(kserve_repo, http_port=0, max_message_bytes=4096) as handle:
        texts = ["t5 " * 2000]
        body = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": texts}]}).encode()
        status, _, reply = request(handle, "POST", "/v2/models/reverser/infer", body)
        assert status == 413 and "over the limit of 4096 bytes" in json.loads(reply)["error"]
        body = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["t5"]}]}).encode()
        assert request(handle, "POST", "/v2/models/reverser/infer", body)[0] == 200
        label = "kserve.http.ModelInfer"
        assert handle.metric("attnserve_requests_total", model="reverser", method=label, status="OK") == 1
        assert (
            handle.metric("attnserve_requests_total", model="reverser", method=label, status="RESOURCE_EXHAUSTED") == 1
        )


def test_drain_turns_ready_off_refuses_new_work_and_finishes_what_runs(serve, kserve_repo):
    with serve(kserve_repo, http_port=0) as handle:
        engine = handle.app.registry.models["reverser"].engine
        stepped = threading.Event()

        def slow(rows, generated):  # ~50 ms per decoder step: the request below takes ~0.5 s
            stepped.set()
            time.sleep(0.05)

        engine.on_step = slow
        body = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["t5 t9 t17 t4"]}]})
        results = {}
        running = threading.Thread(
            target=lambda: results.update(r=request(handle, "POST", "/v2/models/reverser/infer", body.encode()))
        )
        running.start()
        assert stepped.wait(30)
        status, _, reply = request(handle, "GET", "/health")  # LibreTranslate's probe
        assert (status, json.loads(reply)) == (200, {"status": "ok"})
        stop = handle.loop_thread.loop.call_soon_threadsafe
        stop(lambda: __import__("asyncio").ensure_future(handle.app.stop(10)))
        deadline = time.monotonic() + 10
        while request(handle, "GET", "/v2/health/ready")[0] != 400 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert request(handle, "GET", "/v2/health/ready")[0] == 400
        assert request(handle, "GET", "/v2/health/live")[0] == 200
        status, _, reply = request(handle, "GET", "/health")
        assert status == 503 and "not taking work" in json.loads(reply)["error"]
        status, _, reply = request(handle, "GET", "/v2/models/reverser/ready")
        assert status == 400 and "is not ready: the server is not taking work" in json.loads(reply)["error"]
        status, _, reply = request(handle, "POST", "/v2/models/reverser/infer", body.encode())
        assert status == 503 and "shutting down" in json.loads(reply)["error"]
        running.join(30)
        status, _, reply = results["r"]
        assert status == 200 and json.loads(reply)["outputs"][0]["data"] == ["t4 t17 t9 t5"]


def test_a_client_that_hangs_up_frees_its_decoder_row(server):
    """aiohttp cancels the handler of a closed connection: the translation leaves the batch."""
    import socket

    engine = server.app.registry.models["reverser"].engine
    stepped, original = threading.Event(), engine.on_step

    def slow(rows, generated):  # ~50 ms per decoder step
        stepped.set()
        time.sleep(0.05)
        original(rows, generated)

    engine.on_step = slow
    try:
        body = json.dumps(
            {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["t5 t9 t17 t4 t6"]}]}
        )
        host, port = server.http_address.split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            head = f"POST /v2/models/reverser/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
            sock.sendall(head.encode() + body.encode())
            assert stepped.wait(30)
        deadline = time.monotonic() + 10
        while engine.active_sequences and time.monotonic() < deadline:
            time.sleep(0.02)
        assert engine.active_sequences == 0
        label = "kserve.http.ModelInfer"
        while time.monotonic() < deadline and not server.metric(
            "attnserve_requests_total", model="reverser", method=label, status="CANCELLED"
        ):
            time.sleep(0.02)
        assert server.metric("attnserve_requests_total", model="reverser", method=label, status="CANCELLED") == 1
    finally:
        engine.on_step = original
