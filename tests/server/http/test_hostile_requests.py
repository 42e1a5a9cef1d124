"""Hostile and malformed requests (issue 32, findings 9-12) against a live server holding the
bundled translator and a tiny ViT: a server-side time limit on every door and service, error messages that
quote a client's value without copying it whole and never show the model repository's absolute
path, and forms, URLs and headers that do not parse answered with a clear JSON 400 and no
traceback in the log."""

from __future__ import annotations

import io
import json
import logging
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from PIL import Image

from attnserve.client import AttnServeError
from attnserve.server.files import jobs
from attnserve.server.shared.errors import MAX_MESSAGE_CHARS
from tests.support import file_jobs
from tests.support import office_files as office

BUNDLED = Path(__file__).resolve().parents[3] / "models" / "repo" / "translator-en-de"
MODEL = "translator-en-de"


@pytest.fixture(scope="module")
def hostile_repo(tmp_path_factory, vit_dirs) -> Path:
    root = tmp_path_factory.mktemp("hostile-repo")
    (root / MODEL).symlink_to(BUNDLED, target_is_directory=True)
    shutil.copytree(vit_dirs["digits"], root / "digits")
    return root


@pytest.fixture(scope="module")
def hostile(serve, hostile_repo):
    with serve(hostile_repo, http_port=0, enable_admin=True, parse_memory_bytes=128 << 20) as handle:
        yield handle


def http(server, method: str, path: str, body: bytes | None = None, content_type: str = "application/json"):
    """(status, content type, decoded body) of one request."""
    req = urllib.request.Request(
        f"http://{server.http_address}{path}", data=body, method=method, headers={"Content-Type": content_type}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as reply:
            return reply.status, reply.headers.get_content_type(), json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get_content_type(), json.loads(err.read())


def raw_http(server, head: bytes) -> tuple[int, str, dict]:
    """(status, content type, decoded JSON body) of bytes sent as they are."""
    host, port = server.http_address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head_part, _, body = data.partition(b"\r\n\r\n")
    lines = head_part.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers.get("Content-Type", ""), json.loads(body)


# ----------------------------------------------------------------- 9: the server's time limit


def _png(side: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("L", (side, side), 255).save(buffer, "PNG")
    return buffer.getvalue()


def test_every_request_has_the_servers_time_limit_libretranslate_included(serve, hostile_repo):
    document = "\n".join(f"The weather on day {i} was fine." for i in range(200))
    with serve(hostile_repo, http_port=0, request_timeout_seconds=0.05) as server:
        status, _, body = http(
            server, "POST", "/translate", json.dumps({"q": document, "source": "en", "target": "de"}).encode()
        )
        assert status == 504 and "--request-timeout-seconds" in body["error"], body
        with pytest.raises(AttnServeError) as err:
            server.client().translate(document, MODEL)  # no client deadline: the server's applies
        assert err.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "--request-timeout-seconds" in str(err.value)
        with pytest.raises(AttnServeError) as err:
            server.client().classify([_png(2000)] * 24, "digits")  # 96 M pixels: ~0.5 s of decoding
        assert err.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


# ----------------------------------------------------------------- 10: echoed input, paths


def test_a_json_body_past_the_parse_memory_limit_is_413_and_the_next_is_answered(hostile):
    # 16 MB of one-number lists parses to 420 MB of Python lists (64 MB, which --max-message-bytes
    # allows, 1.7 GB, a few at once more than a machine has): past --parse-memory-bytes it is a 413
    infer = b'{"inputs": [{"name": "PIXELS", "datatype": "FP32", "shape": [%d, 1, 16, 16], "data": [%s]}]}'
    status, _, reply = http(hostile, "POST", "/v2/models/digits/infer", infer % (15_625, b"[0]," * 3_999_999 + b"[0]"))
    assert status == 413 and "more than 134,217,728 bytes" in reply["error"], reply
    assert "--parse-memory-bytes" in reply["error"], reply
    large = infer % (1, b",".join([b"[0.5]"] * 256)) + b" " * (2 << 20)  # parsed in the same child
    status, _, reply = http(hostile, "POST", "/v2/models/digits/infer", large)
    assert status == 200 and reply["outputs"], reply


def test_a_huge_model_name_is_not_found_with_a_short_message(hostile):
    name = "m" * 1_000_000
    with pytest.raises(AttnServeError) as err:
        hostile.client().translate("Hello.", name)
    assert err.value.code == grpc.StatusCode.NOT_FOUND  # was RESOURCE_EXHAUSTED "metadata size exceeds"
    assert "1,000,000 characters" in err.value.details and len(err.value.details) <= MAX_MESSAGE_CHARS
    status, _, body = http(
        hostile, "POST", "/translate", json.dumps({"q": "Hello.", "source": "x" * 100_000, "target": "de"}).encode()
    )
    assert status == 400 and len(body["error"]) <= 300 and "100,000 characters" in body["error"], body


def test_admin_load_errors_name_no_absolute_path(hostile, hostile_repo):
    broken = hostile_repo / "broken"
    shutil.copytree(hostile_repo / "digits", broken)
    (broken / "model.onnx").write_bytes(b"not a model")
    manifest = json.loads((broken / "model.json").read_text())
    (broken / "model.json").write_text(json.dumps({**manifest, "name": "broken"}))
    try:
        for name in ("broken", "absent"):
            status, _, body = http(hostile, "POST", f"/v2/repository/models/{name}/load", b"{}")
            assert status == 400 and name in body["error"], body
            assert str(hostile_repo) not in body["error"] and str(hostile_repo.resolve()) not in body["error"], body
        status, _, index = http(hostile, "POST", "/v2/repository/index", b"{}")
        reasons = " ".join(m.get("reason", "") for m in index)
        assert "broken" in reasons and str(hostile_repo.resolve()) not in reasons, index
    finally:
        shutil.rmtree(broken)


# ----------------------------------------------------------------- 12: forms, URLs, headers

FORM = "application/x-www-form-urlencoded"


def test_a_form_with_too_many_fields_is_a_clear_400(hostile):
    fields = "&".join(f"f{i}=1" for i in range(1100)) + "&q=Hello&source=en&target=de"
    status, kind, body = http(hostile, "POST", "/translate", fields.encode(), FORM)
    assert (status, kind) == (400, "application/json") and "more than 1000 fields" in body["error"], body


def test_invalid_utf8_is_refused_alike_in_a_form_and_in_json(hostile):
    status, _, body = http(hostile, "POST", "/translate", b"q=%ff%fe&source=en&target=de", FORM)
    assert status == 400 and "UTF-8" in body["error"], body  # was 200 "\ufffd\ufffd"
    status, _, body = http(hostile, "POST", "/translate", b'{"q": "\xff\xfe", "source": "en", "target": "de"}')
    assert status == 400, body
    status, _, body = http(hostile, "POST", "/translate", b"q=Gr%C3%BC%C3%9Fe&source=en&target=de", FORM)
    assert status == 200 and body["translatedText"], body  # valid UTF-8 percent-encoded still works


@pytest.mark.parametrize(
    "head",
    [
        b"GET /languages?" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /languages HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 10_000 + b"\r\n\r\n",
        b"GET /languages HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    ],
    ids=["long URL", "long header", "malformed header"],
)
def test_a_request_head_that_does_not_parse_is_a_json_400_without_a_traceback(hostile, head, caplog):
    with caplog.at_level(logging.INFO):
        status, kind, body = raw_http(hostile, head)
    assert (status, kind.split(";")[0]) == (400, "application/json") and body["error"], body
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text


# ----------------------------------------------------------------- issue 44: files and forms

KEY = "file-key"
SRT_ATTACK = b"1\n" + b"1" * 2000  # the srt library's timestamp regex is cubic in it: minutes in one match


@pytest.fixture(scope="module")
def files_hostile(serve, hostile_repo, tmp_path_factory):
    downloads = tmp_path_factory.mktemp("hostile-downloads")
    with serve(
        hostile_repo, http_port=0, auth_tokens=KEY, file_cpu_seconds=1, download_dir=str(downloads),
        language_detection="off",
    ) as handle:  # fmt: skip
        yield handle


def keyed(server, method: str, path: str, body: bytes | None = None, content_type: str = "application/json"):
    req = urllib.request.Request(
        f"http://{server.http_address}{path}",
        data=body,
        method=method,
        headers={"Content-Type": content_type, "Authorization": f"Bearer {KEY}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def while_running(server, attack) -> tuple[object, list[tuple[int, object]]]:
    """``attack()``'s result, and what a health check and a translation sent meanwhile got (each
    waits at most 30 s: a server whose event loop is held answers neither)."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(attack()))
    thread.start()
    probes = []
    translation = json.dumps({"q": "Hello world.", "source": "en", "target": "de", "api_key": KEY}).encode()
    while thread.is_alive() or not probes:
        for path, body in (("/v2/health/ready", None), ("/translate", translation)):
            try:
                request = urllib.request.Request(
                    f"http://{server.http_address}{path}", body, headers={"Content-Type": "application/json"}
                )
                with urllib.request.urlopen(request, timeout=30) as reply:
                    probes.append((reply.status, reply.read()))
            except (urllib.error.URLError, TimeoutError) as exc:
                probes.append((0, exc))
        time.sleep(0.1)
    thread.join()
    return result[0], probes


def tiny_fields(count: int, api_key: str | None) -> tuple[bytes, str]:
    part = b'--b\r\nContent-Disposition: form-data; name="f"\r\n\r\n1\r\n'
    key = (
        b'--b\r\nContent-Disposition: form-data; name="api_key"\r\n\r\n' + api_key.encode() + b"\r\n"
        if api_key
        else b""
    )
    return key + part * count + b"--b--\r\n", "multipart/form-data; boundary=b"


@pytest.mark.parametrize("api_key", [None, KEY], ids=["no key", "a key"])
def test_a_form_of_200000_tiny_fields_is_a_400_and_holds_no_one_up(files_hostile, api_key):
    body, content_type = tiny_fields(200_000, api_key)

    def attack():
        return http(files_hostile, "POST", "/translate_file", body, content_type)

    (status, _, reply), probes = while_running(files_hostile, attack)
    assert status == 400 and "more than 100 parts" in reply["error"], reply
    assert all(status == 200 for status, _ in probes), probes


def test_a_wrong_key_in_the_query_is_refused_on_the_head(files_hostile):
    body, content_type = tiny_fields(10, None)
    status, _, reply = http(files_hostile, "POST", "/translate_file?api_key=wrong", body, content_type)
    assert status == 403 and reply["error"] == "Invalid API key", reply


def file_form(filename: str, content: bytes) -> tuple[bytes, str]:
    return office.multipart({"source": "en", "target": "de", "api_key": KEY}, filename, content)


def test_the_srt_regex_attack_holds_no_one_up(files_hostile):
    def attack():
        return http(files_hostile, "POST", "/translate_file", *file_form("attack.srt", SRT_ATTACK))

    (status, _, reply), probes = while_running(files_hostile, attack)
    assert status == 400, reply  # past --file-cpu-seconds in its worker, or refused by a linear parser
    assert all(status == 200 for status, _ in probes), probes


@pytest.mark.parametrize(
    ("filename", "code", "setting"), [("spin.txt", 400, "--file-cpu-seconds"), ("hog.txt", 413, "--file-memory-bytes")]
)
def test_a_parse_past_its_limit_is_killed_and_no_one_else_notices(files_hostile, monkeypatch, filename, code, setting):
    monkeypatch.setattr(jobs, "read_text", file_jobs.read_or_spin)  # a parser made to spin or hog, test-only

    def attack():
        return http(files_hostile, "POST", "/translate_file", *file_form(filename, b"Hello world."))

    replaced = files_hostile.app.files.workers.replaced
    (status, _, reply), probes = while_running(files_hostile, attack)
    assert status == code and setting in reply["error"], reply
    assert all(status == 200 for status, _ in probes), probes
    assert files_hostile.app.files.workers.replaced == replaced + 1
    status, _, reply = http(files_hostile, "POST", "/translate_file", *file_form("a.txt", b"Hello world."))
    assert status == 200 and reply["translatedFileUrl"], reply  # the next file, in a fresh worker


def test_the_rpc_stops_a_hostile_file_alike(files_hostile, tmp_path, monkeypatch):
    monkeypatch.setattr(jobs, "read_text", file_jobs.read_or_spin)
    path = tmp_path / "spin.txt"
    path.write_bytes(b"Hello world.")
    with files_hostile.client(timeout=120, token=KEY) as client:
        with pytest.raises(AttnServeError) as err:
            client.translate_file(path, "de", "en")
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and "--file-cpu-seconds" in err.value.details
        (path := tmp_path / "a.txt").write_text("Hello world.")
        assert client.translate_file(path, "de", "en").content.decode().strip()
