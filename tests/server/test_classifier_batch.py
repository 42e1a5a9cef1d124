"""The classifier's batch: raw tensors copied once into the batch buffer and their values checked
in their rows there. Every good image gets what it gets alone, whatever shares its batch; a bad
image is refused for its own request only, with the reason the request-time check gave."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort
import pytest

from attnserve.contract.manifest import load_manifest
from attnserve.server.images.classifier import ImageClassifier, Pixels, RawTensor, Refused
from attnserve.server.shared.config import Settings
from attnserve.server.shared.errors import InvalidRequest

from .conftest import settings_for


@pytest.fixture(scope="module")
def classifier(vit_dirs, repo) -> ImageClassifier:
    manifest = load_manifest(vit_dirs["colors"])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(str(vit_dirs["colors"] / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    settings: Settings = settings_for(repo, max_batch_size=8, max_queue_delay_ms=50.0)
    return ImageClassifier(manifest, session, settings)


def _images(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, 16, 16), dtype=np.float32)  # (n, C, H, W)


@pytest.mark.parametrize("batch", [1, 2, 5, 8])
def test_every_row_of_a_batch_gets_what_it_gets_alone(classifier, batch):
    images = _images(batch, seed=batch)
    alone = np.concatenate([classifier.infer(image[None]) for image in images])  # (B, K)
    got = classifier.infer_items([Pixels(image, True) for image in images])
    np.testing.assert_allclose(np.stack(got), alone, rtol=1e-5, atol=1e-6)


def test_a_refused_row_leaves_the_others_their_own_results(classifier):
    images = _images(4, seed=7)
    alone = np.concatenate([classifier.infer(image[None]) for image in images])  # (4, K)
    bad = images.copy()
    bad[1, 0, 3, 3] = np.nan
    bad[3, 2, 0, 0] = 5e4
    got = classifier.infer_items([Pixels(image, True) for image in bad])
    assert isinstance(got[1], Refused) and got[1].reason == "tensor holds NaN or Inf values"
    assert isinstance(got[3], Refused) and "must lie in -10000..10000" in got[3].reason and "got 50000" in got[3].reason
    np.testing.assert_allclose(got[0], alone[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[2], alone[2], rtol=1e-5, atol=1e-6)
    # the next batch in the same buffer: the refused rows left nothing behind
    again = classifier.infer_items([Pixels(image, True) for image in images])
    np.testing.assert_allclose(np.stack(again), alone, rtol=1e-5, atol=1e-6)
    (alone_bad,) = classifier.infer_items([Pixels(bad[1], True)])
    assert isinstance(alone_bad, Refused)


def test_a_request_with_a_bad_image_is_refused_and_its_batch_mates_are_answered(classifier):
    """Two requests share a batch (queue delay 50 ms): the one with Inf in its second image gets
    INVALID_ARGUMENT naming that image; the other gets its own probabilities."""
    good, bad = _images(2, seed=3), _images(2, seed=4)
    bad[1, 1, 8, 8] = np.inf
    alone = np.concatenate([classifier.infer(image[None]) for image in good])  # (2, K)

    def raw(images: np.ndarray) -> list[RawTensor]:
        return [RawTensor([3, 16, 16], "FP32", image.tobytes()) for image in images]

    async def both():
        await classifier.start()
        try:
            with ThreadPoolExecutor(1) as pool:
                return await asyncio.gather(
                    classifier.classify(raw(good), 1, pool),
                    classifier.classify(raw(bad), 1, pool),
                    return_exceptions=True,
                )
        finally:
            await classifier.stop(1.0)

    answered, refused = asyncio.run(both())
    assert isinstance(refused, InvalidRequest) and str(refused) == "images[1]: tensor holds NaN or Inf values"
    assert [r.batch_size for r in answered] == [4, 4]
    np.testing.assert_allclose(np.stack([r.probabilities for r in answered]), alone, rtol=1e-5, atol=1e-6)


def test_batches_in_flight_together_each_get_their_own_results(vit_dirs, repo):
    """Two batches assembled and run at once from two threads (the batcher's two in flight),
    non-contiguous images among them: each batch's rows keep their own results, round after round
    (each batch in flight holds its own buffer)."""
    manifest = load_manifest(vit_dirs["colors"])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(str(vit_dirs["colors"] / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    classifier = ImageClassifier(manifest, session, settings_for(repo, max_batch_size=8))
    batches = [_images(n, seed=20 + n) for n in (3, 5, 8, 2)]
    alone = [np.concatenate([classifier.infer(image[None]) for image in b]) for b in batches]
    strided = [np.asfortranarray(image) for image in batches[1]]  # copied by numpy, not by bytes

    def items(i: int) -> list[Pixels]:
        return [Pixels(image, True) for image in (strided if i == 1 else batches[i])]

    with ThreadPoolExecutor(2) as pool:
        for _ in range(10):
            rounds = [pool.submit(classifier.infer_items, items(i)) for i in range(len(batches))]
            for i, future in enumerate(rounds):
                np.testing.assert_allclose(np.stack(future.result()), alone[i], rtol=1e-5, atol=1e-6)
    assert len(classifier._buffers) <= 2
