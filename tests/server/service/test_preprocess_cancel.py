"""A client that goes away stops its request's preprocessing: the splitting into sentences and
tokenising that run on the work pool (``--preprocess-threads``) stop at the next text or line,
nothing of the request reaches the decoder after, and the pool serves the other requests.

Splitting is made slow here (each line's sentence segmentation takes 10 ms: a stand-in for a
large file on a busy host), and counted, so that what the server still does for a request after
its client left is seen. A .txt file is one document: its lines are split in one piece of work."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from pathlib import Path

import grpc
import pytest

from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
from attnserve.server.documents import sentences

REPO = Path(__file__).resolve().parents[3] / "models" / "repo"
MODEL = "translator-en-de"
LINES = [f"Line {i} is here." for i in range(600)]  # about 20 characters each
STEP_S = 0.01


@pytest.fixture(scope="module")
def server(serve):
    with serve(REPO, language_detection="off", http_port=0) as handle:  # one preprocess thread
        yield handle


class SlowLines:
    """The sentence segmenter, counted and made slow: one call per line of a text."""

    def __init__(self, monkeypatch) -> None:
        self.calls, self._lock, real = 0, threading.Lock(), sentences._segment

        def slow(*args, **kwargs):
            with self._lock:
                self.calls += 1
            time.sleep(STEP_S)
            return real(*args, **kwargs)

        monkeypatch.setattr(sentences, "_segment", slow)

    def reach(self, n: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.calls < n:
            assert time.monotonic() < deadline, f"{self.calls} lines split, waiting for {n}"
            time.sleep(0.01)

    def settled(self, wait_s: float = 0.5) -> int:
        """The count once it stopped growing (at most a few seconds after the cancel)."""
        before = -1
        while before != self.calls:
            before = self.calls
            time.sleep(wait_s)
        return before


def _tokens(server) -> float:
    return server.metric("attnserve_tokens_generated_total", model=MODEL)


def _still_serves(server) -> None:
    """A request that needs the work pool too (over 2,000 characters) is answered."""
    text = " ".join(["The weather is fine today."] * 100)
    with server.client(timeout=60) as client:
        (result,) = client.translate([text], source_language="en", target_language="de")
    assert result.text


def test_a_file_cancelled_while_it_is_split_stops_splitting_and_decoding(server, monkeypatch):
    lines = SlowLines(monkeypatch)
    tokens = _tokens(server)
    request = pb.TranslateFileRequest(
        content="\n".join(LINES).encode(), filename="lines.txt", source_language="en", target_language="de"
    )
    with grpc.insecure_channel(server.address) as channel:
        call = pb_grpc.InferenceServiceStub(channel).TranslateFile(request, timeout=120)
        lines.reach(200)
        call.cancel()
    at_cancel = lines.calls
    stopped = lines.settled()
    assert stopped - at_cancel <= 50 and stopped < len(LINES) - 100, (at_cancel, stopped)  # within 0.5 s
    assert _tokens(server) == tokens  # none of its sentences reached the decoder
    _still_serves(server)


def test_a_document_whose_http_client_hangs_up_is_split_no_further(server, monkeypatch):
    lines = SlowLines(monkeypatch)
    tokens = _tokens(server)
    body = json.dumps({"q": "\n".join(LINES[:400]), "source": "en", "target": "de"}).encode()
    host, port = server.http_address.rsplit(":", 1)
    head = (
        f"POST /translate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with contextlib.closing(socket.create_connection((host, int(port)), timeout=10)) as sock:
        sock.sendall(head + body)
        lines.reach(20)
    at_close = lines.calls
    stopped = lines.settled()
    assert stopped - at_close <= 50 and stopped < 300, (at_close, stopped)  # within 0.5 s
    assert _tokens(server) == tokens  # nothing of it reached the decoder
    _still_serves(server)
