"""Image decoding is bounded per request and dropped at the deadline (issue 32, finding 6): 64
images of 25 megapixels each took 20 s to decode, and the server kept decoding after the
client's deadline had passed."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from attnserve.client import AttnServeError
from attnserve.server.images import classifier

from .conftest import digit_png

PIXELS = 28 * 28  # one digit_png


def test_the_images_of_one_request_are_limited_in_pixels_before_any_decodes(serve, repo, monkeypatch):
    decoded = []
    decode = classifier.preprocess_image
    monkeypatch.setattr(
        classifier, "preprocess_image", lambda data, *a, **kw: decoded.append(1) or decode(data, *a, **kw)
    )
    with serve(repo, max_request_pixels=2 * PIXELS) as server, server.client() as client:
        assert len(client.classify([digit_png(1), digit_png(2)], "digits")) == 2
        with pytest.raises(AttnServeError) as err:
            client.classify([digit_png(d) for d in range(3)], "digits")
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "--max-request-pixels" in err.value.details and f"{3 * PIXELS:,}" in err.value.details
    assert len(decoded) == 2  # the refused request decoded nothing


def test_decoding_stops_when_the_deadline_passes(serve, repo, monkeypatch):
    """40 images at 50 ms each and a 0.4 s deadline: the server stops decoding soon after it."""
    decoded: list[float] = []
    lock = threading.Lock()
    decode = classifier.preprocess_image

    def slow(data, *args, **kwargs):
        time.sleep(0.05)
        with lock:
            decoded.append(time.monotonic())
        return decode(data, *args, **kwargs)

    monkeypatch.setattr(classifier, "preprocess_image", slow)
    images = [digit_png(d % 10) for d in range(40)]
    with serve(repo) as server, server.client() as client:
        with pytest.raises(AttnServeError) as err:
            client.classify(images, "digits", timeout=0.4)
        assert err.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        time.sleep(1.0)  # before issue 32 the server went on to decode all 40 (2 s)
        stopped = len(decoded)
        time.sleep(0.5)
        assert len(decoded) == stopped < 20, f"{len(decoded)} of 40 images decoded after the deadline"
        assert len(client.classify(images[:2], "digits")) == 2  # the pool serves the next request
