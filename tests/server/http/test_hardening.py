"""Hostile HTTP clients (issue 32): slow heads and bodies, huge bodies, keys in headers, text
that is not Unicode, made-up model names, hang-ups, probes without a token. Each attack is
small (a handful of sockets against a server with two call slots and one-second timeouts)
and every loop is bounded.

The server holds the word reverser (``"t5 t9 t17"`` -> ``"t17 t9 t5"``) and the digits ViT,
with bearer tokens on.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from attnserve.client import AttnServeError, Client

TOKEN = "hardening-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SLOTS = 2  # --max-concurrent-rpcs
TIMEOUT_S = 1.0  # --http-header-timeout-s and --http-body-timeout-s
MAX_TEXT_CHARS = 4000


@pytest.fixture(scope="module")
def hardened(serve, kserve_repo):
    settings = dict(
        http_port=0,
        auth_tokens=TOKEN,
        max_concurrent_rpcs=SLOTS,
        http_header_timeout_s=TIMEOUT_S,
        http_body_timeout_s=TIMEOUT_S,
        max_text_chars=MAX_TEXT_CHARS,
        max_request_chars=2 * MAX_TEXT_CHARS,
        stream_interval_ms=0,
    )
    with serve(kserve_repo, **settings) as handle:
        yield handle


def request(server, method: str, path: str, body: bytes | dict | None = None, headers: dict | None = None):
    """(status, decoded JSON body or the raw text) of one request."""
    data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **(headers or {})}
    req = urllib.request.Request(f"http://{server.http_address}{path}", data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as reply:
            status, raw = reply.status, reply.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode("utf-8", "replace")


def raw_socket(server, timeout: float = 10.0) -> socket.socket:
    host, port = server.http_address.split(":")
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    return sock


def head(path: str, length: int, headers: dict | None = None) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: x", "Content-Type: application/json", f"Content-Length: {length}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_reply(sock: socket.socket) -> tuple[int, bytes]:
    """(status, everything the server sent until it closed or went quiet) of one raw exchange."""
    data = b""
    with contextlib.suppress(socket.timeout, ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
            if b"\r\n\r\n" in data and data.split(b"\r\n\r\n", 1)[1].rstrip().endswith(b"}"):
                break
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1") else 0
    return status, data


# -------------------------------------------------------------------------- finding 1, 13


def test_slow_bodies_hold_no_call_slot_and_are_cut_at_the_body_timeout(hardened):
    """Twice as many clients as slots trickle their bodies; a keyed client is still served at once,
    and each slow client gets 408 and "Connection: close" after --http-body-timeout-s."""
    slow = []
    for _ in range(2 * SLOTS):
        sock = raw_socket(hardened)
        sock.sendall(head("/translate", 100_000) + b"{")
        slow.append(sock)
    try:
        time.sleep(0.3)  # the slow requests' heads are in: before issue 32 they held both slots
        for _ in range(3):
            status, reply = request(hardened, "POST", "/v2/models/reverser/generate", {"text_input": "t5 t9 t17"}, AUTH)
            assert (status, reply.get("text_output")) == (200, "t17 t9 t5"), reply
        for sock in slow:
            status, data = read_reply(sock)
            assert status == 408, data
            assert b"--http-body-timeout-s" in data
            assert b"Connection: close" in data  # and the connection closes: its body is not waited for
    finally:
        for sock in slow:
            sock.close()
    refused = hardened.metric(
        "attnserve_requests_total", model="-", method="libretranslate.translate", status="DEADLINE_EXCEEDED"
    )
    assert refused >= 2 * SLOTS


def test_a_client_that_hangs_up_mid_body_is_cancelled_not_an_internal_error(hardened):
    labels = dict(model="-", method="libretranslate.translate")
    before = hardened.metric("attnserve_requests_total", **labels, status="CANCELLED")
    for _ in range(3):
        with contextlib.closing(raw_socket(hardened)) as sock:
            sock.sendall(head("/translate", 100_000) + b'{"q": "t5')
            time.sleep(0.1)
    deadline = time.monotonic() + 10
    while (
        time.monotonic() < deadline
        and hardened.metric("attnserve_requests_total", **labels, status="CANCELLED") < before + 3
    ):
        time.sleep(0.05)
    assert hardened.metric("attnserve_requests_total", **labels, status="CANCELLED") == before + 3
    assert hardened.metric("attnserve_requests_total", **labels, status="INTERNAL") == 0


def test_a_slow_request_head_is_closed_at_the_header_timeout(hardened):
    sock = raw_socket(hardened)
    try:
        sock.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\n")  # and nothing more
        start = time.monotonic()
        with contextlib.suppress(ConnectionResetError):
            assert sock.recv(1) == b""  # the server closed it (before issue 32: after an hour)
        assert time.monotonic() - start < 10 * TIMEOUT_S
    finally:
        sock.close()


def test_a_key_in_the_header_is_checked_before_the_body_is_read(hardened):
    """A wrong key in the header: 403 on the head alone, the announced body never sent."""
    for path in ("/translate", "/detect"):
        with contextlib.closing(raw_socket(hardened, timeout=5 * TIMEOUT_S)) as sock:
            sock.sendall(head(path, 100_000, {"Authorization": "Bearer wrong-key-0123456789"}))
            status, data = read_reply(sock)
        assert status == 403 and b"Invalid API key" in data, data
    # a right key in the header is taken; LibreTranslate's api_key in the body still works
    body = {"q": "t5 t9", "source": "en", "target": "de"}
    for headers, fields in ((AUTH, {}), ({}, {"api_key": TOKEN})):
        status, reply = request(hardened, "POST", "/translate", {**body, **fields}, headers)
        assert status in (200, 400), reply  # the reverser serves no language pair: 400 names it, past the key
        assert "API key" not in str(reply)
    status, reply = request(hardened, "POST", "/translate", {**body, "api_key": "wrong-key-0123456789"})
    assert status == 403 and reply == {"error": "Invalid API key"}


@pytest.mark.parametrize("path", ["/translate", "/v2/models/reverser/generate"])
def test_a_text_route_refuses_a_body_larger_than_its_texts_can_be_unread(hardened, path):
    """50 MB announced to a text route: 413 at once, naming the limit, without waiting for the body."""
    with contextlib.closing(raw_socket(hardened, timeout=5 * TIMEOUT_S)) as sock:
        sock.sendall(head(path, 50_000_000, AUTH if "generate" in path else {}))
        status, data = read_reply(sock)
    assert status == 413 and b"--max-request-chars" in data, data


def test_a_large_json_body_answers_as_the_binary_form(hardened):
    """A KServe infer body over ParseProcess' inline size (here 2 MB of JSON, padded) is parsed
    in the child process and answers exactly as the same tensor sent as binary data."""
    pixels = [[[[(i * 7 + j) % 11 / 10.0 for j in range(16)] for i in range(16)]]] * 2
    doc = {"inputs": [{"name": "PIXELS", "datatype": "FP32", "shape": [2, 1, 16, 16], "data": pixels}]}
    small = json.dumps(doc).encode()
    large = small + b" " * (2 << 20)
    answers = [request(hardened, "POST", "/v2/models/digits/infer", body, AUTH) for body in (small, large)]
    assert answers[0][0] == 200 and answers[0] == answers[1], answers


def test_other_calls_are_answered_while_a_huge_json_body_is_parsed(hardened):
    """45 MB of JSON numbers (about 1-4 s of parsing) to KServe infer: the event loop goes on
    answering others meanwhile (the parse holds the GIL, so it runs in a child process); the
    infer is then refused for its size in images, after the parse."""
    images = 20_000
    body = b'{"inputs": [{"name": "PIXELS", "datatype": "FP32", "shape": [%d, 1, 16, 16], "data": [%s]}]}' % (
        images,
        b",".join([b"0.123456789"] * (images * 256)),
    )
    done = threading.Event()
    answered_meanwhile = 0
    outcome: list = []

    def infer() -> None:
        outcome.append(request(hardened, "POST", "/v2/models/digits/infer", body, AUTH))
        done.set()

    thread = threading.Thread(target=infer)
    thread.start()
    for _ in range(600):  # bounded: at most 60 s
        status, _ = request(hardened, "GET", "/v2/models/digits", None, AUTH)
        if done.is_set():
            break
        answered_meanwhile += status == 200
        time.sleep(0.1)
    thread.join(60)
    status, reply = outcome[0]
    assert status == 400 and f"{images} images" in reply["error"], reply
    assert answered_meanwhile >= 5, f"only {answered_meanwhile} calls answered while the body was parsed"


# ------------------------------------------------------------------------------ finding 2


def test_target_prefix_is_limited_in_characters_and_tokenised_off_the_event_loop(hardened, monkeypatch):
    from attnserve.server.service import languages

    long_prefix = " ".join(["t5"] * (MAX_TEXT_CHARS // 3 + 10))  # over the limit
    body = {"text_input": "t5 t9", "parameters": {"target_prefix": long_prefix}}
    status, reply = request(hardened, "POST", "/v2/models/reverser/generate", body, AUTH)
    assert status == 400 and "target_prefix" in reply["error"] and f"{MAX_TEXT_CHARS:,}" in reply["error"], reply

    threads: list[str] = []
    encode = languages.target_side

    def recording(tokenizer):
        threads.append(threading.current_thread().name)
        return encode(tokenizer)

    monkeypatch.setattr(languages, "target_side", recording)
    under = " ".join(["t5"] * 800)  # 2,399 characters: within the limit, over the inline size
    body = {"text_input": "t5 t9", "parameters": {"target_prefix": under}}
    request(hardened, "POST", "/v2/models/reverser/generate", body, AUTH)  # too many tokens for the model: 400
    short = {"text_input": "t5 t9", "parameters": {"target_prefix": "t9"}}
    assert request(hardened, "POST", "/v2/models/reverser/generate", short, AUTH)[0] == 200
    assert threads[0].startswith("preprocess") and not threads[1].startswith("preprocess"), threads


def test_a_language_code_is_limited_in_characters_before_it_is_parsed(hardened):
    for name in ("source_language", "target_language"):
        body = {"text_input": "t5 t9", "parameters": {name: "de-" + "x" * 10_000}}
        status, reply = request(hardened, "POST", "/v2/models/reverser/generate", body, AUTH)
        assert status == 400 and f"{name} is 10,003 characters" in reply["error"], reply


def test_a_document_of_many_segments_is_deduplicated_and_joined_off_the_event_loop(hardened, monkeypatch):
    """Finding 9: 9,000 html segments cost about 100 ms of Python to deduplicate and join back,
    which runs on the work pool (a document of a few segments stays on the event loop)."""
    from attnserve.server.service import documents

    threads: dict[str, list[str]] = {"distinct": [], "join": []}
    for name in threads:
        original = getattr(documents, f"_{name}")

        def recording(*args, _name=name, _original=original):
            threads[_name].append(threading.current_thread().name)
            return _original(*args)

        monkeypatch.setattr(documents, f"_{name}", recording)
    many = "<p>t5 t9</p>" * (documents.INLINE_SEGMENTS + 1)
    for text in ("<b>t5 t9</b> t17", many):
        body = {"text_input": text, "parameters": {"format": "html"}}
        status, reply = request(hardened, "POST", "/v2/models/reverser/generate", body, AUTH)
        assert status == 200, reply
    assert reply["text_output"] == "<p>t9 t5</p>" * (documents.INLINE_SEGMENTS + 1), reply
    for name, seen in threads.items():
        assert not seen[0].startswith("preprocess") and seen[1].startswith("preprocess"), (name, seen)


# ------------------------------------------------------------------------------ finding 3


def test_metrics_are_labelled_only_with_served_model_names(hardened):
    names = [f"made-up-{uuid.uuid4().hex[:8]}" for _ in range(6)]
    for name in names:
        status, _ = request(hardened, "POST", f"/v2/models/{name}/generate", {"text_input": "t5"}, AUTH)
        assert status == 404
    with Client(hardened.address, retries=0, timeout=20, token=TOKEN) as client:
        for name in names:
            with pytest.raises(AttnServeError):
                client.translate(["t5"], name)
    labels = {s.labels.get("model") for metric in hardened.app.metrics.registry.collect() for s in metric.samples}
    assert not labels & set(names) and "reverser" in labels
    unknown = hardened.metric("attnserve_requests_total", model="-", method="triton.http.Generate", status="NOT_FOUND")
    assert unknown >= len(names)
    assert not set(hardened.app.calls.stats) & set(names)  # KServe's statistics: served models only


# ------------------------------------------------------------------------------ finding 4


def test_health_watch_streams_the_serving_status(hardened):
    with grpc.insecure_channel(hardened.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "reverser"):
            watch = stub.Watch(health_pb2.HealthCheckRequest(service=service), timeout=10)
            first = next(watch)
            watch.cancel()
            assert first.status == health_pb2.HealthCheckResponse.SERVING


# ------------------------------------------------------------------------------ finding 5


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v2/models/reverser/generate", b'{"text_input": "t5 \\ud800 t9"}'),
        ("/v2/models/reverser/generate_stream", b'{"text_input": "t5 \\udfff"}'),
        ("/v2/models/reverser/generate", b'{"text_input": "t5", "parameters": {"target_prefix": "\\ud800"}}'),
        ("/translate", b'{"q": ["t5", "\\uDBFF t9"], "source": "en", "target": "de"}'),
    ],
)
def test_text_that_is_not_unicode_is_a_400(hardened, path, body):
    status, reply = request(hardened, "POST", path, body, AUTH)
    assert status == 400 and "surrogate" in reply["error"], reply


def test_a_surrogate_pair_is_one_character_and_translates(hardened):
    body = b'{"text_input": "t5 t9 \\ud83d\\ude00"}'
    status, reply = request(hardened, "POST", "/v2/models/reverser/generate", body, AUTH)
    assert status == 200, reply


# ------------------------------------------------------------------------------ finding 7


def test_a_model_ready_probe_without_a_token_names_no_model(hardened):
    status, reply = request(hardened, "GET", "/v2/models/nope/ready")
    assert status == 400 and "nope" in reply["error"]
    assert "reverser" not in reply["error"] and "digits" not in reply["error"]
    assert request(hardened, "GET", "/v2/models/reverser/ready")[0] == 200  # still a probe
    status, reply = request(hardened, "GET", "/v2/models/nope/ready", headers=AUTH)
    assert status == 400 and "reverser" in reply["error"]  # with a token: what is served


# ------------------------------------------------------------------------------ finding 8


def test_a_stream_client_that_hangs_up_is_cancelled_not_an_internal_error(hardened, monkeypatch, caplog):
    """The client goes away as the stream ends: the end of the stream meets a closing connection."""
    from aiohttp import web

    def gone(self, data=b""):
        raise ConnectionResetError("Cannot write to closing transport")

    monkeypatch.setattr(web.StreamResponse, "write_eof", gone)
    before = hardened.metric(
        "attnserve_requests_total", model="reverser", method="triton.http.GenerateStream", status="CANCELLED"
    )
    with contextlib.closing(raw_socket(hardened)) as sock:
        body = json.dumps({"text_input": "t5 t9 t17"}).encode()
        sock.sendall(head("/v2/models/reverser/generate_stream", len(body), AUTH) + body)
        sock.settimeout(5)
        data = b""
        with contextlib.suppress(socket.timeout, ConnectionResetError):
            while chunk := sock.recv(65536):
                data += chunk
        assert b"t17" in data  # the events went out; only the stream's end met the closed connection
    deadline = time.monotonic() + 10
    labels = dict(model="reverser", method="triton.http.GenerateStream")
    while (
        time.monotonic() < deadline
        and hardened.metric("attnserve_requests_total", **labels, status="CANCELLED") == before
    ):
        time.sleep(0.05)
    assert hardened.metric("attnserve_requests_total", **labels, status="CANCELLED") == before + 1
    assert hardened.metric("attnserve_requests_total", **labels, status="INTERNAL") == 0
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br"])
def test_a_body_not_in_its_content_encoding_is_a_400_at_once(hardened, encoding, caplog):
    # it waited for an end of the body that never came (408 at the body timeout), and aiohttp logged
    # an ERROR with a traceback as it drained the request
    body = json.dumps({"q": "t5 t9", "source": "en", "target": "de"}).encode()
    status, reply = request(hardened, "POST", "/translate", body, {"Content-Encoding": encoding, **AUTH})
    assert status == 400 and "cannot be read" in reply["error"] and encoding in reply["error"], reply
    time.sleep(0.2)  # the drain after the answer
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    assert request(hardened, "GET", "/v2/health/ready")[0] == 200
