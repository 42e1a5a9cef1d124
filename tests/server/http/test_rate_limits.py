"""Per-client request rates (``--requests-per-minute``, a token's own in ``--auth-token-file``)
against live servers allowing 3 requests a minute, through each door's own clients: LibreTranslate's
(libretranslatepy), DeepL's (deepl), attnserve's gRPC client and a KServe REST request. The 4th
request of a client is refused in the door's shape with ``Retry-After``; other clients, and the
listings and health routes, are not. The buckets themselves: tests/server/test_rates.py."""

from __future__ import annotations

import http.client
import json
import logging
import time
import urllib.error
import urllib.request

import grpc
import pytest

from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

from .test_libretranslate import _copy

libretranslatepy = pytest.importorskip("libretranslatepy")
deepl = pytest.importorskip("deepl")
from libretranslatepy import LibreTranslateAPI  # noqa: E402

TOKENS = {name: f"{name}-token-of-the-rate-tests" for name in ("lt", "lt2", "deepl", "grpc", "kserve", "generous")}
TOKEN_FILE = f"""# clients of the rate tests: every one 3 a minute (--requests-per-minute), but one
{TOKENS["lt"]}
{TOKENS["lt2"]}
{TOKENS["deepl"]}
{TOKENS["grpc"]}
{TOKENS["kserve"]}

{TOKENS["generous"]}   requests_per_minute=5   requests_per_day=100
"""


@pytest.fixture(scope="module")
def rate_repo(tmp_path_factory, reverser_dir):
    root = tmp_path_factory.mktemp("rates-repo")
    _copy(reverser_dir, root / "rev-en-de", "rev-en-de", {"source": ["en"], "target": ["de"]})
    return root


@pytest.fixture(scope="module")
def keyed(serve, rate_repo, tmp_path_factory):
    tokens = tmp_path_factory.mktemp("rates-tokens") / "tokens.txt"
    tokens.write_text(TOKEN_FILE)
    with serve(rate_repo, http_port=0, auth_token_file=str(tokens), requests_per_minute=3) as handle:
        yield handle


@pytest.fixture(scope="module")
def keyless(serve, rate_repo):
    with serve(rate_repo, http_port=0, requests_per_minute=3) as handle:
        yield handle


def request(server, method: str, path: str, body: dict | None = None, headers: dict | None = None):
    """(status, headers, decoded JSON or text) of one HTTP request, errors included."""
    data = json.dumps(body).encode() if body is not None else None
    sent = urllib.request.Request(
        f"http://{server.http_address}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(sent, timeout=60) as reply:
            return reply.status, reply.headers, _decoded(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, err.headers, _decoded(err.read())


def _decoded(raw: bytes):
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode()


def retry_after(headers) -> int:
    """The seconds ``Retry-After`` says: the 4th of 3 a minute, sent within a few seconds of the 1st,
    waits for the 20 s in which one request refills."""
    seconds = int(headers["Retry-After"])
    assert 15 <= seconds <= 20, seconds
    return seconds


def test_libretranslate_refuses_the_4th_request_of_a_key_in_its_own_words(keyed, caplog):
    caplog.set_level(logging.INFO, logger="attnserve.server.access_log")
    url = f"http://{keyed.http_address}"
    client = LibreTranslateAPI(url, api_key=TOKENS["lt"])  # the key travels in the form, as upstream's
    assert [client.translate("t5 t6", "en", "de") for _ in range(3)] == ["t6 t5"] * 3
    with pytest.raises(urllib.error.HTTPError) as refused:
        client.translate("t5 t6", "en", "de")
    assert refused.value.code == 429
    assert json.loads(refused.value.read()) == {"error": "Slowdown: 3 per 1 minute"}  # LibreTranslate's limiter
    retry_after(refused.value.headers)
    # another key is another client
    assert LibreTranslateAPI(url, api_key=TOKENS["lt2"]).translate("t7 t8", "en", "de") == "t8 t7"
    # the listings, the settings, health and the page are not counted: still open to the refused key
    bearer = {"Authorization": f"Bearer {TOKENS['lt']}"}
    for _ in range(4):
        assert request(keyed, "GET", "/languages", headers=bearer)[0] == 200
        assert request(keyed, "GET", "/frontend/settings", headers=bearer)[0] == 200
        assert request(keyed, "GET", "/v2/health/ready", headers=bearer)[0] == 200
        assert request(keyed, "GET", "/", headers=bearer)[0] == 200
    status, headers, reply = request(keyed, "POST", "/translate", {"q": "t5", "source": "en", "target": "de"}, bearer)
    assert (status, reply) == (429, {"error": "Slowdown: 3 per 1 minute"})  # the header's key counts the same
    reason = {"door": "libretranslate", "reason": "requests_per_minute"}
    assert keyed.metric("attnserve_rate_limited_total", **reason) == 2
    deadline = time.monotonic() + 10  # aiohttp writes a line once its answer has gone out
    while len(refusals := [m for m in caplog.messages if "POST /translate" in m and "status=429" in m]) < 2:
        assert time.monotonic() < deadline, refusals
        time.sleep(0.02)
    assert all(m.endswith(" refused=requests_per_minute") and "id=-" not in m for m in refusals)


def test_deepl_refuses_the_4th_request_of_a_key_in_its_shape(keyed, monkeypatch):
    monkeypatch.setattr(deepl.http_client, "max_network_retries", 0)  # its clients retry a 429 with backoff
    translator = deepl.Translator(TOKENS["deepl"], server_url=f"http://{keyed.http_address}")
    for _ in range(3):
        assert translator.translate_text("t5 t6", source_lang="EN", target_lang="DE").text == "t6 t5"
    with pytest.raises(deepl.TooManyRequestsException, match="3 per minute for this client"):
        translator.translate_text("t5 t6", source_lang="EN", target_lang="DE")
    key = {"Authorization": f"DeepL-Auth-Key {TOKENS['deepl']}"}
    status, headers, reply = request(keyed, "POST", "/v2/translate", {"text": ["t5"], "target_lang": "DE"}, key)
    assert status == 429 and list(reply) == ["message"]
    assert reply["message"].startswith("Too many requests: 3 per minute for this client (--requests-per-minute)")
    retry_after(headers)
    for _ in range(2):  # the listings and the usage are not counted
        assert [lang.code for lang in translator.get_target_languages()] == ["DE"]
        assert not translator.get_usage().any_limit_reached
    assert keyed.metric("attnserve_rate_limited_total", door="deepl", reason="requests_per_minute") == 2


def test_grpc_refuses_the_4th_call_of_a_token_with_resource_exhausted(keyed, caplog):
    caplog.set_level(logging.INFO, logger="attnserve.server.access_log")
    with keyed.client(token=TOKENS["grpc"]) as client:
        for _ in range(3):
            assert client.translate("t5 t6", "rev-en-de")[0].text == "t6 t5"
        stub = pb_grpc.InferenceServiceStub(client.channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Translate.with_call(pb.TranslateRequest(model="rev-en-de", texts=["t5"]), timeout=20)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "3 per minute for this client (--requests-per-minute)" in refused.value.details()
        assert 15 <= int(dict(refused.value.trailing_metadata())["retry-after"]) <= 20
        for _ in range(4):  # listing the models is not counted
            assert [m.name for m in client.list_models()] == ["rev-en-de"]
    assert keyed.metric("attnserve_rate_limited_total", door="v1", reason="requests_per_minute") == 1
    refused = [m for m in caplog.messages if "access: gRPC" in m and "status=RESOURCE_EXHAUSTED" in m]
    assert len(refused) == 1 and refused[0].endswith(" refused=requests_per_minute")


def test_kserve_rest_refuses_the_4th_request_of_a_token_with_its_error_shape(keyed):
    bearer = {"Authorization": f"Bearer {TOKENS['kserve']}"}
    infer = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["t5 t6"]}]}
    for _ in range(3):
        status, _, reply = request(keyed, "POST", "/v2/models/rev-en-de/infer", infer, bearer)
        assert status == 200 and reply["outputs"][0]["data"] == ["t6 t5"]
    status, headers, reply = request(keyed, "POST", "/v2/models/rev-en-de/infer", infer, bearer)
    assert status == 429 and list(reply) == ["error"]
    assert reply["error"].startswith("too many requests: 3 per minute for this client (--requests-per-minute)")
    retry_after(headers)
    for _ in range(4):  # the model's metadata is not counted
        assert request(keyed, "GET", "/v2/models/rev-en-de", headers=bearer)[0] == 200


def test_a_token_with_its_own_rate_in_the_token_file_gets_it(keyed):
    client = LibreTranslateAPI(f"http://{keyed.http_address}", api_key=TOKENS["generous"])
    assert [client.translate("t5 t6", "en", "de") for _ in range(5)] == ["t6 t5"] * 5
    bearer = {"Authorization": f"Bearer {TOKENS['generous']}"}
    infer = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["t5"]}]}
    status, headers, reply = request(keyed, "POST", "/v2/models/rev-en-de/infer", infer, bearer)
    assert status == 429  # one bucket for the token, whichever door it comes through
    assert "5 per minute for this client (requests_per_minute of its token in --auth-token-file)" in reply["error"]
    assert 10 <= int(headers["Retry-After"]) <= 12  # one of 5 a minute refills in 12 s


def _post_from(server, source: str, body: dict, headers: dict | None = None) -> tuple[int, dict, dict]:
    """A LibreTranslate request sent from the local address ``source`` (127.0.0.x all reach the server)."""
    host, port = server.http_address.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60, source_address=(source, 0))
    try:
        connection.request(
            "POST", "/translate", json.dumps(body), {"Content-Type": "application/json", **(headers or {})}
        )
        reply = connection.getresponse()
        return reply.status, dict(reply.headers), json.loads(reply.read())
    finally:
        connection.close()


def test_without_tokens_a_client_is_its_address(keyless):
    body = {"q": "t5 t6", "source": "en", "target": "de"}
    for _ in range(3):
        assert _post_from(keyless, "127.0.0.1", body)[::2] == (200, {"translatedText": "t6 t5"})
    status, headers, reply = _post_from(keyless, "127.0.0.1", body)
    assert (status, reply) == (429, {"error": "Slowdown: 3 per 1 minute"})
    retry_after(headers)
    assert _post_from(keyless, "127.0.0.2", body)[::2] == (200, {"translatedText": "t6 t5"})
    # the server trusts no proxy: a client naming another address in X-Forwarded-For is still itself
    assert _post_from(keyless, "127.0.0.1", body, {"X-Forwarded-For": "10.9.8.7"})[0] == 429
    # and a key on a server without tokens names no client
    assert _post_from(keyless, "127.0.0.1", {**body, "api_key": "another-key-of-the-rate-tests"})[0] == 429
