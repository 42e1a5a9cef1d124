"""The Python client against a scripted server: what a caller sees of streams and retries."""

from __future__ import annotations

import threading

from attnserve.client import Client
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc


class HeldStream(pb_grpc.InferenceServiceServicer):
    """Sends the first chunk of a translation, then holds the last one back until the caller has
    the first (or 10 s pass): a long document whose first sentence is ready well before its end."""

    def __init__(self) -> None:
        self.caller_has_first = threading.Event()
        self.last_waited_for: bool | None = None

    def TranslateStream(self, request, context):
        yield pb.TranslateChunk(delta="Montag")
        self.last_waited_for = self.caller_has_first.wait(10)
        yield pb.TranslateChunk(delta=".", finish_reason=pb.FINISH_REASON_EOS)


def test_a_stream_yields_each_chunk_as_it_arrives_not_once_the_server_is_done(scripted):
    servicer = HeldStream()
    with Client(scripted(servicer), retries=0, timeout=30) as client:
        chunks = client.translate_stream("Monday.")
        assert next(chunks).delta == "Montag"
        servicer.caller_has_first.set()
        assert [chunk.delta for chunk in chunks] == ["."]
    assert servicer.last_waited_for is True  # the first chunk reached the caller while the server held the last
