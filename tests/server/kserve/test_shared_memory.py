"""Triton's system shared memory extension through Triton's own client: tensors in regions of
/dev/shm objects give the replies of the same tensors sent raw; every bad region, key, offset or
size gets a status naming it; the extension is off unless the server is started with it."""

from __future__ import annotations

import queue
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from attnserve.contract.manifest import load_manifest
from attnserve.server.images.preprocess import preprocess_image

tritonclient_grpc = pytest.importorskip("tritonclient.grpc")
shm = pytest.importorskip("tritonclient.utils.shared_memory")
from tritonclient.utils import InferenceServerException  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm on this host")

LABELS = 10  # the digits model's PROBABILITIES per image


@pytest.fixture(scope="module")
def shm_server(serve, kserve_repo):
    with serve(kserve_repo, shared_memory="system") as handle:
        yield handle


@pytest.fixture(scope="module")
def pixels(vit_dirs, digit_images) -> np.ndarray:
    prep = load_manifest(vit_dirs["digits"]).preprocessing
    return np.stack([preprocess_image(d, prep) for d in digit_images[:3]]).astype(np.float32)  # (3, 1, 16, 16)


@pytest.fixture
def client(shm_server):
    triton = tritonclient_grpc.InferenceServerClient(shm_server.address)
    yield triton
    triton.unregister_system_shared_memory()
    triton.close()


@pytest.fixture
def regions():
    """Create /dev/shm objects for a test: ``regions(size)`` -> (handle, key); all destroyed after it."""
    made = []

    def create(size: int):
        key = f"/attnserve-test-{uuid.uuid4().hex[:12]}"
        handle = shm.create_shared_memory_region(key[1:], key, size)
        made.append(handle)
        return handle, key

    yield create
    for handle in made:
        shm.destroy_shared_memory_region(handle)


def error_of(call, *args, **kwargs) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as err:
        call(*args, **kwargs)
    return err.value


def pixels_input(pixels: np.ndarray, region: str | None = None, byte_size: int | None = None, offset: int = 0):
    tensor = tritonclient_grpc.InferInput("PIXELS", list(pixels.shape), "FP32")
    if region is None:
        return tensor.set_data_from_numpy(pixels)
    return tensor.set_shared_memory(region, pixels.nbytes if byte_size is None else byte_size, offset)


def probabilities_output(region: str | None = None, byte_size: int = 0, offset: int = 0):
    out = tritonclient_grpc.InferRequestedOutput("PROBABILITIES")
    if region is not None:
        out.set_shared_memory(region, byte_size, offset)
    return out


def test_inputs_and_outputs_in_shared_memory_give_the_raw_request_s_reply(client, regions, pixels):
    raw = client.infer("digits", [pixels_input(pixels)]).as_numpy("PROBABILITIES")  # (3, 10)
    # one object for both tensors, two regions of it: the output's starts off a page boundary
    handle, key = regions(8192)
    shm.set_shared_memory_region(handle, [pixels])
    out_at, out_bytes = 5000, 3 * LABELS * 4
    client.register_system_shared_memory("pixels", key, pixels.nbytes)
    client.register_system_shared_memory("probs", key, 2000, offset=4000)
    result = client.infer(
        "digits", [pixels_input(pixels, "pixels")], outputs=[probabilities_output("probs", out_bytes, out_at - 4000)]
    )
    reply = result.get_response()
    assert [(o.name, o.datatype, list(o.shape)) for o in reply.outputs] == [("PROBABILITIES", "FP32", [3, LABELS])]
    assert list(reply.raw_output_contents) == [b""]  # the output went to shared memory only
    written = shm.get_contents_as_numpy(handle, np.float32, [3, LABELS], offset=out_at)
    np.testing.assert_allclose(written, raw, atol=1e-6)
    # a raw input with its output in shared memory, and the reverse
    client.infer("digits", [pixels_input(pixels[:1])], outputs=[probabilities_output("probs", LABELS * 4)])
    np.testing.assert_allclose(shm.get_contents_as_numpy(handle, np.float32, [1, LABELS], offset=4000), raw[:1])
    one = client.infer("digits", [pixels_input(pixels[:1], "pixels")]).as_numpy("PROBABILITIES")
    np.testing.assert_allclose(one, raw[:1], atol=1e-6)


def test_an_input_at_an_offset_of_its_region(client, regions, pixels):
    handle, key = regions(pixels[0].nbytes * 3)
    shm.set_shared_memory_region(handle, [pixels])
    client.register_system_shared_memory("all", key, pixels.nbytes)
    second = client.infer("digits", [pixels_input(pixels[1:2], "all", offset=pixels[0].nbytes)])
    np.testing.assert_allclose(
        second.as_numpy("PROBABILITIES"), client.infer("digits", [pixels_input(pixels[1:2])]).as_numpy("PROBABILITIES")
    )


def test_shared_memory_on_a_stream(client, regions, pixels):
    """ModelStreamInfer reads and writes the regions as ModelInfer does."""
    raw = client.infer("digits", [pixels_input(pixels)]).as_numpy("PROBABILITIES")  # (3, 10)
    handle, key = regions(8192)
    shm.set_shared_memory_region(handle, [pixels])
    client.register_system_shared_memory("in", key, pixels.nbytes)
    client.register_system_shared_memory("out", key, 4096, offset=4096)
    replies: queue.Queue = queue.Queue()
    client.start_stream(lambda result, error: replies.put((result, error)))
    try:
        client.async_stream_infer(
            "digits", [pixels_input(pixels, "in")], outputs=[probabilities_output("out", 3 * LABELS * 4)]
        )
        result, error = replies.get(timeout=20)
    finally:
        client.stop_stream()
    assert error is None and list(result.get_response().raw_output_contents) == [b""]
    written = shm.get_contents_as_numpy(handle, np.float32, [3, LABELS], offset=4096)
    np.testing.assert_allclose(written, raw, atol=1e-6)


def test_status_lists_the_regions_and_unregister_removes_one_or_all(client, regions):
    _, key = regions(4096)
    client.register_system_shared_memory("a", key, 4096)
    client.register_system_shared_memory("b", key, 96, offset=4000)
    status = client.get_system_shared_memory_status(as_json=True)["regions"]
    assert {n: (r["key"], int(r.get("offset", 0)), int(r["byte_size"])) for n, r in status.items()} == {
        "a": (key, 0, 4096),
        "b": (key, 4000, 96),
    }
    assert list(client.get_system_shared_memory_status("b", as_json=True)["regions"]) == ["b"]
    client.unregister_system_shared_memory("a")
    assert list(client.get_system_shared_memory_status(as_json=True)["regions"]) == ["b"]
    client.unregister_system_shared_memory()
    assert client.get_system_shared_memory_status(as_json=True).get("regions", {}) == {}
    e = error_of(lambda: client.get_system_shared_memory_status("a"))
    assert e.status() == "StatusCode.NOT_FOUND" and "no shared memory region 'a'" in e.message()


def test_bad_registrations_are_refused_with_the_reason(client, regions):
    _, key = regions(4096)
    client.register_system_shared_memory("r", key, 4096)
    cases = [
        (("r", key, 16), "ALREADY_EXISTS", "'r' is already registered"),
        (("s", key, 4097), "INVALID_ARGUMENT", "offset 0 + byte_size 4097 is past the object's 4096 bytes"),
        (("s", key, 1, 4096), "INVALID_ARGUMENT", "offset 4096 + byte_size 1 is past"),
        (("s", key, 0), "INVALID_ARGUMENT", "byte_size > 0"),
        (("s", "/attnserve-test-none", 16), "NOT_FOUND", "no shared memory object '/attnserve-test-none'"),
        (("s", "/../etc/passwd", 16), "INVALID_ARGUMENT", "is not the name of a POSIX shared memory object"),
        (("s", "/a/b", 16), "INVALID_ARGUMENT", "no other path separator"),
        (("s", "..", 16), "INVALID_ARGUMENT", "no '..'"),
        (("s", "/", 16), "INVALID_ARGUMENT", "is not the name"),
        (("", key, 16), "INVALID_ARGUMENT", "needs a name of 1 to 256 characters"),
        (("n" * 257, key, 16), "INVALID_ARGUMENT", "needs a name of 1 to 256 characters"),
    ]
    for args, status, words in cases:
        e = error_of(client.register_system_shared_memory, *args)
        assert (e.status(), words in e.message()) == (f"StatusCode.{status}", True), (args, e.message())
    assert list(client.get_system_shared_memory_status(as_json=True)["regions"]) == ["r"]


def test_a_key_that_is_not_a_shared_memory_object(client, tmp_path):
    """A symbolic link under /dev/shm (to a file elsewhere) and a folder are not mapped."""
    secret = tmp_path / "secret"
    secret.write_bytes(b"x" * 4096)
    link = Path("/dev/shm") / f"attnserve-test-link-{uuid.uuid4().hex[:8]}"
    folder = Path("/dev/shm") / f"attnserve-test-dir-{uuid.uuid4().hex[:8]}"
    link.symlink_to(secret)
    folder.mkdir()
    try:
        for path in (link, folder):
            e = error_of(client.register_system_shared_memory, "x", "/" + path.name, 16)
            assert e.status() == "StatusCode.INVALID_ARGUMENT" and path.name in e.message(), e.message()
    finally:
        link.unlink()
        folder.rmdir()
    assert client.get_system_shared_memory_status(as_json=True).get("regions", {}) == {}


def test_bad_tensor_regions_are_refused_with_the_reason(client, regions, pixels):
    _, key = regions(8192)
    client.register_system_shared_memory("in", key, pixels.nbytes)
    client.register_system_shared_memory("out", key, 16, offset=4096)
    one = pixels[:1]
    cases = [
        ([pixels_input(one, "nope")], [], "NOT_FOUND", "no shared memory region 'nope' is registered"),
        (
            [pixels_input(one, "in", offset=pixels.nbytes)],
            [],
            "INVALID_ARGUMENT",
            f"shared_memory_offset {pixels.nbytes} + shared_memory_byte_size {one.nbytes} is outside",
        ),
        ([pixels_input(one, "in", byte_size=pixels.nbytes + 4)], [], "INVALID_ARGUMENT", "is outside"),
        (
            [pixels_input(one, "in", byte_size=one.nbytes - 4)],
            [],
            "INVALID_ARGUMENT",
            f"input PIXELS: {one.nbytes - 4} bytes of data; shape [1, 1, 16, 16] FP32 needs {one.nbytes}",
        ),
        (
            [pixels_input(one, "in")],
            [probabilities_output("out", 16)],
            "INVALID_ARGUMENT",
            "output PROBABILITIES: its 40 bytes do not fit the 16 bytes",
        ),
    ]
    for inputs, outputs, status, words in cases:
        e = error_of(client.infer, "digits", inputs, outputs=outputs)
        assert (e.status(), words in e.message()) == (f"StatusCode.{status}", True), e.message()
    both = probabilities_output()
    both._output.parameters["classification"].int64_param = 3
    both._output.parameters["shared_memory_region"].string_param = "out"
    both._output.parameters["shared_memory_byte_size"].int64_param = 16
    e = error_of(lambda: client.infer("digits", [pixels_input(one, "in")], outputs=[both]))
    assert "set either classification or a shared memory region" in e.message()


def test_unregistered_while_a_request_uses_it(serve, kserve_repo, regions, pixels):
    """The request waits in the batcher while its regions are unregistered: it still answers from
    them, and the server goes on serving."""
    with serve(kserve_repo, shared_memory="system", max_queue_delay_ms=600, max_batch_size=8) as server:
        client = tritonclient_grpc.InferenceServerClient(server.address)
        handle, key = regions(8192)
        shm.set_shared_memory_region(handle, [pixels])
        client.register_system_shared_memory("in", key, pixels.nbytes)
        client.register_system_shared_memory("out", key, 4096, offset=4096)
        done, replies = threading.Event(), []
        outputs = [probabilities_output("out", 3 * LABELS * 4)]
        client.async_infer(
            "digits",
            [pixels_input(pixels, "in")],
            lambda result, error: (replies.append((result, error)), done.set()),
            outputs=outputs,
        )
        time.sleep(0.2)  # the request is decoded and waits in the batcher (600 ms) for a fuller batch
        client.unregister_system_shared_memory()
        assert client.get_system_shared_memory_status(as_json=True).get("regions", {}) == {}
        assert done.wait(20) and replies[0][1] is None, replies
        expected = client.infer("digits", [pixels_input(pixels)]).as_numpy("PROBABILITIES")
        np.testing.assert_allclose(
            shm.get_contents_as_numpy(handle, np.float32, [3, LABELS], offset=4096), expected, atol=1e-6
        )
        client.close()


def test_off_unless_the_server_is_started_with_it(server, regions, pixels):
    triton = tritonclient_grpc.InferenceServerClient(server.address)
    _, key = regions(4096)
    for call in (
        lambda: triton.register_system_shared_memory("r", key, 4096),
        lambda: triton.get_system_shared_memory_status(),
        lambda: triton.unregister_system_shared_memory(),
        lambda: triton.infer("digits", [pixels_input(pixels[:1], "r")]),
        lambda: triton.infer("digits", [pixels_input(pixels[:1])], outputs=[probabilities_output("r", 40)]),
    ):
        e = error_of(call)
        assert e.status() == "StatusCode.UNIMPLEMENTED" and "--shared-memory system" in e.message(), e.message()
    assert "system_shared_memory" not in triton.get_server_metadata(as_json=True)["extensions"]
    triton.close()


def test_server_metadata_names_the_extension(client):
    assert "system_shared_memory" in client.get_server_metadata(as_json=True)["extensions"]


def test_the_setting_is_refused_with_several_workers():
    from attnserve.server.shared.config import ConfigError, Settings

    with pytest.raises(ConfigError, match="shared_memory: each worker process keeps its own registered regions"):
        Settings(workers=2, shared_memory="system")
    with pytest.raises(ConfigError, match="shared_memory: invalid value 'cuda'"):
        Settings(shared_memory="cuda")


def _stream(client, requests: list[tuple[str, list, list]]) -> list[tuple]:
    """Send ``(id, inputs, outputs)`` requests on one stream at once -> their (result, error)s."""
    replies: queue.Queue = queue.Queue()
    client.start_stream(lambda result, error: replies.put((result, error)))
    try:
        for request_id, inputs, outputs in requests:
            client.async_stream_infer("digits", inputs, outputs=outputs, request_id=request_id)
        return [replies.get(timeout=20) for _ in requests]
    finally:
        client.stop_stream()


def test_images_of_several_requests_batched_from_their_regions(serve, kserve_repo, regions):
    """Requests of 1, 2 and 3 images, each in its own region, sent together on a stream: they
    share a batch, each reply is its raw request's; a region rewritten between two requests
    gives the new images' reply; NaN in one image refuses its request alone."""
    rng = np.random.default_rng(5)
    images = [rng.standard_normal((n, 1, 16, 16), dtype=np.float32) for n in (1, 2, 3)]
    with serve(kserve_repo, shared_memory="system", max_queue_delay_ms=300, max_batch_size=8) as server:
        client = tritonclient_grpc.InferenceServerClient(server.address)
        handles = []
        for i, pixels in enumerate(images):
            handle, key = regions(8192)
            shm.set_shared_memory_region(handle, [pixels])
            client.register_system_shared_memory(f"in{i}", key, pixels.nbytes)
            client.register_system_shared_memory(f"out{i}", key, 4096, offset=4096)
            handles.append(handle)

        def raw(pixels: np.ndarray) -> np.ndarray:
            return client.infer("digits", [pixels_input(pixels)]).as_numpy("PROBABILITIES")  # (n, 10)

        def requests():
            return [
                (str(i), [pixels_input(p, f"in{i}")], [probabilities_output(f"out{i}", len(p) * LABELS * 4)])
                for i, p in enumerate(images)
            ]

        def written(i: int) -> np.ndarray:
            return shm.get_contents_as_numpy(handles[i], np.float32, [len(images[i]), LABELS], offset=4096)

        batches, rows = (server.metric(f"attnserve_batch_size_{s}", model="digits") for s in ("count", "sum"))
        replies = _stream(client, requests())
        assert all(error is None for _, error in replies), replies
        assert server.metric("attnserve_batch_size_count", model="digits") - batches == 1  # one batch ...
        assert server.metric("attnserve_batch_size_sum", model="digits") - rows == 6  # ... of the 6 images
        for i, pixels in enumerate(images):
            np.testing.assert_allclose(written(i), raw(pixels), atol=1e-6)

        first = written(1).copy()
        images[1] = rng.standard_normal((2, 1, 16, 16), dtype=np.float32)
        shm.set_shared_memory_region(handles[1], [images[1]])
        _stream(client, requests())
        np.testing.assert_allclose(written(1), raw(images[1]), atol=1e-6)
        assert not np.allclose(written(1), first)

        images[2][1, 0, 4, 4] = np.nan
        shm.set_shared_memory_region(handles[2], [images[2]])
        shm.set_shared_memory_region(handles[0], [np.zeros((1, 1, 16, 16), np.float32)], offset=4096)
        replies = _stream(client, requests()[::-1])
        errors = [e.message() for _, e in replies if e is not None]
        assert errors == ["images[1]: tensor holds NaN or Inf values"], replies
        np.testing.assert_allclose(written(0), raw(images[0]), atol=1e-6)
        client.close()
