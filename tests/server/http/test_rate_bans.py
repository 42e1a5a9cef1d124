"""The hourly rate and the ban (``--requests-per-hour``, ``--ban-after-refusals``) through the doors
of a live server allowing 3 requests a minute and 4 an hour, banning a client at its 2nd refusal.
The test moves the server's request-rate clock (``RateLimiter.clock``), so an hour and a ban pass
in no time. LibreTranslate's official client (libretranslatepy) is refused as upstream refuses:
429 ``Slowdown: 4 per 1 hour`` past the hour, a banned client 403 ``Too many request limits
violations``; DeepL's and gRPC's in their shapes; a ban outlasts the minute that refused the
client and ends after ``--ban-seconds``. The rules themselves: tests/server/test_rates.py."""

from __future__ import annotations

import json
import logging
import time
import urllib.error

import grpc
import pytest

from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

from .test_libretranslate import _copy
from .test_rate_limits import request

libretranslatepy = pytest.importorskip("libretranslatepy")
deepl = pytest.importorskip("deepl")
from libretranslatepy import LibreTranslateAPI  # noqa: E402

TOKENS = {name: f"{name}-token-of-the-ban-tests" for name in ("hourly", "flood", "bystander")}
BAN_SECONDS = 300


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def clock() -> Clock:
    return Clock()


@pytest.fixture(scope="module")
def banning(serve, reverser_dir, tmp_path_factory, clock):
    root = tmp_path_factory.mktemp("bans")
    _copy(reverser_dir, root / "repo" / "rev-en-de", "rev-en-de", {"source": ["en"], "target": ["de"]})
    tokens = root / "tokens.txt"
    tokens.write_text("\n".join(TOKENS.values()) + "\n")
    settings = dict(requests_per_minute=3, requests_per_hour=4, ban_after_refusals=2, ban_seconds=BAN_SECONDS)
    with serve(root / "repo", http_port=0, auth_token_file=str(tokens), **settings) as handle:
        handle.app.calls.rates.clock = clock
        yield handle


def refused(client: LibreTranslateAPI) -> tuple[int, dict, dict]:
    with pytest.raises(urllib.error.HTTPError) as refusal:
        client.translate("t5 t6", "en", "de")
    return refusal.value.code, refusal.value.headers, json.loads(refusal.value.read())


def test_libretranslate_refuses_past_the_hour_in_its_limiters_words(banning, clock):
    client = LibreTranslateAPI(f"http://{banning.http_address}", api_key=TOKENS["hourly"])
    assert [client.translate("t5 t6", "en", "de") for _ in range(3)] == ["t6 t5"] * 3
    clock.now += 60  # the minute's bucket is full again; the hour allows one more
    assert client.translate("t5 t6", "en", "de") == "t6 t5"
    status, headers, reply = refused(client)
    assert (status, reply) == (429, {"error": "Slowdown: 4 per 1 hour"})
    assert int(headers["Retry-After"]) == 840  # one of 4 refills every 15 minutes, the 1st a minute ago
    reason = {"door": "libretranslate", "reason": "requests_per_hour"}
    assert banning.metric("attnserve_rate_limited_total", **reason) == 1
    clock.now += 840
    assert client.translate("t5 t6", "en", "de") == "t6 t5"


def test_a_client_refused_twice_is_banned_on_every_door_until_its_ban_ends(banning, clock, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="attnserve.server.access_log")
    monkeypatch.setattr(deepl.http_client, "max_network_retries", 0)  # its clients retry a 429 with backoff
    url = f"http://{banning.http_address}"
    client = LibreTranslateAPI(url, api_key=TOKENS["flood"])
    assert [client.translate("t5 t6", "en", "de") for _ in range(3)] == ["t6 t5"] * 3
    assert refused(client)[::2] == (429, {"error": "Slowdown: 3 per 1 minute"})
    status, headers, reply = refused(client)  # the 2nd refusal bans, as upstream's --req-flood-threshold 2
    assert (status, reply) == (403, {"error": "Too many request limits violations"})
    assert int(headers["Retry-After"]) == BAN_SECONDS
    clock.now += 120  # the minute that refused it has passed: still banned, on every door
    status, headers, reply = refused(client)
    assert (status, reply) == (403, {"error": "Too many request limits violations"})
    assert int(headers["Retry-After"]) == BAN_SECONDS - 120
    translator = deepl.Translator(TOKENS["flood"], server_url=url)
    with pytest.raises(deepl.TooManyRequestsException, match="this client is banned for 300 s after 2 refusals"):
        translator.translate_text("t5 t6", source_lang="EN", target_lang="DE")
    with banning.client(token=TOKENS["flood"]) as grpc_client:
        stub = pb_grpc.InferenceServiceStub(grpc_client.channel)
        with pytest.raises(grpc.RpcError) as banned:
            stub.Translate.with_call(pb.TranslateRequest(model="rev-en-de", texts=["t5"]), timeout=20)
        assert banned.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert (
            "banned for 300 s after 2 refusals past its request rates (--ban-after-refusals" in banned.value.details()
        )
        assert int(dict(banned.value.trailing_metadata())["retry-after"]) == BAN_SECONDS - 120
        # another client, and the listings of the banned one, are not refused
        assert [m.name for m in grpc_client.list_models()] == ["rev-en-de"]
    bystander = LibreTranslateAPI(url, api_key=TOKENS["bystander"])
    assert bystander.translate("t5 t6", "en", "de") == "t6 t5"
    bearer = {"Authorization": f"Bearer {TOKENS['flood']}"}
    assert request(banning, "GET", "/languages", headers=bearer)[0] == 200
    assert banning.metric("attnserve_rate_limited_total", door="libretranslate", reason="banned") == 2
    assert banning.metric("attnserve_rate_limited_total", door="deepl", reason="banned") == 1
    assert banning.metric("attnserve_rate_limited_total", door="v1", reason="banned") == 1
    clock.now += BAN_SECONDS - 120  # the ban is over
    assert client.translate("t5 t6", "en", "de") == "t6 t5"
    deadline = time.monotonic() + 10  # aiohttp writes a line once its answer has gone out
    while len(bans := [m for m in caplog.messages if "POST /translate" in m and "status=403" in m]) < 2:
        assert time.monotonic() < deadline, bans
        time.sleep(0.02)
    assert all(m.endswith(" refused=banned") for m in bans)
