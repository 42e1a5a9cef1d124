"""The access log: one INFO line per request on both doors, a refused one included, never the
text; ``--no-access-log`` turns it off. On the bundled translator, in process (caplog) and as
``attnserve-server`` reads its settings (its stderr)."""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path

import grpc
import pytest

from attnserve.client import AttnServeError
from tests.support.server import ServerProcess, post_json

REPO = Path(__file__).resolve().parents[2] / "models" / "repo"
SECRET = "the quarterly numbers are confidential"
LINE = re.compile(
    r"access: (?P<door>HTTP|gRPC) (?P<route>\S+(?: \S+)?) from \S+ model=(?P<model>\S+) status=(?P<status>\S+) "
    r"(?P<ms>[\d.]+) ms in=(?P<received>\d+) out=(?P<sent>\d+) id=(?P<id>\S+)$"
)


def access_lines(messages: list[str]) -> list[dict[str, str]]:
    return [m.groupdict() for m in map(LINE.search, messages) if m]


def wait_for(lines, count: int) -> list[dict[str, str]]:
    """The access lines once ``count`` are in (HTTP's is written just after the answer is sent)."""
    deadline = time.monotonic() + 10
    while len(found := access_lines(lines())) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return found


def test_every_request_is_one_line_with_its_door_model_status_and_sizes(serve, caplog):
    caplog.set_level(logging.INFO, logger="attnserve.server.access_log")
    with serve(REPO, http_port=0) as server:
        status, ok = post_json(server, "/translate", {"q": SECRET, "source": "en", "target": "de"})
        assert status == 200
        status, refused = post_json(server, "/translate", {"q": SECRET, "target": "de"}, {"X-Request-Id": "r-400"})
        assert status == 400 and "source" in refused["error"]
        with server.client() as client:
            client.translate(SECRET, "translator-en-de")
            with pytest.raises(AttnServeError) as failed:
                client.translate(SECRET, "translator-en-de", beam_size=99)
            assert list(client.translate_stream(SECRET, "translator-en-de"))
        assert failed.value.code == grpc.StatusCode.INVALID_ARGUMENT
        lines = wait_for(lambda: [r.getMessage() for r in caplog.records], 5)
    assert all(r.levelno == logging.INFO for r in caplog.records if "access:" in r.getMessage())
    assert not any(SECRET in r.getMessage() or "quarterly" in r.getMessage() for r in caplog.records)
    http = [line for line in lines if line["door"] == "HTTP"]
    assert [(h["route"], h["status"]) for h in http] == [("POST /translate", "200"), ("POST /translate", "400")]
    assert http[0]["model"] == "translator-en-de" and http[1]["id"] == "r-400"
    for line in http:  # the JSON request, and an answer of a few dozen bytes
        assert int(line["received"]) > len(SECRET) and int(line["sent"]) > 10 and float(line["ms"]) > 0
    rpcs = [line for line in lines if line["door"] == "gRPC"]
    assert [(r["route"], r["model"], r["status"]) for r in rpcs] == [
        ("/attnserve.v1.InferenceService/Translate", "translator-en-de", "OK"),
        ("/attnserve.v1.InferenceService/Translate", "translator-en-de", "INVALID_ARGUMENT"),
        ("/attnserve.v1.InferenceService/TranslateStream", "translator-en-de", "OK"),
    ]
    assert int(rpcs[0]["received"]) > len(SECRET) and int(rpcs[0]["sent"]) > 0 and rpcs[1]["sent"] == "0"
    assert int(rpcs[2]["sent"]) > 0  # every streamed reply counted


def test_above_info_the_access_log_says_nothing(serve, caplog):
    caplog.set_level(logging.WARNING, logger="attnserve.server.access_log")
    with serve(REPO, http_port=0) as server:
        assert post_json(server, "/translate", {"q": SECRET, "target": "de"})[0] == 400
        with server.client() as client, pytest.raises(AttnServeError):
            client.translate(SECRET, "translator-en-de", beam_size=99)
    assert not access_lines([r.getMessage() for r in caplog.records])


def test_no_access_log_turns_it_off(serve, caplog):
    caplog.set_level(logging.INFO, logger="attnserve.server.access_log")
    with serve(REPO, http_port=0, access_log=False) as server:
        assert post_json(server, "/translate", {"q": SECRET, "target": "de"})[0] == 400
        with server.client() as client, pytest.raises(AttnServeError):
            client.translate(SECRET, "translator-en-de", beam_size=99)
    assert not access_lines([r.getMessage() for r in caplog.records])


@pytest.mark.integration  # a server process of its own, as test_cli's
def test_the_server_process_logs_a_refused_request_by_default():
    server = ServerProcess(REPO, "--metrics-port", "-1")
    try:
        server.http_address = f"127.0.0.1:{server.http_port}"
        assert post_json(server, "/translate", {"q": SECRET, "target": "de"})[0] == 400
        (line,) = wait_for(lambda: list(server.log), 1)
        assert (line["door"], line["route"], line["status"]) == ("HTTP", "POST /translate", "400")
        assert not any(SECRET in entry for entry in server.log)
    finally:
        assert server.stop() == 0


@pytest.mark.integration
def test_streams_the_client_cancels_are_logged_and_leave_the_server_up():
    """A stream cancelled after its first chunk ends its handler after grpcio has freed the call:
    the line's client address is read when the handler starts (reading it at the end crashed the
    process)."""
    from attnserve.protos.attnserve.v1 import inference_pb2 as pb
    from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

    server = ServerProcess(REPO, "--metrics-port", "-1", "--http-port", "-1")
    request = pb.TranslateRequest(model="translator-en-de", texts=["Monday, March 3, 2025. Friday, January 9, 2026."])
    try:
        for _ in range(20):
            with grpc.insecure_channel(server.address) as channel:
                call = pb_grpc.InferenceServiceStub(channel).TranslateStream(request, timeout=30)
                next(call)  # the first chunk: decoding has begun
                call.cancel()
        with grpc.insecure_channel(server.address) as channel:  # still serving
            reply = pb_grpc.InferenceServiceStub(channel).Translate(request, timeout=30)
        assert reply.translations[0].hypotheses[0].text
        lines = wait_for(lambda: list(server.log), 21)
        assert server.proc.poll() is None
        assert {line["status"] for line in lines[:20]} <= {"CANCELLED", "OK"}
        assert "CANCELLED" in {line["status"] for line in lines[:20]}
        assert all("from ipv4:127.0.0.1:" in entry for entry in server.log if "access: gRPC" in entry)
    finally:
        assert server.stop() == 0


def test_a_cancelled_stream_counts_as_cancelled_in_the_metrics_as_in_the_log(serve, caplog):
    """However grpcio ends a stream whose client went away (its task cancelled, or the generator
    closed at its pending reply), the request counter says CANCELLED, as the access line does."""
    from attnserve.protos.attnserve.v1 import inference_pb2 as pb
    from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

    caplog.set_level(logging.INFO, logger="attnserve.server.access_log")
    request = pb.TranslateRequest(model="translator-en-de", texts=["Monday, March 3, 2025. Friday, January 9, 2026."])
    with serve(REPO) as server:
        for _ in range(20):
            with grpc.insecure_channel(server.address) as channel:
                call = pb_grpc.InferenceServiceStub(channel).TranslateStream(request, timeout=30)
                next(call)
                call.cancel()
        lines = wait_for(lambda: [r.getMessage() for r in caplog.records], 20)

        def counts() -> dict[str, float]:
            return {
                status: server.metric(
                    "attnserve_requests_total", model="translator-en-de", method="TranslateStream", status=status
                )
                for status in ("OK", "CANCELLED")
            }

        # a stream's access line and its count are written as it ends, the count a moment after
        deadline = time.monotonic() + 10
        while sum((counted := counts()).values()) < 20 and time.monotonic() < deadline:
            time.sleep(0.02)
    logged = [line["status"] for line in lines]
    assert len(logged) == 20 and set(logged) <= {"OK", "CANCELLED"} and "CANCELLED" in logged
    assert counted == {"OK": logged.count("OK"), "CANCELLED": logged.count("CANCELLED")}


def test_an_http_client_that_hangs_up_before_its_answer_gets_a_line(serve, caplog):
    """aiohttp cancels the handler of a client gone before its answer and writes no line; the door
    writes it: status 499, as for a client gone while its body was read, and the metrics' CANCELLED."""
    import socket

    caplog.set_level(logging.INFO, logger="attnserve.server.access_log")
    texts = [f"Monday, March {day}, {year}." for year in range(2000, 2040) for day in range(1, 29)]
    body = json.dumps({"q": " ".join(texts), "source": "en", "target": "de"}).encode()
    with serve(REPO, http_port=0, translation_cache_mb=0) as server:
        host, port = server.http_address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            head = (
                f"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
            )
            sock.sendall(f"{head}\r\n\r\n".encode() + body)
            time.sleep(0.3)  # the body is in: it is being translated
        (line,) = wait_for(lambda: [r.getMessage() for r in caplog.records], 1)
        cancelled = server.metric(
            "attnserve_requests_total", model="translator-en-de", method="libretranslate.translate", status="CANCELLED"
        )
    assert (line["route"], line["status"], line["sent"], line["model"]) == (
        "POST /translate",
        "499",
        "0",
        "translator-en-de",
    )
    assert int(line["received"]) == len(body) and cancelled == 1
