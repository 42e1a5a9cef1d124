"""Triton's generate extension over HTTP: ``generate`` with plain HTTP, ``generate_stream`` with curl.

The translator reverses words (``"t5 t9 t17"`` -> ``"t17 t9 t5"``), so a wrong, reordered or
truncated answer shows; a stream's deltas must concatenate to exactly that text.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from .conftest import reverse

CURL = shutil.which("curl")
needs_curl = pytest.mark.skipif(CURL is None, reason="curl is not installed")


def post(server, path: str, body: bytes | dict, headers: dict | None = None):
    """(status, headers, decoded JSON body) of one POST."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(f"http://{server.http_address}{path}", data=data, method="POST", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as reply:
            return reply.status, dict(reply.headers), json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read())


def curl_stream(server, model: str, body: dict) -> tuple[str, list[dict]]:
    """(Content-Type, events) of generate_stream as curl sees it."""
    url = f"http://{server.http_address}/v2/models/{model}/generate_stream"
    out = subprocess.run(
        [CURL, "-sN", "-D", "-", "-X", "POST", url, "-H", "Content-Type: application/json", "-d", json.dumps(body)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    head, _, payload = out.partition("\n\n")  # text mode: CRLF read as LF
    content_type = next(
        line.split(":", 1)[1].strip() for line in head.splitlines() if line.lower().startswith("content-type")
    )
    events = [json.loads(line[len("data: ") :]) for line in payload.split("\n\n") if line.startswith("data: ")]
    assert payload.replace("\n", "") == "".join(f"data: {json.dumps(e, ensure_ascii=False)}" for e in events)
    return content_type, events


@pytest.mark.parametrize("path", ["/v2/models/reverser/generate", "/v2/models/reverser/versions/1/generate"])
def test_generate_answers_the_translation(server, path):
    status, headers, reply = post(server, path, {"text_input": "t5 t9 t17", "parameters": {"beam_size": 3}})
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert reply == {"model_name": "reverser", "model_version": "1", "text_output": "t17 t9 t5"}
    assert post(server, path, {"text_input": "t23 t8 t8 t11"})[2]["text_output"] == "t11 t8 t8 t23"


def test_generate_takes_a_format_and_keeps_html_markup(server):
    body = {"text_input": "<p>t5 t9</p><p>t17</p>", "parameters": {"format": "html"}}
    assert post(server, "/v2/models/reverser/generate", body)[2]["text_output"] == "<p>t9 t5</p><p>t17</p>"
    status, _, reply = post(server, "/v2/models/reverser/generate", {**body, "parameters": {"format": "xml"}})
    assert status == 400 and "format: unknown value 'xml' (one of text, html, markdown)" in reply["error"]


@needs_curl
def test_generate_stream_deltas_concatenate_to_the_translation(server):
    text = "t23 t8 t8 t11 t6 t20"
    content_type, events = curl_stream(server, "reverser", {"text_input": text, "parameters": {"max_new_tokens": 12}})
    assert content_type.startswith("text/event-stream")
    assert len(events) >= 3  # streamed piece by piece, not one event holding the whole text
    assert all(set(e) == {"model_name", "model_version", "text_output"} for e in events)
    assert {e["model_name"] for e in events} == {"reverser"}
    assert "".join(e["text_output"] for e in events) == reverse(text)
    whole = post(server, "/v2/models/reverser/generate", {"text_input": text})[2]["text_output"]
    assert "".join(e["text_output"] for e in events) == whole
    document = "t5 t9\n\nt17 t4 t6"  # two paragraphs: sentence after sentence, separators kept
    _, events = curl_stream(server, "reverser", {"text_input": document})
    assert "".join(e["text_output"] for e in events) == "t9 t5\n\nt6 t4 t17"
    label = "triton.http.GenerateStream"
    assert server.metric("attnserve_requests_total", model="reverser", method=label, status="OK") >= 1


@pytest.mark.parametrize(
    ("route", "body", "status", "fragment"),
    [
        ("generate", b"{not json", 400, "not valid JSON"),
        ("generate", b"[]", 400, "must be a JSON object"),
        ("generate", {"parameters": {}}, 400, "text_input is missing"),
        ("generate", {"text_input": 7}, 400, "text_input: expected a string, got int"),
        ("generate", {"text_input": "t5", "prompt": "x"}, 400, "unknown input(s) prompt"),
        ("generate", {"text_input": "t5", "parameters": [1]}, 400, "parameters: expected a JSON object"),
        (
            "generate",
            {"text_input": "t5", "parameters": {"beam_size": "4"}},
            400,
            "parameters.beam_size: expected an integer",
        ),
        ("generate", {"text_input": "t5", "parameters": {"colour": 1}}, 400, "unknown request parameter(s) colour"),
        ("generate", {"text_input": "t5", "parameters": {"beam_size": 2, "num_hypotheses": 2}}, 400, "one text_output"),
        ("generate", {"text_input": "t5", "parameters": {"timeout": -1}}, 400, "parameters.timeout"),
        ("generate_stream", {"text_input": "t5", "parameters": {"beam_size": 2}}, 400, "beam_size 1"),
        ("generate_stream", b"{", 400, "not valid JSON"),
    ],
)
def test_bad_requests_are_400_with_a_json_error(server, route, body, status, fragment):
    got, headers, reply = post(server, f"/v2/models/reverser/{route}", body)
    assert got == status and headers["Content-Type"].startswith("application/json")
    assert fragment in reply["error"]


@pytest.mark.parametrize("route", ["generate", "generate_stream"])
def test_unknown_models_and_versions_are_404_and_a_classifier_is_400(server, route):
    status, _, reply = post(server, f"/v2/models/nope/{route}", {"text_input": "t5"})
    assert status == 404 and "unknown model 'nope'" in reply["error"]
    status, _, reply = post(server, f"/v2/models/reverser/versions/2/{route}", {"text_input": "t5"})
    assert status == 404 and "no version '2'" in reply["error"]
    status, _, reply = post(server, f"/v2/models/digits/{route}", {"text_input": "t5"})
    assert status == 400 and "not translation" in reply["error"]


@pytest.mark.parametrize("route", ["generate", "generate_stream"])
def test_a_timeout_that_passes_is_504_and_the_work_is_dropped(server, route):
    engine = server.app.registry.models["reverser"].engine
    original, hold = engine.on_step, threading.Event()
    engine.on_step = lambda rows, generated: (hold.wait(5), original(rows, generated))
    try:
        body = {"text_input": "t5 t9 t17 t4", "parameters": {"timeout": 200_000}}  # 0.2 s; the decoder is held
        status, _, reply = post(server, f"/v2/models/reverser/{route}", body)
        assert status == 504 and "timeout of 200 ms passed" in reply["error"]
    finally:
        hold.set()
        engine.on_step = original
    deadline = time.monotonic() + 10
    while engine.active_sequences and time.monotonic() < deadline:
        time.sleep(0.02)
    assert engine.active_sequences == 0


def test_a_full_queue_is_429(serve, kserve_repo):
    with serve(kserve_repo, http_port=0, max_translation_queue=1, max_active_sequences=1) as handle:
        engine = handle.app.registry.models["reverser"].engine
        hold, steps = threading.Event(), []
        engine.on_step = lambda rows, generated: (steps.append(rows), hold.wait(10))
        results = []
        threads = [
            threading.Thread(
                target=lambda: results.append(post(handle, "/v2/models/reverser/generate", {"text_input": "t5 t6"}))
            )
            for _ in range(2)
        ]
        try:
            for t in threads:  # one decodes (held at its first step), one waits in the queue
                t.start()
                deadline = time.monotonic() + 10
                while not (steps if t is threads[0] else engine.queued) and time.monotonic() < deadline:
                    time.sleep(0.01)
            status, _, reply = post(handle, "/v2/models/reverser/generate_stream", {"text_input": "t5"})
            assert status == 429 and "queue" in reply["error"]
        finally:
            hold.set()
            for t in threads:
                t.join(30)
        assert [r[0] for r in results] == [200, 200]


@needs_curl
def test_a_client_that_disconnects_mid_stream_frees_its_decoder_row(server):
    engine = server.app.registry.models["reverser"].engine
    original, hold, steps = engine.on_step, threading.Event(), []

    def held(rows, generated):  # the decoder stops at its third step until the client has gone
        steps.append(rows)
        if len(steps) >= 3:
            hold.wait(20)
        original(rows, generated)

    engine.on_step = held
    url = f"http://{server.http_address}/v2/models/reverser/generate_stream"
    body = json.dumps({"text_input": "t5 t9 t17 t4 t6 t7 t8 t10"})  # 9 steps to finish
    curl = subprocess.Popen([CURL, "-sN", "-X", "POST", url, "-d", body], stdout=subprocess.PIPE, text=True)
    try:
        first = curl.stdout.readline()
        assert first.startswith("data: ") and json.loads(first[6:])["text_output"]
        assert server.metric("attnserve_active_sequences", model="reverser") == 1
        curl.kill()
        curl.wait(10)
        label = "triton.http.GenerateStream"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not server.metric(
            "attnserve_requests_total", model="reverser", method=label, status="CANCELLED"
        ):
            time.sleep(0.02)
        assert server.metric("attnserve_requests_total", model="reverser", method=label, status="CANCELLED") == 1
        hold.set()
        while server.metric("attnserve_active_sequences", model="reverser") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.metric("attnserve_active_sequences", model="reverser") == 0
        assert len(steps) <= 4  # the row left at the next step; finishing would have taken 9
    finally:
        hold.set()
        engine.on_step = original
        if curl.poll() is None:
            curl.kill()
