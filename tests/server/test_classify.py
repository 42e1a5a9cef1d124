"""Classify over a real channel: the server's answer equals onnxruntime on the same
preprocessed pixels, alone and under concurrency, and the batcher really batches."""

from __future__ import annotations

import io
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
from PIL import Image

from attnserve.client import AttnServeError
from attnserve.contract.manifest import load_manifest
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
from attnserve.server.images.preprocess import preprocess_image

from .conftest import COLOR_LABELS, DIGIT_LABELS, direct_probs


@pytest.fixture(scope="module")
def server(serve, repo):
    with serve(repo, max_queue_delay_ms=30, max_batch_size=16) as handle:
        yield handle


def _assert_matches(result, probs: np.ndarray, labels: list[str], k: int) -> None:
    expected = np.argsort(-probs, kind="stable")[:k]
    assert [lab.label for lab in result.labels] == [labels[i] for i in expected]
    np.testing.assert_allclose([lab.probability for lab in result.labels], probs[expected], rtol=1e-4, atol=1e-6)


def test_digits_get_the_labels_of_direct_inference(server, vit_dirs, digit_images):
    expected = direct_probs(vit_dirs["digits"], digit_images)
    with server.client() as client:
        results = client.classify(digit_images, "digits", top_k=3)
    assert len(results) == 10
    for result, probs in zip(results, expected):
        _assert_matches(result, probs, DIGIT_LABELS, 3)
        assert result.timing["inference_ms"] > 0


def test_one_image_alone_and_the_default_model_choice_needs_a_name(server, vit_dirs, digit_images):
    expected = direct_probs(vit_dirs["digits"], digit_images[7:8])[0]
    with server.client() as client:
        (result,) = client.classify([digit_images[7]], "digits", top_k=100)  # capped at the label count
        _assert_matches(result, expected, DIGIT_LABELS, 10)
        with pytest.raises(AttnServeError) as err:  # two classifiers served: the name is required
            client.classify([digit_images[7]])
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and "digits" in err.value.details


def test_rgb_model_and_many_input_modes(server, vit_dirs):
    """RGBA, palette, 16-bit, CMYK JPEG and grayscale inputs all reach the RGB model as direct inference says."""
    images = []
    rgba = Image.new("RGBA", (20, 24), (200, 30, 30, 128))
    for image, fmt in [
        (rgba, "PNG"),
        (rgba.convert("P"), "GIF"),
        (Image.fromarray(np.arange(400, dtype=np.uint16).reshape(20, 20) * 160), "PNG"),
        (Image.new("CMYK", (30, 30), (0, 120, 200, 10)), "JPEG"),
        (Image.new("L", (16, 16), 90), "BMP"),
    ]:
        buf = io.BytesIO()
        image.save(buf, fmt)
        images.append(buf.getvalue())
    expected = direct_probs(vit_dirs["colors"], images)
    with server.client() as client:
        results = client.classify(images, "colors", top_k=3)
    for result, probs in zip(results, expected):
        _assert_matches(result, probs, COLOR_LABELS, 3)


def test_raw_tensor_input_equals_the_encoded_image(server, vit_dirs, digit_images):
    prep = load_manifest(vit_dirs["digits"]).preprocessing
    pixels = preprocess_image(digit_images[3], prep, max_pixels=10**6, max_bytes=10**6)  # (1, 16, 16)
    with server.client() as client:
        from_tensor, from_batched_tensor, from_png = client.classify(
            [pixels, pixels[None], digit_images[3]], "digits", top_k=10
        )
    assert from_tensor.labels == from_png.labels == from_batched_tensor.labels


def test_concurrent_requests_are_batched_and_each_gets_its_own_answer(server, vit_dirs, digit_images):
    expected = direct_probs(vit_dirs["digits"], digit_images)
    before_batches = server.metric("attnserve_batch_size_count", model="digits")
    before_items = server.metric("attnserve_batch_size_sum", model="digits")

    def one(i: int):
        with server.client() as client:
            return i, client.classify([digit_images[i % 10]], "digits", top_k=2)[0]

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(one, range(32)))
    for i, result in answers:
        _assert_matches(result, expected[i % 10], DIGIT_LABELS, 2)
    batches = server.metric("attnserve_batch_size_count", model="digits") - before_batches
    items = server.metric("attnserve_batch_size_sum", model="digits") - before_items
    assert items == 32
    assert batches < 32, "32 concurrent requests ran as 32 separate onnxruntime calls: nothing was batched"
    assert max(result.batch_size for _, result in answers) > 1
    assert server.metric("attnserve_requests_total", model="digits", method="Classify", status="OK") >= 32


def test_list_and_get_models(server):
    with server.client() as client:
        models = {m.name: m for m in client.list_models()}
        assert set(models) == {"digits", "colors"}
        digits = client.get_model("digits")
        assert digits.kind == "image-classification" and digits.ready and digits.provider == "cpu"
        assert digits.labels == DIGIT_LABELS and digits.attention == "fused" and digits.precision == "fp32"
        assert digits.limits["max_batch_size"] == 16 and digits.config["image_size"] == "16"
        with pytest.raises(AttnServeError) as err:
            client.get_model("nope")
        assert err.value.code == grpc.StatusCode.NOT_FOUND
    stub = pb_grpc.InferenceServiceStub(grpc.insecure_channel(server.address))
    info = stub.GetModel(pb.GetModelRequest(name="colors"), timeout=10)
    assert list(info.preprocessing.mean) == pytest.approx([0.485, 0.456, 0.406]) and info.preprocessing.channels == 3


def test_health_per_model_and_overall_and_reflection(server):
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    with server.client() as client:
        assert client.health() == "SERVING"
        assert client.health("digits") == "SERVING"
        assert client.health("attnserve.v1.InferenceService") == "SERVING"
        assert client.health("unknown-model") == "SERVICE_UNKNOWN"
    with grpc.insecure_channel(server.address) as channel:
        services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
    assert {"attnserve.v1.InferenceService", "grpc.health.v1.Health"} <= services


def test_reflection_lists_and_describes_every_served_service_by_its_served_name(serve, repo):
    """What grpcurl does: list the services, fetch a service's descriptors by its name, and call
    it with messages built from them alone (KServe's service is served as inference.*, while
    the vendored protos that implement it live in the package attnserve.triton)."""
    from google.protobuf import descriptor_pool, message_factory
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    with serve(repo, enable_admin=True) as server, grpc.insecure_channel(server.address) as channel:
        reflected = ProtoReflectionDescriptorDatabase(channel)
        services = set(reflected.get_services())
        pool = descriptor_pool.DescriptorPool(reflected)
        kserve = pool.FindServiceByName("inference.GRPCInferenceService")
        ready = kserve.methods_by_name["ModelReady"]
        assert ready.input_type.full_name == "inference.ModelReadyRequest"
        call = channel.unary_unary(
            f"/{kserve.full_name}/{ready.name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=message_factory.GetMessageClass(ready.output_type).FromString,
        )
        request = message_factory.GetMessageClass(ready.input_type)(name="digits")
        assert call(request, timeout=10).ready is True
        config = pool.FindMessageTypeByName("inference.ModelConfigResponse").fields_by_name["config"]
        assert config.message_type.full_name == "inference.ModelConfig"  # the imported file, renamed too
        assert pool.FindServiceByName("attnserve.v1.AdminService").methods_by_name["Reload"]
    assert services == {
        "attnserve.v1.InferenceService",
        "attnserve.v1.AdminService",
        "inference.GRPCInferenceService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    }


def test_metrics_over_http(serve, repo, digit_images):
    import urllib.request

    with serve(repo, metrics_port=0) as server:
        with server.client() as client:
            client.classify([digit_images[1]], "digits")
        port = server.app.metrics_port
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert 'attnserve_requests_total{method="Classify",model="digits",status="OK"} 1.0' in body
    assert "attnserve_batch_size_bucket" in body and "attnserve_queue_time_seconds_bucket" in body


def test_deadline_drops_the_work(serve, repo, digit_images):
    """A request whose deadline passes while it waits in the batcher never reaches the model."""
    with serve(repo, max_queue_delay_ms=1500, max_batch_size=64) as server:
        with server.client() as client:
            with pytest.raises(AttnServeError) as err:
                client.classify([digit_images[0]], "digits", timeout=0.3)
            assert err.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            time.sleep(1.6)  # past the batcher's delay: the dropped request would have run by now
            assert server.metric("attnserve_batch_size_count", model="digits") == 0
            assert server.app.registry.models["digits"].classifier.batcher.queued == 0
            assert client.classify([digit_images[0]], "digits", timeout=5)[0].labels  # still serving
