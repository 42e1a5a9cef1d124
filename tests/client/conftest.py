"""A scripted attnserve.v1 server for the client's tests: each test gives the servicer whose
answers it needs (a stream held back, a call refused as UNAVAILABLE), on 127.0.0.1, port 0."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent import futures

import grpc
import pytest

from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc


@pytest.fixture
def scripted() -> Iterator[Callable[[pb_grpc.InferenceServiceServicer], str]]:
    """``scripted(servicer)`` serves it and returns its HOST:PORT; stopped after the test."""
    servers: list[grpc.Server] = []

    def serve(servicer: pb_grpc.InferenceServiceServicer) -> str:
        server = grpc.server(futures.ThreadPoolExecutor(4))
        pb_grpc.add_InferenceServiceServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield serve
    for server in servers:
        server.stop(None)
