"""Every bad request gets a clear status and message, and the server keeps serving:
each case is followed by a good request that must succeed."""

from __future__ import annotations

import io
import struct
import threading
import time
import zlib

import grpc
import numpy as np
import pytest
from PIL import Image

from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
from attnserve.server.shared.errors import MAX_MESSAGE_CHARS, client_message, echo

from .conftest import digit_png

INVALID, NOT_FOUND = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND


@pytest.fixture(scope="module")
def server(serve, repo):
    with serve(
        repo, max_image_bytes=50_000, max_image_pixels=1_000_000, max_images_per_request=4, max_message_bytes=1 << 20
    ) as handle:
        yield handle


@pytest.fixture(scope="module")
def stub(server):
    with grpc.insecure_channel(server.address) as channel:
        yield pb_grpc.InferenceServiceStub(channel)


def _png(image: Image.Image, **kw) -> bytes:
    buf = io.BytesIO()
    image.save(buf, "PNG", **kw)
    return buf.getvalue()


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose header declares width x height over a few bytes of pixel data (a bomb's shape)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 10)) + chunk(b"IEND", b"")


def _tensor(shape, datatype=pb.DATA_TYPE_FP32, values: np.ndarray | None = None, raw: bytes | None = None):
    if raw is None:
        values = np.zeros(shape, dtype="<f4") if values is None else values
        raw = values.astype("<f4").tobytes()
    return pb.ImageInput(tensor=pb.Tensor(shape=list(shape), datatype=datatype, raw_contents=raw))


def _encoded(data: bytes) -> pb.ImageInput:
    return pb.ImageInput(encoded=data)


NAN = np.full((1, 16, 16), np.nan, dtype=np.float32)
CLASSIFY_CASES = {
    "unknown model": (pb.ClassifyRequest(model="nope", images=[_encoded(digit_png(1))]), NOT_FOUND, "unknown model"),
    "no images": (pb.ClassifyRequest(model="digits"), INVALID, "images is empty"),
    "too many images": (
        pb.ClassifyRequest(model="digits", images=[_encoded(digit_png(1))] * 5),
        INVALID,
        "5 images in one request; the limit is 4",
    ),
    "not an image": (pb.ClassifyRequest(model="digits", images=[_encoded(b"hello")]), INVALID, "does not decode"),
    "truncated png": (
        pb.ClassifyRequest(model="digits", images=[_encoded(digit_png(1)[:60])]),
        INVALID,
        "does not decode",
    ),
    "empty image": (pb.ClassifyRequest(model="digits", images=[_encoded(b"")]), INVALID, "empty"),
    "neither encoded nor tensor": (
        pb.ClassifyRequest(model="digits", images=[pb.ImageInput()]),
        INVALID,
        "set either encoded or tensor",
    ),
    "too many bytes": (
        pb.ClassifyRequest(
            model="digits",
            images=[_encoded(_png(Image.fromarray(np.random.default_rng(0).integers(0, 255, (300, 300), np.uint8))))],
        ),
        INVALID,
        "the limit is 50000 (--max-image-bytes)",
    ),
    "too many pixels (a bomb)": (
        pb.ClassifyRequest(model="digits", images=[_encoded(_png(Image.new("L", (2000, 1000), 0)))]),
        INVALID,
        "2000x1000 = 2000000 pixels; the limit is 1000000 (--max-image-pixels)",
    ),
    "a header over Pillow's own pixel limit": (  # Pillow refuses it inside Image.open, in its own words
        pb.ClassifyRequest(model="digits", images=[_encoded(_png_header(15_000, 15_000))]),
        INVALID,
        "images[0]: image header declares 225000000 pixels; the limit is 1000000 (--max-image-pixels)",
    ),
    "wrong tensor shape": (
        pb.ClassifyRequest(model="digits", images=[_tensor((3, 16, 16))]),
        INVALID,
        "does not match the model's [1, 16, 16]",
    ),
    "wrong tensor dtype": (
        pb.ClassifyRequest(model="digits", images=[_tensor((1, 16, 16), pb.DATA_TYPE_FP16)]),
        INVALID,
        "FP16 is not accepted",
    ),
    "unknown dtype value": (
        pb.ClassifyRequest(model="digits", images=[_tensor((1, 16, 16), 42)]),
        INVALID,
        "datatype: unknown value 42",
    ),
    "tensor bytes do not match shape": (
        pb.ClassifyRequest(model="digits", images=[_tensor((1, 16, 16), raw=b"\0" * 12)]),
        INVALID,
        "needs 1024",
    ),
    "tensor with NaN": (
        pb.ClassifyRequest(model="digits", images=[_tensor((1, 16, 16), values=NAN)]),
        INVALID,
        "NaN or Inf",
    ),
    "translate on a classifier": (
        pb.TranslateRequest(model="digits", texts=["t5"]),
        INVALID,
        "model 'digits' is an image-classification model, not translation",
    ),
    "translate with no translation model": (pb.TranslateRequest(texts=["t5"]), NOT_FOUND, "no translation model"),
}


def _good(stub) -> None:
    reply = stub.Classify(pb.ClassifyRequest(model="digits", images=[_encoded(digit_png(4))]), timeout=10)
    assert len(reply.results) == 1 and reply.results[0].labels


@pytest.mark.parametrize("case", list(CLASSIFY_CASES))
def test_bad_request_gets_its_status_and_the_server_keeps_serving(stub, case):
    request, code, fragment = CLASSIFY_CASES[case]
    method = stub.Translate if isinstance(request, pb.TranslateRequest) else stub.Classify
    with pytest.raises(grpc.RpcError) as err:
        method(request, timeout=10)
    assert err.value.code() == code, err.value.details()
    assert fragment in err.value.details()
    assert "Traceback" not in err.value.details()
    _good(stub)


def test_message_over_the_size_limit(stub):
    request = pb.ClassifyRequest(model="digits", images=[_encoded(b"\0" * (2 << 20))])
    with pytest.raises(grpc.RpcError) as err:
        stub.Classify(request, timeout=10)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    _good(stub)


def test_errors_are_counted_by_status(server, stub):
    with pytest.raises(grpc.RpcError):
        stub.Classify(pb.ClassifyRequest(model="digits"), timeout=10)
    assert server.metric("attnserve_requests_total", model="digits", method="Classify", status="INVALID_ARGUMENT") >= 1


def test_queue_full_is_resource_exhausted(serve, repo):
    """Two images wait in a queue of two (the batcher holds them for a second); a third is refused."""
    with serve(repo, max_queue_size=2, max_queue_delay_ms=1000, max_batch_size=64) as server:
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.InferenceServiceStub(channel)
            request = pb.ClassifyRequest(model="digits", images=[_encoded(digit_png(1))])
            waiting = [stub.Classify.future(request, timeout=10) for _ in range(2)]
            deadline = time.monotonic() + 5
            while server.app.registry.models["digits"].classifier.batcher.queued < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            with pytest.raises(grpc.RpcError) as err:
                stub.Classify(request, timeout=10)
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "queue full" in err.value.details()
            assert all(len(f.result().results) == 1 for f in waiting)
            assert len(stub.Classify(request, timeout=10).results) == 1


def test_a_failed_batch_fails_each_of_its_requests_with_the_cause(serve, repo):
    """onnxruntime raising on a batch: every request of that batch gets INTERNAL with the cause."""
    with serve(repo, max_queue_delay_ms=300, max_batch_size=8) as server:
        classifier = server.app.registry.models["digits"].classifier
        real_infer = classifier.infer
        calls = []

        def broken(pixels):
            calls.append(pixels.shape[0])
            if len(calls) == 1:
                raise RuntimeError("simulated onnxruntime failure")
            return real_infer(pixels)

        classifier.infer = broken
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.InferenceServiceStub(channel)
            request = pb.ClassifyRequest(model="digits", images=[_encoded(digit_png(2))])
            futures = [stub.Classify.future(request, timeout=10) for _ in range(3)]
            errors = []
            for f in futures:
                with pytest.raises(grpc.RpcError) as err:
                    f.result()
                errors.append(err.value)
            assert calls[0] == 3, "the three requests should have shared one batch"
            assert {e.code() for e in errors} == {grpc.StatusCode.INTERNAL}
            assert all("simulated onnxruntime failure" in e.details() for e in errors)
            assert len(stub.Classify(request, timeout=10).results) == 1


def test_bad_requests_in_parallel_with_good_ones_do_not_disturb_them(stub):
    """A bad image in one request never fails another request of the same batch."""
    results: dict[str, list] = {"good": [], "bad": []}

    def good():
        _good(stub)
        results["good"].append(True)

    def bad():
        try:
            stub.Classify(pb.ClassifyRequest(model="digits", images=[_encoded(b"junk")]), timeout=10)
        except grpc.RpcError as exc:
            results["bad"].append(exc.code())

    threads = [threading.Thread(target=fn) for fn in (good, bad) * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert len(results["good"]) == 4 and results["bad"] == [INVALID] * 4


def test_a_clients_value_is_quoted_cut_and_a_message_capped_without_the_repository_path():
    """Issue 32: a 1M-character model name came back whole (RESOURCE_EXHAUSTED "metadata size
    exceeds" over gRPC); admin load errors named the repository's absolute path."""
    assert echo("de") == "'de'" and echo("de", quoted=False) == "de" and echo(7) == "7"
    cut = echo("m" * 1_000_000)
    assert cut == "'" + "m" * 64 + "'... (1,000,000 characters)"
    assert echo("x" * 100, 10, quoted=False) == "xxxxxxxxxx... (100 characters)"
    message = client_message("/srv/repo/broken/model.onnx: truncated; in /srv/repo", ("/srv/repo",))
    assert message == "broken/model.onnx: truncated; in <model repository>"
    long = client_message("y" * 10_000)
    assert len(long) <= MAX_MESSAGE_CHARS and long.endswith("characters cut)")
