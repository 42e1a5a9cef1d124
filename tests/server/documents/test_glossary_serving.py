"""Glossaries end to end on the bundled translator, over real channels (issue 34): every term
verbatim in the output, greedy and beam, through attnserve.v1, LibreTranslate, generate and
KServe REST; rows without terms unchanged in the same batch; default glossaries from
--glossary-dir; the limits and errors."""

from __future__ import annotations

import json

import grpc
import pytest

from attnserve.client import AttnServeError
from attnserve.client.cli import main as client_main
from tests.support.server import post_json as post

MODEL = "translator-en-de"
TEXTS = ["Monday, March 3, 2025", "on the 4th of July", "the 21st of June", "at 3:45 PM", "Friday, the 9th of January"]
GLOSSARY = {"March": "MÄRZ", "July": "Juli", "January": "Jänner"}
KEEP = ["Monday"]
# text -> the terms it must contain
EXPECTED = {
    "Monday, March 3, 2025": ["Monday", "MÄRZ"],
    "on the 4th of July": ["Juli"],
    "Friday, the 9th of January": ["Jänner"],
}


@pytest.fixture(scope="module")
def server(serve, translator_repo, tmp_path_factory):
    folder = tmp_path_factory.mktemp("glossaries")
    (folder / f"{MODEL}.tsv").write_text("# the model's default\nJune\tBrachmond\nVienna\n", encoding="utf-8")
    (folder / "en-de.tsv").write_text("June\tJUNI\n", encoding="utf-8")  # the pair's overrides the model's
    with serve(translator_repo, http_port=0, glossary_dir=str(folder), max_glossary_terms=8) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(server):
    with server.client(timeout=120.0) as c:
        yield c


@pytest.mark.parametrize("beam_size", [1, 4])
def test_every_term_verbatim_and_rows_without_terms_unchanged(client, beam_size):
    plain = [t.text for t in client.translate(TEXTS, MODEL, beam_size=beam_size)]
    got = [t.text for t in client.translate(TEXTS, MODEL, beam_size=beam_size, glossary=GLOSSARY, keep=KEEP)]
    for text, before, after in zip(TEXTS, plain, got):
        for term in EXPECTED.get(text, []):
            assert term in after, (text, after)
        if text == "the 21st of June":  # the server's default glossary: the pair's file over the model's
            assert "JUNI" in after and "Brachmond" not in after
        elif text not in EXPECTED:  # the same batch, no term: the translation it gets without a glossary
            assert after == before


def test_a_term_the_model_writes_itself_changes_nothing(client):
    plain = client.translate(TEXTS, MODEL)
    own = client.translate(TEXTS, MODEL, glossary={"Monday": "Montag", "July": "Juli"})
    assert [t.text for t in own] == [t.text for t in plain]


def test_repeated_occurrences_each_get_the_term(client):
    document = "Monday, March 3, 2025\nMonday, March 10, 2025\nthe 21st of March"
    (out,) = client.translate(document, MODEL, glossary={"March": "MÄRZ"}, keep=["Monday"])
    assert out.text.count("MÄRZ") == 3 and out.text.count("Monday") == 2
    assert out.text.count("\n") == 2  # lines kept


def test_terms_inside_html_text(client):
    (out,) = client.translate("<p>Monday, <b>March 3</b>, 2025</p>", MODEL, format="html", glossary=GLOSSARY)
    assert "MÄRZ" in out.text and out.text.startswith("<p>") and "<b>" in out.text and out.text.endswith("</p>")


def test_sampling_writes_the_terms_too(client):
    for seed in range(3):
        (out,) = client.translate(
            "Monday, March 3, 2025", MODEL, temperature=1.5, seed=seed, glossary=GLOSSARY, keep=KEEP
        )
        assert "MÄRZ" in out.text and "Monday" in out.text


def test_a_stream_writes_the_terms_too(client):
    chunks = list(client.translate_stream("Monday, March 3, 2025", MODEL, glossary=GLOSSARY, keep=KEEP))
    text = "".join(c.delta for c in chunks)
    assert "MÄRZ" in text and "Monday" in text and chunks[-1].finish_reason


# Surrogates (server/service/surrogates.py): a target the model never writes (an English name
# kept, a word in capitals) is written through the model's own word and swapped in afterwards,
# so what follows it is what the model writes after its own word. With the targets' own tokens
# fed to it, these come out "Monday, 3. March 025", "nächsten Freitag um 18:00 Uhr Friday",
# "am October" and "Montag, 3. MÄRZ".
GERMAN = {"Monday": "Montag", "March": "März", "Friday": "Freitag", "October": "Oktober"}
KEPT = ["Monday, March 3, 2025", "next Friday at 6:00 PM", "on the 13th of October"]


def as_plain(text: str, glossary: dict[str, str]) -> str:
    """The unconstrained translation with the model's words replaced by the terms."""
    for source, target in glossary.items():
        text = text.replace(GERMAN[source], target)
    return text


@pytest.mark.parametrize("beam_size", [1, 4])
def test_kept_english_names_leave_the_rest_of_the_sentence_as_it_was(client, beam_size):
    plain = client.translate(KEPT, MODEL, beam_size=beam_size)
    kept = client.translate(KEPT, MODEL, beam_size=beam_size, keep=list(GERMAN))
    assert [t.text for t in kept] == [as_plain(t.text, {k: k for k in GERMAN}) for t in plain]
    assert kept[0].text == "Monday, 3. March 2025"


@pytest.mark.parametrize("beam_size", [1, 4])
def test_a_term_in_capitals_leaves_the_rest_of_the_sentence_as_it_was(client, beam_size):
    (plain,) = client.translate("Monday, March 3, 2025", MODEL, beam_size=beam_size)
    (got,) = client.translate("Monday, March 3, 2025", MODEL, beam_size=beam_size, glossary={"March": "MÄRZ"})
    assert got.text == as_plain(plain.text, {"March": "MÄRZ"}) == "Montag, 3. MÄRZ 2025"


def test_every_hypothesis_of_a_beam_has_the_terms_verbatim(client):
    (got,) = client.translate(KEPT[0], MODEL, beam_size=4, num_hypotheses=4, glossary={"March": "MÄRZ"}, keep=KEEP)
    assert len(got.hypotheses) == 4
    for h in got.hypotheses:
        assert "MÄRZ" in h.text and "Monday" in h.text, h.text


def test_a_stream_never_shows_the_model_s_own_word_for_a_term(client):
    document = "Monday, March 3, 2025\nnext Friday at 6:00 PM"
    glossary = {"March": "MÄRZ", "Friday": "Friday"}
    (whole,) = client.translate(document, MODEL, glossary=glossary, keep=KEEP, return_token_ids=True)
    chunks = list(client.translate_stream(document, MODEL, glossary=glossary, keep=KEEP))
    shown = ""
    for chunk in chunks:  # text once shown is never taken back: what was shown is in the final text
        shown += chunk.delta
        assert whole.text.startswith(shown)
    assert shown == whole.text == "Monday, 3. MÄRZ 2025\nnächsten Friday um 18:00 Uhr"
    (first,) = client.translate(KEPT[0], MODEL, glossary=glossary, keep=KEEP, return_token_ids=True)
    chunks = client.translate_stream(KEPT[0], MODEL, glossary=glossary, keep=KEEP, return_token_ids=True)
    streamed = [i for c in chunks for i in c.token_ids]
    assert streamed == first.hypotheses[0].token_ids  # the target's tokens, as the whole translation's


def test_alignments_and_markup_follow_a_kept_term(client):
    (plain,) = client.translate(KEPT[0], MODEL, alignments=True)
    (kept,) = client.translate(KEPT[0], MODEL, alignments=True, keep=["Monday", "March"])
    (alignment,) = kept.hypotheses[0].alignments
    assert alignment.target == "Monday, 3. March 2025"
    assert alignment.pharaoh() == plain.hypotheses[0].alignments[0].pharaoh() == "0-0 2-1 1-2 3-3"
    (html,) = client.translate("Monday, <i>March</i> 3, 2025", MODEL, format="html", glossary={"March": "MÄRZ"})
    assert html.text == "Montag, 3. <i>MÄRZ</i> 2025"


def test_client_cli_glossary_file_and_keep(server, tmp_path, capsys):
    tsv = tmp_path / "terms.tsv"
    tsv.write_text("# terms\nMarch\tMÄRZ\n\nJuly\n", encoding="utf-8")
    argv = ["--address", server.address, "translate", "--glossary", str(tsv), "--keep", "Monday"]
    assert client_main([*argv, "Monday, March 3, 2025", "on the 4th of July"]) == 0
    first, second = capsys.readouterr().out.splitlines()[:2]
    assert "MÄRZ" in first and "Monday" in first and "July" in second
    tsv.write_text("March\tMÄRZ\tMärz\n", encoding="utf-8")
    assert client_main([*argv, "Monday"]) == 2
    assert "line 1" in capsys.readouterr().err
    tsv.write_text("March\tMÄRZ\nMarch\tMärz\n", encoding="utf-8")  # which one was meant?
    assert client_main([*argv, "Monday"]) == 2
    assert "line 2" in capsys.readouterr().err
    tsv.write_text("March\tMÄRZ\n", encoding="utf-8-sig")  # as Excel and Notepad save it: the first term has no BOM
    assert client_main([*argv, "Monday, March 3, 2025"]) == 0
    assert "MÄRZ" in capsys.readouterr().out


def test_libretranslate_glossary_field(server):
    status, reply = post(
        server, "/translate", {"q": TEXTS[:2], "source": "en", "target": "de", "glossary": {**GLOSSARY, "Monday": ""}}
    )
    assert status == 200
    assert "MÄRZ" in reply["translatedText"][0] and "Monday" in reply["translatedText"][0]
    assert "Juli" in reply["translatedText"][1]
    status, reply = post(server, "/translate", {"q": "Monday", "source": "en", "target": "de", "glossary": ["x"]})
    assert status == 400 and "glossary" in reply["error"]


def test_generate_and_kserve_take_a_json_parameter(server):
    glossary = json.dumps({"March": "MÄRZ"})
    status, reply = post(
        server,
        f"/v2/models/{MODEL}/generate",
        {"text_input": "Monday, March 3, 2025", "parameters": {"glossary": glossary, "beam_size": 2}},
    )
    assert status == 200 and "MÄRZ" in reply["text_output"]
    body = {
        "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["on the 4th of July"]}],
        "parameters": {"glossary": json.dumps({"July": "Heumond"})},
    }
    status, reply = post(server, f"/v2/models/{MODEL}/infer", body)
    assert status == 200 and "Heumond" in reply["outputs"][0]["data"][0]
    status, reply = post(server, f"/v2/models/{MODEL}/generate", {"text_input": "x", "parameters": {"glossary": "{"}})
    assert status == 400 and "parameters.glossary" in reply["error"]


def test_terms_that_do_not_fit_max_new_tokens_are_invalid_argument_naming_them(client):
    with pytest.raises(AttnServeError) as err:
        client.translate("Monday, March 3, 2025", MODEL, max_new_tokens=4, glossary={"March": "Lenzmonat des Jahres"})
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and "'March'" in err.value.details


def test_glossary_limits(client):
    with pytest.raises(AttnServeError) as err:
        client.translate("Monday", MODEL, glossary={f"term{i}": "x" for i in range(9)})
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and "at most 8" in err.value.details
    with pytest.raises(AttnServeError) as err:
        client.translate("Monday", MODEL, glossary={"Monday": "x" * 201})
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and "200" in err.value.details
