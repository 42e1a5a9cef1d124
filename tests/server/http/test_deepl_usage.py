"""DeepL's ``/v2/usage`` with DeepL's official Python client against a live server with the
bundled English -> German translator: a key's ``character_count`` grows by the characters it had
translated, texts and documents, through DeepL's door and the others alike, and survives a
restart on the same state folder; a key past its monthly quota (``characters_per_month`` in the
token file) is refused in each door's shape: ``deepl.QuotaExceededException`` (456), gRPC
``RESOURCE_EXHAUSTED``, LibreTranslate's 429. The counting itself: tests/server/service/test_usage.py."""

from __future__ import annotations

import calendar
import json
import time
from pathlib import Path

import deepl
import grpc
import pytest

from attnserve.client import AttnServeError
from attnserve.server.service import usage as usage_module
from tests.server.http.test_files import call

REPO = Path(__file__).resolve().parents[3] / "models" / "repo"
ALICE, CAROL = "alice-key-of-the-usage-tests", "carol-key-of-the-usage-tests"
TOKENS = f"{ALICE}\n{CAROL} characters_per_month=40   # a trial key\n"
NO_QUOTA = 10**12
DATE, TIME = "Monday, March 3, 2025", "at 3:45 PM"  # 21 and 10 characters


@pytest.fixture
def started(serve, tmp_path, monkeypatch):
    """``with started() as server:`` a server on this test's state folder and token file, whose
    clock runs from the middle of the month, so a run across the month's end (counts start again
    at zero) cannot part a test's figures."""
    year, month = time.gmtime()[:2]
    shift = calendar.timegm((year, month, 15, 12, 0, 0)) - time.time()
    monkeypatch.setattr(usage_module.Usage.__init__, "__defaults__", (lambda: time.time() + shift,))
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(TOKENS)
    settings = dict(http_port=0, state_dir=str(tmp_path / "state"), auth_token_file=str(tokens))
    return lambda: serve(REPO, language_detection="off", **settings)


def translator(server, key: str) -> deepl.Translator:
    return deepl.Translator(key, server_url=f"http://{server.http_address}")


def characters(server, key: str) -> tuple[int, int]:
    usage = translator(server, key).get_usage().character
    return usage.count, usage.limit


def test_usage_grows_by_the_characters_translated_through_every_door_and_survives_a_restart(started):
    with started() as server:
        alice = translator(server, ALICE)
        usage = alice.get_usage()
        assert (usage.character.count, usage.character.limit) == (0, NO_QUOTA)
        assert usage.character.valid and not usage.any_limit_reached
        results = alice.translate_text([DATE, TIME], source_lang="EN", target_lang="DE")
        assert [r.billed_characters for r in results] == [21, 10]
        assert characters(server, ALICE) == (31, NO_QUOTA)
        handle = alice.translate_document_upload(f"{DATE}\n{TIME}\n".encode(), target_lang="DE", filename="memo.txt")
        assert alice.translate_document_wait_until_done(handle).done
        billed = alice.translate_document_get_status(handle).billed_characters
        assert billed == 33  # the file's text: its two lines and their line breaks
        assert characters(server, ALICE) == (31 + 33, NO_QUOTA)
        with server.client(token=ALICE, timeout=60) as grpc_client:  # another door, the same key
            assert grpc_client.translate([TIME])[0].text == "um 15:45 Uhr"
        assert characters(server, ALICE) == (74, NO_QUOTA)
        assert characters(server, CAROL) == (0, 40)  # every key its own
    with started() as server:  # a restart on the same state folder
        assert characters(server, ALICE) == (74, NO_QUOTA)


def test_a_key_past_its_quota_is_refused_in_each_doors_shape(started):
    with started() as server:
        carol = translator(server, CAROL)
        assert carol.translate_text(DATE, target_lang="DE").text == "Montag, 3. März 2025"
        with pytest.raises(deepl.QuotaExceededException, match="Quota exceeded: 21 of this client's 40 characters"):
            carol.translate_text(DATE, target_lang="DE")  # 21 more would pass 40: nothing translated
        usage = carol.get_usage().character
        assert (usage.count, usage.limit, usage.limit_reached) == (21, 40, False)
        carol.translate_text([TIME, "Monday 3."], target_lang="DE")  # 19: exactly the quota
        usage = carol.get_usage().character
        assert (usage.count, usage.limit, usage.limit_reached) == (40, 40, True)
        with pytest.raises(deepl.QuotaExceededException, match="renews on"):
            carol.translate_text("at", target_lang="DE")
        with pytest.raises(deepl.QuotaExceededException):
            carol.translate_document_upload(b"at 3:45 PM\n", target_lang="DE", filename="memo.txt")
        with server.client(token=CAROL, timeout=60) as grpc_client, pytest.raises(AttnServeError) as refused:
            grpc_client.translate([TIME])
        assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "quota exceeded" in str(refused.value)
        body = json.dumps({"q": TIME, "source": "en", "target": "de", "api_key": CAROL}).encode()
        status, reply, _ = call(server, "/translate", body, "application/json")
        assert status == 429 and json.loads(reply)["error"].startswith("quota exceeded: 40 of this client's 40")
        assert translator(server, ALICE).translate_text(TIME, target_lang="DE").text == "um 15:45 Uhr"
        assert characters(server, CAROL) == (40, 40)
