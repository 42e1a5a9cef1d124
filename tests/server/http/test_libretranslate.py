"""LibreTranslate's API: its official Python client (libretranslatepy) and plain JSON requests
against a live server holding several word reversers, each declaring a language pair.

The reversers translate ``"t5 t9 t17"`` -> ``"t17 t9 t5"`` whatever their pair, so which model
answered is read from the per-model request metrics, as an operator would.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from attnserve.export.zoo import REPO
from tests.support.server import post_json as post

from .conftest import reverse

libretranslatepy = pytest.importorskip("libretranslatepy")
from libretranslatepy import LibreTranslateAPI  # noqa: E402

MAX_TEXT_CHARS = 200


def _copy(reverser_dir: Path, out: Path, name: str, languages: dict | None) -> None:
    shutil.copytree(reverser_dir, out)
    manifest = json.loads((out / "model.json").read_text())
    manifest["name"] = name
    if languages is not None:
        manifest["languages"] = languages
    (out / "model.json").write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def lt_repo(tmp_path_factory, reverser_dir, vit_dirs) -> Path:
    root = tmp_path_factory.mktemp("lt-repo")
    _copy(reverser_dir, root / "rev-en-de", "rev-en-de", {"source": ["en"], "target": ["de"]})
    _copy(reverser_dir, root / "rev-de-en", "rev-de-en", {"source": ["de"], "target": ["en"]})
    _copy(reverser_dir, root / "words-fr-en", "words-fr-en", None)  # no declaration: the name's pair
    (root / "reverser").symlink_to(reverser_dir, target_is_directory=True)  # no languages at all
    (root / "digits").symlink_to(vit_dirs["digits"], target_is_directory=True)
    return root


@pytest.fixture(scope="module")
def lt_server(serve, lt_repo):
    with serve(lt_repo, http_port=0, max_beam_size=4, max_texts_per_request=8, max_text_chars=MAX_TEXT_CHARS) as h:
        yield h


@pytest.fixture(scope="module")
def client(lt_server) -> LibreTranslateAPI:
    return LibreTranslateAPI(f"http://{lt_server.http_address}")


def get(server, path: str):
    with urllib.request.urlopen(f"http://{server.http_address}{path}", timeout=60) as reply:
        return reply.status, json.loads(reply.read())


def requests_of(server, model: str) -> float:
    return server.metric("attnserve_requests_total", model=model, method="libretranslate.translate", status="OK")


def test_languages_are_the_declared_pairs_of_every_translation_model(client):
    assert client.languages() == [
        {"code": "de", "name": "German", "targets": ["en"]},
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "fr", "name": "French", "targets": ["de", "en"]},  # fr -> de through English (the pivot)
    ]


def test_the_official_client_translates_and_the_pair_picks_the_model(client, lt_server):
    before = {m: requests_of(lt_server, m) for m in ("rev-en-de", "rev-de-en", "words-fr-en")}
    assert client.translate("t5 t9 t17", "en", "de") == "t17 t9 t5"
    assert client.translate("t23 t8 t11", "fr", "en") == "t11 t8 t23"
    assert client.translate("t4 t6", source="de", target="en") == "t6 t4"
    after = {m: requests_of(lt_server, m) for m in before}
    assert {m: after[m] - before[m] for m in before} == {"rev-en-de": 1, "rev-de-en": 1, "words-fr-en": 1}


def test_a_list_q_gets_a_list_back_in_order(lt_server):
    texts = ["t5 t9 t17", "t4", "t23 t8 t8 t11 t6 t20"]
    status, reply = post(lt_server, "/translate", {"q": texts, "source": "en", "target": "de"})
    assert status == 200 and reply == {"translatedText": [reverse(t) for t in texts]}


def test_source_auto_resolves_to_the_only_language_reaching_the_target(lt_server):
    status, reply = post(lt_server, "/translate", {"q": "t5 t9", "source": "auto", "target": "de"})
    assert status == 200
    assert reply == {"translatedText": "t9 t5", "detectedLanguage": {"confidence": 100.0, "language": "en"}}
    status, reply = post(lt_server, "/translate", {"q": ["t5", "t6 t7"], "source": "auto", "target": "de"})
    assert reply["detectedLanguage"] == [{"confidence": 100.0, "language": "en"}] * 2


def test_source_auto_detects_the_language_among_several(lt_server):
    assert lt_server.app.settings.language_detection == "langid"  # the default: built in, no extra
    before = requests_of(lt_server, "rev-de-en")
    text = "Wir wohnen gern in diesem Haus"  # short: the tiny model takes 10 tokens
    status, reply = post(lt_server, "/translate", {"q": text, "source": "auto", "target": "en"})
    assert status == 200, reply
    assert reply["detectedLanguage"]["language"] == "de"
    assert 50 < reply["detectedLanguage"]["confidence"] <= 100
    assert requests_of(lt_server, "rev-de-en") == before + 1


def test_source_auto_detects_each_text_of_a_batch_on_its_own(lt_server):
    """A list q in two languages: each text's own language, and each text to the model of its pair."""

    def requests_to(model: str) -> float:  # the call counts once; each model books its own texts
        return lt_server.metric("attnserve_request_characters_count", model=model)

    before = {m: requests_to(m) for m in ("rev-de-en", "words-fr-en")}
    texts = ["guten Morgen", "merci beaucoup", "Wir wohnen gern in diesem Haus"]
    status, reply = post(lt_server, "/translate", {"q": texts, "source": "auto", "target": "en"})
    assert status == 200, reply
    assert [d["language"] for d in reply["detectedLanguage"]] == ["de", "fr", "de"]
    assert all(0 < d["confidence"] <= 100 for d in reply["detectedLanguage"])
    assert len(reply["translatedText"]) == 3 and all(isinstance(t, str) for t in reply["translatedText"])
    after = {m: requests_to(m) for m in before}
    assert {m: after[m] - before[m] for m in before} == {"rev-de-en": 1, "words-fr-en": 1}  # one per language
    # the same texts one at a time: the same translations, in the batch's order
    alone = [post(lt_server, "/translate", {"q": t, "source": "auto", "target": "en"})[1] for t in texts]
    assert reply["translatedText"] == [a["translatedText"] for a in alone]
    assert reply["detectedLanguage"] == [a["detectedLanguage"] for a in alone]


def test_source_auto_reads_the_words_of_html_and_markdown_not_their_markup(lt_server):
    """Tag and attribute names and a link's address read as English or French to a detector: a
    German table cell or link went to the French model."""
    cases = {
        "html": [
            '<table class="data"><tr><td>Rechnung</td></tr></table>',
            '<p><a href="https://a.example/page">Danke schön</a></p>',
        ],
        "markdown": ["[Danke](https://example.com/thank-you-page)"],
    }
    for format, texts in cases.items():
        body = {"q": texts, "source": "auto", "target": "en", "format": format}
        status, reply = post(lt_server, "/translate", body)
        assert status == 200, reply
        assert [d["language"] for d in reply["detectedLanguage"]] == ["de"] * len(texts), (format, reply)
        assert all(d["confidence"] > 50 for d in reply["detectedLanguage"]), reply


def test_numbers_and_dates_go_with_the_batchs_language_and_detect_at_confidence_0(lt_server, client):
    """Digits say nothing of a language: every served one tied, and the alphabetically first (de)
    was named at 50%, sending a French list's dates to the German model."""
    before = lt_server.metric("attnserve_request_characters_count", model="rev-de-en")
    texts = ["merci beaucoup", "2025-03-03", "42 %"]
    status, reply = post(lt_server, "/translate", {"q": texts, "source": "auto", "target": "en"})
    assert status == 200, reply
    assert [d["language"] for d in reply["detectedLanguage"]] == ["fr"] * 3
    assert [d["confidence"] > 0 for d in reply["detectedLanguage"]] == [True, False, False]
    assert lt_server.metric("attnserve_request_characters_count", model="rev-de-en") == before
    # LibreTranslate's /detect: one served language at confidence 0, as it answers what it cannot detect
    for q in ("42", "2025-03-03", "+49 30 1234"):
        found = client.detect(q)
        assert len(found) == 1 and found[0]["confidence"] == 0 and found[0]["language"] in {"de", "en", "fr"}


def test_a_word_with_no_evidence_goes_with_the_batchs_language(lt_server, client):
    """ "ok" ties every served language; German, the alphabetically first, was named at 50%."""
    texts = ["merci beaucoup", "ok", "Hi"]
    status, reply = post(lt_server, "/translate", {"q": texts, "source": "auto", "target": "en"})
    assert status == 200, reply
    assert [d["language"] for d in reply["detectedLanguage"]] == ["fr"] * 3
    assert [d["confidence"] > 0 for d in reply["detectedLanguage"]] == [True, False, False]
    found = client.detect("ok")
    assert len(found) == 1 and found[0]["confidence"] == 0 and found[0]["language"] in {"de", "en", "fr"}


def test_web_and_e_mail_addresses_are_not_read_as_a_language(lt_server, client):
    """A link's letters ("latest-release-notes") read as English: a German message with a link
    went to the English model's pair, and /detect named English."""
    link = "https://www.example.com/downloads/latest-release-notes.html"
    assert client.detect(f"Siehe {link}")[0]["language"] == "de"
    assert client.detect(f"Voir {link}")[0]["language"] == "fr"
    assert client.detect("Kontakt: support@example.com")[0]["language"] == "de"
    texts = [f"Siehe {link}", "Mehr unter www.shop.example.com/products/shoes/running", link]
    status, reply = post(lt_server, "/translate", {"q": texts, "source": "auto", "target": "en"})
    assert status == 200, reply
    assert [d["language"] for d in reply["detectedLanguage"]] == ["de"] * 3
    assert [d["confidence"] > 50 for d in reply["detectedLanguage"]] == [True, True, False]  # a link alone: none


def test_blank_entries_of_a_batch_come_back_as_sent(lt_server):
    """LibreTranslate translates each entry of a list q and answers a blank one without the model:
    a client's table of strings with empty cells keeps its shape. With ``source: auto`` among
    several languages a blank entry goes with the batch's language, at confidence 0."""
    body = {"q": ["t5 t9", "", "  ", "t17"], "source": "en", "target": "de", "alternatives": 1}
    status, reply = post(lt_server, "/translate", body)
    assert status == 200, reply
    assert reply["translatedText"] == ["t9 t5", "", "  ", "t17"]
    assert [len(a) for a in reply["alternatives"]] == [1, 0, 0, 1]
    texts = ["", "Wir wohnen gern in diesem Haus", " "]
    status, reply = post(lt_server, "/translate", {"q": texts, "source": "auto", "target": "en"})
    assert status == 200, reply
    assert reply["translatedText"][0] == "" and reply["translatedText"][2] == " "
    assert [d["language"] for d in reply["detectedLanguage"]] == ["de"] * 3
    assert [d["confidence"] == 0 for d in reply["detectedLanguage"]] == [True, False, True]
    status, reply = post(lt_server, "/translate", {"q": ["", " "], "source": "auto", "target": "en"})
    assert status == 200 and reply["translatedText"] == ["", " "], reply


def test_detect_ranks_the_served_languages(client, lt_server):
    """LibreTranslate's client against a server with the default settings: no extra installed."""
    assert lt_server.app.settings.language_detection == "langid"
    found = client.detect("Bonjour, nous habitons dans une petite maison près de la rivière.")
    assert found[0]["language"] == "fr" and found[0]["confidence"] > 50
    assert {d["language"] for d in found} <= {"de", "en", "fr"}
    assert [d["confidence"] for d in found] == sorted((d["confidence"] for d in found), reverse=True)
    assert all(set(d) == {"confidence", "language"} and 0 < d["confidence"] <= 100 for d in found)
    # one to three words, as people type them
    assert [client.detect(q)[0]["language"] for q in ("guten Morgen", "merci beaucoup", "thank you")] == [
        "de",
        "fr",
        "en",
    ]


def test_alternatives_are_other_distinct_hypotheses(lt_server):
    body = {"q": "t5 t9 t17", "source": "en", "target": "de", "alternatives": 2}
    status, reply = post(lt_server, "/translate", body)
    assert status == 200 and reply["translatedText"] == "t17 t9 t5"
    alternatives = reply["alternatives"]
    assert 1 <= len(alternatives) <= 2 and len(set(alternatives)) == len(alternatives)
    assert "t17 t9 t5" not in alternatives and all(isinstance(a, str) and a for a in alternatives)
    status, reply = post(lt_server, "/translate", {**body, "q": ["t5 t6", "t7"], "alternatives": "1"})
    assert status == 200 and reply["translatedText"] == ["t6 t5", "t7"]
    assert [len(a) for a in reply["alternatives"]] == [1, 1] and reply["alternatives"][0] != ["t6 t5"]


@pytest.fixture(scope="module")
def bundled_lt(serve):
    """The bundled English -> German translator, whose subword beams hold texts twice."""
    with serve(REPO, http_port=0, max_beam_size=4, language_detection="off") as handle:
        yield handle


def test_alternatives_widen_the_beam_until_there_are_n(bundled_lt):
    """Two of a beam's token sequences can read as one text ("Freitag"): the beam of n + 1 then
    holds fewer than n other texts, and those texts are decoded again with a wider beam, within
    --max-beam-size, so n alternatives come back; the translation is the beam of n + 1's."""
    texts = ["Friday", "at 3:45 PM", "", "Monday"]
    status, reply = post(bundled_lt, "/translate", {"q": texts, "source": "en", "target": "de", "alternatives": 1})
    assert status == 200, reply
    assert reply["translatedText"] == ["Freitag", "um 15:45 Uhr", "", "Montag"]
    assert [len(a) for a in reply["alternatives"]] == [1, 1, 0, 1]
    assert reply["alternatives"][1] == ["um 13:45 Uhr"]  # had one in the beam of 2: not decoded again
    assert all(a != [best] for a, best in zip(reply["alternatives"], reply["translatedText"]))
    # at --max-beam-size (4) the beam holds three texts: two alternatives, never one twice
    status, reply = post(bundled_lt, "/translate", {"q": "Friday", "source": "en", "target": "de", "alternatives": 3})
    assert status == 200 and reply["translatedText"] == "Freitag", reply
    assert len(reply["alternatives"]) == 2 and len(set(reply["alternatives"])) == 2
    assert "Freitag" not in reply["alternatives"]


def test_frontend_settings_show_the_limits_and_a_default_pair(lt_server):
    status, reply = get(lt_server, "/frontend/settings")
    assert status == 200 and reply["charLimit"] == MAX_TEXT_CHARS
    assert reply["apiKeys"] is False and reply["keyRequired"] is False
    assert reply["language"] == {
        "source": {"code": "de", "name": "German"},
        "target": {"code": "en", "name": "English"},
    }


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"source": "en", "target": "de"}, "Invalid request: missing q parameter"),
        ({"q": "", "source": "en", "target": "de"}, "Invalid request: missing q parameter"),
        ({"q": [], "source": "en", "target": "de"}, "Invalid request: missing q parameter"),
        ({"q": "t5", "target": "de"}, "Invalid request: missing source parameter"),
        ({"q": "t5", "source": "en"}, "Invalid request: missing target parameter"),
        ({"q": 5, "source": "en", "target": "de"}, "q parameter must be a string or a list of strings"),
        ({"q": ["t5", 7], "source": "en", "target": "de"}, "q parameter must be a string or a list of strings"),
        ({"q": "t5", "source": ["en"], "target": "de"}, "source parameter must be a string"),
        ({"q": "t5", "source": "xx", "target": "de"}, "xx is not supported"),
        ({"q": "t5", "source": "en", "target": "xx"}, "xx is not supported"),
        (
            {"q": "t5", "source": "en", "target": "en"},
            "English (en) is not available as a target language from English",
        ),
        ({"q": "t5", "source": "en", "target": "de", "format": "xml"}, "xml format is not supported"),
        ({"q": "t5", "source": "en", "target": "de", "alternatives": "many"}, "alternatives parameter is not a number"),
        ({"q": "t5", "source": "en", "target": "de", "alternatives": {}}, "alternatives parameter is not a number"),
        ({"q": "t5", "source": "en", "target": "de", "alternatives": 9}, "alternatives parameter must be <= 3"),
        ({"q": ["t5"] * 9, "source": "en", "target": "de"}, "request (9) exceeds text limit (8)"),
        ({"q": "t5 " * 100, "source": "en", "target": "de"}, f"request (300) exceeds text limit ({MAX_TEXT_CHARS})"),
        ({"q": "t5", "source": "auto", "target": "fr"}, "French (fr) is not available as a target language"),
        ({"q": "t5", "source": "auto", "target": "auto"}, "auto is not supported"),
    ],
)
def test_bad_requests_are_400_with_the_error(lt_server, body, fragment):
    status, reply = post(lt_server, "/translate", body)
    assert status == 400 and fragment in reply["error"]


@pytest.mark.parametrize(
    ("path", "body", "fragment"),
    [
        ("/translate", b"{nope", "Invalid JSON format"),
        ("/translate", b"[1, 2]", "Invalid JSON format"),
        ("/detect", b"{nope", "Invalid JSON format"),
        ("/detect", b"{}", "missing q parameter"),
    ],
)
def test_malformed_json_is_400(lt_server, path, body, fragment):
    status, reply = post(lt_server, path, body)
    assert status == 400 and fragment in reply["error"]


def test_the_official_client_sees_the_http_error(client):
    with pytest.raises(urllib.error.HTTPError) as err:
        client.translate("t5", "en", "xx")
    assert err.value.code == 400 and json.loads(err.value.read()) == {"error": "xx is not supported"}


def test_html_keeps_its_markup_and_lines_keep_their_breaks(lt_server, client):
    html = '<p title="t5">t5 t9</p>\n<ul><li>t17 t4</li></ul>'
    body = {"q": html, "source": "en", "target": "de", "format": "html"}
    assert post(lt_server, "/translate", body) == (
        200,
        {"translatedText": '<p title="t5">t9 t5</p>\n<ul><li>t4 t17</li></ul>'},
    )
    status, reply = post(lt_server, "/translate", {**body, "q": [html, "<b>t6 t7</b>"]})
    assert reply["translatedText"][1] == "<b>t7 t6</b>"
    assert client.translate("t5 t9\nt17 t4\n\n  t6", "en", "de") == "t9 t5\nt4 t17\n\n  t6"  # a form, as sent


def _post_query(server, path: str, query: dict, body: bytes = b"") -> tuple[int, object]:
    url = f"http://{server.http_address}{path}?{urllib.parse.urlencode(query)}"
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers), timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_fields_in_the_query_string_count_as_upstream_reads_a_form(lt_server):
    """Upstream reads a form's fields with the URL's query (Flask's ``request.values``), so scripts
    and plugins that POST ``/translate?q=...&source=en&target=de`` get their translation, not
    "missing q"; a field in both places is the query's."""
    fields = {"q": "t5 t9 t17", "source": "en", "target": "de"}
    assert _post_query(lt_server, "/translate", fields) == (200, {"translatedText": "t17 t9 t5"})
    assert _post_query(lt_server, "/translate", {"q": "t5 t9"}, b"q=t4&source=en&target=de") == (
        200,
        {"translatedText": "t9 t5"},
    )
    status, reply = _post_query(lt_server, "/detect", {"q": "Wir wohnen gern in diesem Haus"})
    assert status == 200 and reply[0]["language"] == "de", reply


@pytest.fixture(scope="module")
def keyed_server(serve, tmp_path_factory, reverser_dir):
    root = tmp_path_factory.mktemp("lt-keyed")
    _copy(reverser_dir, root / "rev-en-de", "rev-en-de", {"source": ["en"], "target": ["de"]})
    _copy(reverser_dir, root / "rev-fr-de", "rev-fr-de", {"source": ["fr"], "target": ["de"]})
    settings = dict(max_translation_queue=1, max_active_sequences=1, language_detection="off")
    with serve(root, http_port=0, auth_tokens="sekrit", **settings) as handle:
        yield handle


def test_api_key_is_a_bearer_token(keyed_server):
    url = f"http://{keyed_server.http_address}"
    assert LibreTranslateAPI(url, api_key="sekrit").translate("t5 t6", "en", "de") == "t6 t5"
    with pytest.raises(urllib.error.HTTPError) as err:
        LibreTranslateAPI(url, api_key="wrong").translate("t5", "en", "de")
    assert err.value.code == 403 and json.loads(err.value.read()) == {"error": "Invalid API key"}
    status, reply = post(keyed_server, "/translate", {"q": "t5", "source": "en", "target": "de"})
    assert (status, reply) == (400, {"error": "Please contact the server operator to get an API key"})  # upstream's
    headers = {"Authorization": "Bearer sekrit"}
    assert post(keyed_server, "/translate", {"q": "t5", "source": "en", "target": "de"}, headers) == (
        200,
        {"translatedText": "t5"},
    )
    query = {"q": "t5 t6", "source": "en", "target": "de", "api_key": "sekrit"}
    assert _post_query(keyed_server, "/translate", query) == (200, {"translatedText": "t6 t5"})  # a key in the URL
    assert [lang["code"] for lang in LibreTranslateAPI(url).languages()] == ["de", "en", "fr"]  # open, as upstream
    assert get(keyed_server, "/frontend/settings")[1]["keyRequired"] is True
    assert keyed_server.metric("attnserve_unauthenticated_total", method="libretranslate.translate") == 2


def test_health_is_open_and_suggestions_are_refused_as_upstream_refuses_them(keyed_server):
    """LibreTranslate's image checks ``GET /health`` (``scripts/healthcheck.py``), with no key."""
    assert get(keyed_server, "/health") == (200, {"status": "ok"})
    status, reply = post(keyed_server, "/suggest", {"q": "t5", "s": "t6", "source": "en", "target": "de"})
    assert (status, reply) == (403, {"error": "Suggestions are disabled on this server."})
    assert get(keyed_server, "/frontend/settings")[1]["suggestions"] is False


def test_without_a_detector_detect_is_403_and_auto_needs_a_single_source(keyed_server):
    key = {"api_key": "sekrit"}
    status, reply = post(keyed_server, "/detect", {"q": "Hello there", **key})
    assert status == 403 and "Language detection is disabled" in reply["error"]
    status, reply = post(keyed_server, "/translate", {"q": "t5", "source": "auto", "target": "de", **key})
    assert status == 400 and "name the source language: one of en, fr" in reply["error"]


def test_a_full_queue_is_429(keyed_server):
    engine = keyed_server.app.registry.models["rev-en-de"].engine
    hold, steps = threading.Event(), []
    engine.on_step = lambda rows, generated: (steps.append(rows), hold.wait(10))
    body = {"q": "t5 t6", "source": "en", "target": "de", "api_key": "sekrit"}
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(post(keyed_server, "/translate", body))) for _ in range(2)
    ]
    try:
        for t in threads:  # one decodes (held at its first step), one waits in the queue
            t.start()
            deadline = time.monotonic() + 10
            while not (steps if t is threads[0] else engine.queued) and time.monotonic() < deadline:
                time.sleep(0.01)
        status, reply = post(keyed_server, "/translate", body)
        assert status == 429 and "queue is full" in reply["error"]
    finally:
        hold.set()
        for t in threads:
            t.join(30)
    assert results == [(200, {"translatedText": "t6 t5"})] * 2


def test_a_browser_page_of_another_origin_may_call_the_routes(keyed_server):
    """LibreTranslate answers every origin (flask-cors), so web pages and browser extensions can
    call it: the preflight needs no key, and the answers, errors included, allow any origin."""
    preflight = urllib.request.Request(
        f"http://{keyed_server.http_address}/translate",
        method="OPTIONS",
        headers={
            "Origin": "https://example.org",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    with urllib.request.urlopen(preflight, timeout=60) as reply:
        assert reply.status == 204
        assert reply.headers["Access-Control-Allow-Origin"] == "*"
        assert "POST" in reply.headers["Access-Control-Allow-Methods"]
        assert "Content-Type" in reply.headers["Access-Control-Allow-Headers"]
    body = json.dumps({"q": "t5 t6", "source": "en", "target": "de", "api_key": "sekrit"}).encode()
    request = urllib.request.Request(
        f"http://{keyed_server.http_address}/translate",
        data=body,
        headers={"Content-Type": "application/json", "Origin": "https://example.org"},
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        assert reply.headers["Access-Control-Allow-Origin"] == "*"
        assert json.loads(reply.read()) == {"translatedText": "t6 t5"}
    bad = urllib.request.Request(
        f"http://{keyed_server.http_address}/translate",
        data=json.dumps({"q": "t5", "source": "en", "target": "de", "api_key": "wrong"}).encode(),
        headers={"Content-Type": "application/json", "Origin": "https://example.org"},
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(bad, timeout=60)
    assert err.value.code == 403 and err.value.headers["Access-Control-Allow-Origin"] == "*"
    with urllib.request.urlopen(f"http://{keyed_server.http_address}/languages", timeout=60) as reply:
        assert reply.headers["Access-Control-Allow-Origin"] == "*"
    # KServe's routes are not LibreTranslate's: no CORS headers there
    with urllib.request.urlopen(f"http://{keyed_server.http_address}/v2/health/live", timeout=60) as reply:
        assert "Access-Control-Allow-Origin" not in reply.headers
