"""Clients that go away mid-call, on every streaming RPC of both gRPC services and on the HTTP
door's streams and uploads, as ``attnserve-server`` runs (its access log at INFO): the process
stays up, logs no error and answers the next request (a stream cancelled after its first chunk
used to crash it: the access log read the client's address from a call grpcio had freed)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from attnserve.protos.attnserve.triton import grpc_service_pb2 as kpb
from attnserve.protos.attnserve.triton import grpc_service_pb2_grpc as kpb_grpc
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
from tests.support.server import ServerProcess

from .conftest import digit_png

pytestmark = pytest.mark.integration  # a server process of its own

REPO = Path(__file__).resolve().parents[2] / "models" / "repo"
MODEL = "translator-en-de"
TEXT = "Monday, March 3, 2025. Friday, January 9, 2026. Three hundred forty-two kilometers."
DOCUMENT = "\n".join(
    f"on {day} March {year} at {day % 12 + 1}:15 PM" for year in range(1990, 2010) for day in range(1, 29)
)
TIMES = 5


def _first_then_cancel(call) -> None:
    try:
        next(call)
    except (StopIteration, grpc.RpcError):
        pass
    call.cancel()


def _stream_cancelled(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.InferenceServiceStub(channel)
        _first_then_cancel(stub.TranslateStream(pb.TranslateRequest(model=MODEL, texts=[TEXT]), timeout=30))


def _file_cancelled(server: ServerProcess) -> None:
    request = pb.TranslateFileRequest(content=DOCUMENT.encode(), filename="dates.txt", target_language="de")
    with grpc.insecure_channel(server.address) as channel:
        _first_then_cancel(pb_grpc.InferenceServiceStub(channel).TranslateFile(request, timeout=60))


def _unary_cancelled(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.InferenceServiceStub(channel)
        translating = stub.Translate.future(pb.TranslateRequest(model=MODEL, texts=[TEXT] * 16), timeout=30)
        images = [pb.ImageInput(encoded=digit_png(d % 10)) for d in range(16)]
        classifying = stub.Classify.future(pb.ClassifyRequest(model="digits-vit", images=images), timeout=30)
        time.sleep(0.002)
        translating.cancel()
        classifying.cancel()


def _kserve_stream_cancelled(server: ServerProcess) -> None:
    def requests():
        for i in range(4):
            request = kpb.ModelInferRequest(model_name=MODEL, id=str(i))
            tensor = request.inputs.add(name="TEXT", datatype="BYTES", shape=[1])
            tensor.contents.bytes_contents.append(TEXT.encode())
            yield request
        time.sleep(2)  # the stream stays open: the client goes away first

    with grpc.insecure_channel(server.address) as channel:
        _first_then_cancel(kpb_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(requests(), timeout=30))


def _channel_closed_mid_stream(server: ServerProcess) -> None:
    channel = grpc.insecure_channel(server.address)
    call = pb_grpc.InferenceServiceStub(channel).TranslateStream(
        pb.TranslateRequest(model=MODEL, texts=[TEXT]), timeout=30
    )
    next(call)
    channel.close()


def _http_post_then_hang_up(server: ServerProcess, path: str, content_type: str, body: bytes, read: bool) -> None:
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as sock:
        head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
        sock.sendall(head.encode() + body)
        if read:
            sock.recv(64)  # the first bytes of the answer: it is under way


def _http_stream_hung_up(server: ServerProcess) -> None:
    body = json.dumps({"text_input": TEXT}).encode()
    _http_post_then_hang_up(server, f"/v2/models/{MODEL}/generate_stream", "application/json", body, read=True)


def _http_upload_hung_up(server: ServerProcess) -> None:
    parts = [("file", 'filename="dates.txt"', DOCUMENT), ("source", "", "en"), ("target", "", "de")]
    body = "".join(
        f'--XX\r\nContent-Disposition: form-data; name="{name}"{"; " + extra if extra else ""}\r\n\r\n{value}\r\n'
        for name, extra, value in parts
    )
    _http_post_then_hang_up(
        server, "/translate_file", "multipart/form-data; boundary=XX", f"{body}--XX--\r\n".encode(), read=False
    )


HANGUPS: dict[str, Callable[[ServerProcess], None]] = {
    "TranslateStream cancelled": _stream_cancelled,
    "TranslateFile cancelled": _file_cancelled,
    "Translate and Classify cancelled": _unary_cancelled,
    "KServe ModelStreamInfer cancelled": _kserve_stream_cancelled,
    "channel closed mid-stream": _channel_closed_mid_stream,
    "HTTP generate_stream hung up": _http_stream_hung_up,
    "HTTP translate_file hung up": _http_upload_hung_up,
}


def test_clients_that_go_away_mid_call_leave_the_server_up_and_quiet():
    server = ServerProcess(REPO, "--metrics-port", "-1")
    try:
        for name, hang_up in HANGUPS.items():
            for _ in range(TIMES):
                hang_up(server)
            assert server.proc.poll() is None, f"the server died after: {name}\n" + "".join(server.log[-20:])
        with grpc.insecure_channel(server.address) as channel:
            reply = pb_grpc.InferenceServiceStub(channel).Translate(
                pb.TranslateRequest(model=MODEL, texts=[TEXT]), timeout=30
            )
        assert reply.translations[0].hypotheses[0].text
        time.sleep(0.5)  # what the server logs as the calls wind down
    finally:
        code = server.stop()
    noise = [line for line in server.log if " ERROR " in line or "Traceback" in line or " WARNING " in line]
    assert noise == []
    assert code == 0
    cancelled = [line for line in server.log if "access: gRPC" in line and "status=CANCELLED" in line]
    assert len(cancelled) >= TIMES  # the access log saw them go
