"""Alignments, markup placed by them and markdown on the bundled translator, live, through
attnserve.v1 (and its client CLI), LibreTranslate, generate and KServe v2 REST (issue 34)."""

from __future__ import annotations

import json
import shutil

import grpc
import numpy as np
import pytest
from PIL import Image

from attnserve.benchmarks import alignment_aer
from attnserve.benchmarks.common import without_step_attention_dir
from attnserve.client import AttnServeError
from attnserve.client.cli import main as client_main
from tests.support.server import post_json as post

from .conftest import COMMITTED

MODEL = "translator-en-de"


@pytest.fixture(scope="module")
def server(serve, translator_repo):
    with serve(translator_repo, http_port=0) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(server):
    with server.client(timeout=120.0) as c:
        yield c


class _Counted:
    """An aligner graph's session that counts its runs."""

    def __init__(self, session) -> None:
        self.session, self.runs = session, 0

    def run(self, *args, **kwargs):
        self.runs += 1
        return self.session.run(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.session, name)


@pytest.fixture
def steps_only(server):
    """The bundled decoder returns its steps' attention: the server opens no aligner session, so
    every alignment comes from the decoder's steps."""
    assert server.app.registry.models[MODEL].aligner is None


def test_v1_returns_one_alignment_per_sentence_with_spans(client, steps_only):
    (result,) = client.translate("Monday, March 3, 2025. at 3:45 PM", MODEL, alignments=True)
    assert result.text == "Montag, 3. März 2025. um 15:45 Uhr"
    first, second = result.hypotheses[0].alignments
    assert (first.source, first.target) == ("Monday, March 3, 2025.", "Montag, 3. März 2025.")
    assert first.pharaoh() == "0-0 2-1 1-2 3-3"  # "March 3" -> "3. März": the swap is found
    assert (second.source, second.target) == ("at 3:45 PM", "um 15:45 Uhr")
    assert {(0, 0), (1, 1)} <= set(second.links)
    for row in first.attention:  # word-level attention: one distribution per target word
        assert sum(row) == pytest.approx(1.0, abs=1e-4)
    (plain,) = client.translate("Monday, March 3, 2025", MODEL)
    assert plain.hypotheses[0].alignments == []  # only on request


def test_beam_search_aligns_from_its_steps_every_hypothesis_placed(client, steps_only):
    """Beam search's rows are followed through its reorders: its best hypothesis aligns as greedy
    does, and html places the markup of every hypothesis, with no aligner pass."""
    (result,) = client.translate("Monday, March 3, 2025", MODEL, alignments=True, beam_size=4)
    (greedy,) = client.translate("Monday, March 3, 2025", MODEL, alignments=True)
    assert result.text == greedy.text == "Montag, 3. März 2025"
    assert result.hypotheses[0].alignments[0].pharaoh() == "0-0 2-1 1-2 3-3"
    got, want = (np.array(r.hypotheses[0].alignments[0].attention) for r in (result, greedy))
    np.testing.assert_allclose(got, want, atol=1e-5)
    html = "Monday, <i>March</i> 3, 2025"
    (placed,) = client.translate(html, MODEL, format="html", beam_size=4, num_hypotheses=3)
    assert placed.text == "Montag, 3. <i>März</i> 2025"
    assert all(h.text.count("<i>") == h.text.count("</i>") == 1 for h in placed.hypotheses[1:])


def test_a_decoder_without_step_attention_aligns_with_the_aligner_graph(serve, tmp_path, client):
    """A directory whose decoder goes without ``step_attention`` (as exported before it) runs the
    aligner graph from the encoder output kept from decoding (its own encoder gone), for greedy
    and beam search, and aligns as the steps do."""
    without_step_attention_dir(COMMITTED, tmp_path / "repo" / MODEL, MODEL)
    text = "Monday, March 3, 2025. at 3:45 PM"
    with serve(tmp_path / "repo") as handle, handle.client(timeout=120.0) as old:
        aligner = handle.app.registry.models[MODEL].aligner
        aligner.encoder, counted = None, _Counted(aligner.session)
        aligner.session = counted
        for options in ({}, {"beam_size": 4}):
            (got,) = old.translate(text, MODEL, alignments=True, **options)
            (want,) = client.translate(text, MODEL, alignments=True, **options)
            assert got.text == want.text
            for a, b in zip(got.hypotheses[0].alignments, want.hypotheses[0].alignments):
                assert a.pharaoh() == b.pharaoh()
                np.testing.assert_allclose(np.array(a.attention), np.array(b.attention), atol=1e-5)
        assert counted.runs == 2  # once per request


def test_the_served_alignments_beat_the_diagonal_on_the_gold_set():
    gold = alignment_aer.read_gold()
    prepared, layer = alignment_aer.prepare(COMMITTED, gold)
    rule = alignment_aer.attention_rule(lambda w: w[layer].mean(axis=0))
    served = alignment_aer.aer([rule(p) for p in prepared], gold)
    diagonal = alignment_aer.aer([alignment_aer.diagonal(g) for g in gold], gold)
    assert served < diagonal / 2, (served, diagonal)


def test_libretranslate_generate_and_kserve_carry_alignments(server):
    body = {"q": ["Monday, March 3, 2025", "at 3:45 PM. about 5 miles"], "source": "en", "target": "de"}
    status, reply = post(server, "/translate", {**body, "alignments": True})
    assert status == 200 and reply["alignments"][0] == ["0-0 2-1 1-2 3-3"] and len(reply["alignments"][1]) == 2
    assert "alignments" not in post(server, "/translate", body)[1]
    status, reply = post(server, "/translate", {**body, "alignments": "maybe"})
    assert status == 400 and "alignments" in reply["error"]
    generate = {"text_input": "Monday, March 3, 2025", "parameters": {"return_alignments": True}}
    status, reply = post(server, f"/v2/models/{MODEL}/generate", generate)
    assert status == 200 and reply["alignments"] == ["0-0 2-1 1-2 3-3"]
    status, reply = post(server, f"/v2/models/{MODEL}/generate_stream", generate)
    assert status == 400 and "stream" in reply["error"]
    infer = {
        "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["Monday, March 3, 2025. at 3:45 PM"]}],
        "parameters": {"return_alignments": True},
    }
    status, reply = post(server, f"/v2/models/{MODEL}/infer", infer)
    outputs = {o["name"]: o["data"] for o in reply["outputs"]}
    assert status == 200 and outputs["ALIGNMENTS"][0].split("\n")[0] == "0-0 2-1 1-2 3-3"


def test_libretranslate_returns_the_attention_map_the_web_page_draws(server):
    body = {"q": "Monday, March 3, 2025. at 3:45 PM", "source": "en", "target": "de", "attention": True}
    status, reply = post(server, "/translate", body)
    assert status == 200 and reply["alignments"] == ["0-0 2-1 1-2 3-3", reply["alignments"][1]]
    first, second = reply["attention"]
    assert first["source"] == ["Monday,", "March", "3,", "2025."]
    assert first["target"] == ["Montag,", "3.", "März", "2025."]
    assert second["source"] == ["at", "3:45", "PM"] and second["target"][0] == "um"
    weights = first["weights"]  # a row per target word over the source words
    assert len(weights) == 4 and all(len(row) == 4 and sum(row) == pytest.approx(1.0, abs=1e-3) for row in weights)
    assert max(range(4), key=weights[2].__getitem__) == 1  # "März" attends most to "March"
    status, reply = post(server, "/translate", {**body, "q": ["Monday", "at 3:45 PM"]})
    assert status == 200 and [len(maps) for maps in reply["attention"]] == [1, 1]  # a list per text
    status, reply = post(server, "/translate", {**body, "attention": "yes please"})
    assert status == 400 and "attention" in reply["error"]


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        ("Monday, <i>March</i> 3, 2025", "Montag, 3. <i>März</i> 2025"),  # issue 34's examples
        ("Monday, <b>March 3</b>, 2025", "Montag, <b>3. März</b> 2025"),
        ("<p>It costs <span class='x'>€1,234.50</span>.</p>", "<p>Es kostet <span class='x'>1.234,50 €</span>.</p>"),
    ],
)
def test_html_tags_follow_reordered_words(client, html, expected, steps_only):
    (result,) = client.translate(html, MODEL, format="html")
    assert result.text == expected
    # a stream places them the same way: its deltas add up to the same text
    assert "".join(chunk.delta for chunk in client.translate_stream(html, MODEL, format="html")) == expected


def test_markdown_round_trips_through_v1_and_libretranslate(client, server):
    document = (
        "# Monday, *March* 3, 2025\n\n- at 3:45 PM\n- more than **1,500 miles**\n\n"
        '> on Friday, [January 10](https://example.com/january?x=March "March")\n\n'
        "| Monday | Tuesday |\n|---|---|\n| at 3:45 PM | about `5` miles |\n\n```\nMonday, March 3, 2025\n```\n"
    )
    (result,) = client.translate(document, MODEL, format="markdown")
    # headings, lists, quotes, tables and code kept; emphasis and the code span placed by
    # alignment; the link, set off by a comma, translated on its own and its target untouched
    # ("zwölf", the double space and the comma after "Freitag" dropped are this small model's)
    assert result.text == (
        "# Montag, 3. *März* 2025\n\n- um 15:45 Uhr\n- mehr als **1.500 Meilen**\n\n"
        '> am Freitag [10. Januar](https://example.com/january?x=March "March")\n\n'
        "| Montag | zwölf |\n|---|---|\n| um 15:45 Uhr | etwa  `5` Meilen |\n\n```\nMonday, March 3, 2025\n```\n"
    )
    assert "".join(c.delta for c in client.translate_stream(document, MODEL, format="markdown")) == result.text
    status, reply = post(server, "/translate", {"q": "Monday, *March* 3, 2025", "source": "en", "target": "de",
                                                "format": "markdown"})  # fmt: skip
    assert status == 200 and reply["translatedText"] == "Montag, 3. *März* 2025"


def test_client_cli_prints_alignments_and_draws_the_attention_map(server, capsys, tmp_path):
    picture = tmp_path / "map.png"
    argv = ["--address", server.address, "translate", "--alignments", "--attention-map", str(picture)]
    assert client_main([*argv, "Monday, March 3, 2025"]) == 0
    assert capsys.readouterr().out.splitlines() == ["Montag, 3. März 2025", "0-0 2-1 1-2 3-3"]
    with Image.open(picture) as image:  # a heat map of 4 source x 4 target words, labelled
        assert image.format == "PNG" and image.width > 4 * 36 and image.height > 4 * 36
        darkest = image.convert("L").getextrema()[0]
    assert darkest < 100  # cells drawn, not a blank picture
    assert client_main([*argv[:3], "--stream", "--alignments", "Monday"]) == 2


def test_a_model_without_its_aligner_refuses_alignments_and_still_places_nothing_wrong(serve, tmp_path):
    old = tmp_path / "repo" / MODEL
    without_step_attention_dir(COMMITTED, old, MODEL)  # exported before both
    manifest = json.loads((old / "model.json").read_text())
    del manifest["graphs"]["aligner"], manifest["files"]["aligner.onnx"]
    (old / "model.json").write_text(json.dumps(manifest))
    (old / "aligner.onnx").unlink()
    with serve(tmp_path / "repo") as handle, handle.client(timeout=120.0) as client:
        with pytest.raises(AttnServeError) as err:
            client.translate("Monday, March 3, 2025", MODEL, alignments=True)
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "aligner" in err.value.details and "re-export" in err.value.details
        # html without an aligner: sentences cut at the tags, as before; every tag kept
        (result,) = client.translate("Monday, <i>March</i> 3, 2025", MODEL, format="html")
        assert result.text.count("<i>") == 1 and result.text.count("</i>") == 1


def test_a_decoder_with_step_attention_aligns_without_the_aligner_graph(serve, tmp_path):
    """The aligner graph is only the fallback: a directory without aligner.onnx whose decoder
    returns its steps' attention aligns, places markup and draws the map as the bundled one."""
    new = tmp_path / "repo" / MODEL
    shutil.copytree(COMMITTED, new)
    manifest = json.loads((new / "model.json").read_text())
    del manifest["graphs"]["aligner"], manifest["files"]["aligner.onnx"]
    (new / "model.json").write_text(json.dumps(manifest))
    (new / "aligner.onnx").unlink()
    with serve(tmp_path / "repo") as handle, handle.client(timeout=120.0) as client:
        (result,) = client.translate("Monday, March 3, 2025", MODEL, alignments=True, beam_size=2)
        assert result.hypotheses[0].alignments[0].pharaoh() == "0-0 2-1 1-2 3-3"
        (placed,) = client.translate("Monday, <i>March</i> 3, 2025", MODEL, format="html")
        assert placed.text == "Montag, 3. <i>März</i> 2025"
