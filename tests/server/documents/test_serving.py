"""Documents end to end on the bundled translator (64 source tokens), over a real channel:
line structure, long documents, sentences on one line, normalisation, html, the limits in
characters, streaming in document order, n-best per document, the metrics (issue 14)."""

from __future__ import annotations

import re
import time

import grpc
import pytest

from attnserve.client import AttnServeError
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

from .conftest import TOKENIZER

MODEL = "translator-en-de"
EXAMPLES = TOKENIZER.parents[3] / "examples" / "sentences.tsv"


def _examples() -> list[tuple[str, str]]:
    rows = [line.split("\t") for line in EXAMPLES.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    return [(english, german) for english, german in rows]


@pytest.fixture(scope="module")
def server(serve, translator_repo):
    with serve(translator_repo) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(server):
    with server.client(timeout=120.0) as c:
        yield c


def alone(client, texts: list[str], **options) -> dict[str, str]:
    """Each text translated as a request's only text: text -> translation."""
    unique = sorted(set(texts))
    out = {}
    for i in range(0, len(unique), 32):
        part = unique[i : i + 32]
        out.update({t: r.text for t, r in zip(part, client.translate(part, MODEL, **options))})
    return out


def test_a_200_line_document_comes_back_line_for_line(client, tokenizer):
    english = [e for e, _ in _examples()]
    lines = []
    for i in range(200):
        if i % 9 == 4:
            lines.append("" if i % 2 else "   ")  # blank lines, one with spaces
        else:
            lines.append(("    ", "\t", "", "")[i % 4] + english[i % len(english)])
    document = "\n".join(lines) + "\n"
    assert len(tokenizer.encode(document).ids) > 20 * 64  # far over the model's 64 source tokens

    (result,) = client.translate(document, MODEL)

    out = result.text.split("\n")
    assert len(out) == 201 and out[-1] == ""  # 200 lines and the final newline
    translated = alone(client, [line for line in lines if line.strip()])
    for line, got in zip(lines, out):
        assert got == (translated[line] if line.strip() else line)  # blank lines and indentation kept
    # and they are translations, each line its own: the German of the model card's examples
    german = dict(_examples())
    assert sum(got.strip() == german[line.strip()] for line, got in zip(lines, out) if line.strip()) > 150


def test_two_sentences_on_one_line_are_both_translated_and_keep_their_space(client):
    first, second = "It costs €1,234.50.", "It is 7:30 AM."
    translated = alone(client, [first, second])
    assert translated == {first: "Es kostet 1.234,50 €.", second: "Es ist 07:30 Uhr."}  # examples/sentences.tsv
    for space in (" ", "   ", "\u00a0"):
        (result,) = client.translate(f"{first}{space}{second}", MODEL)
        assert result.text == f"{translated[first]}{space}{translated[second]}"


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        ("  Monday,   March  3,  2025  ", "  Montag, 3. März 2025  "),  # issue 14's example
        ("Monday,\tMarch 3,    2025", "Montag, 3. März 2025"),
        ("Monday, March 3, 2025\nFriday, January 9, 2026", "Montag, 3. März 2025\nFreitag, 9. Januar 2026"),
    ],
)
def test_issue_examples_extra_spaces_and_lines(client, sent, expected):
    (result,) = client.translate(sent, MODEL)
    assert result.text == expected


def test_html_keeps_tags_attributes_and_entities(client):
    html = (
        '<div class="card" data-x="a&amp;b">\n'
        "  <p><b>Monday, March 3, 2025</b> &amp; <em><a href='/x?a=1&amp;b=2'>at 3:45 PM</a></em></p>\n"
        "  <!-- a comment: Monday -->\n"
        '  <p title="Monday">It costs <span class="x">€1,234.50</span>.&nbsp;&#8212;</p>\n'
        '  <script>var when = "Monday, March 3, 2025";</script><style>p{color:red}</style>\n'
        "</div>"
    )
    (result,) = client.translate(html, MODEL, format="html")
    markup = re.compile(r"<[^>]*>|&[#\w]+;")
    assert markup.findall(result.text) == markup.findall(html)  # every tag, attribute and entity, in order
    assert "<b>Montag, 3. März 2025</b>" in result.text  # text nodes are translated
    # elements reaching the sentence's edges are phrases of their own, translated on their own
    assert "um 15:45 Uhr</a></em>" in result.text  # inside nested inline tags
    # one inside the sentence moves with its words, placed by alignment (issue 34)
    assert '<span class="x">1.234,50 €</span>' in result.text
    assert '<script>var when = "Monday, March 3, 2025";</script>' in result.text  # untouched
    assert result.text.startswith('<div class="card" data-x="a&amp;b">\n  <p>')  # indentation kept
    (plain,) = client.translate(html, MODEL)  # format text: markup is text, translated as such
    assert plain.text != result.text


def test_limits_in_characters_refuse_before_any_work(server, client):
    sentences = server.metric("attnserve_request_sentences_count", model=MODEL)
    with pytest.raises(AttnServeError) as err:
        client.translate("Monday, March 3, 2025. " * 45_000, MODEL)  # ~1 MB
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "1,035,000 characters" in err.value.details and "at most 50,000" in err.value.details
    with pytest.raises(AttnServeError) as err:
        client.translate(["x" * 45_000] * 5, MODEL)  # each under the text limit, together over the request's
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and "per request" in err.value.details
    assert server.metric("attnserve_request_sentences_count", model=MODEL) == sentences  # nothing was split
    with grpc.insecure_channel(server.address) as channel:
        limits = pb_grpc.InferenceServiceStub(channel).GetModel(pb.GetModelRequest(name=MODEL), timeout=10).limits
    assert (limits.max_text_chars, limits.max_request_chars) == (50_000, 200_000)


def test_stream_is_sentence_by_sentence_in_document_order(client):
    document = "\n  It costs €1,234.50. It is 7:30 AM.\n\nMonday, March 3, 2025\n"
    (whole,) = client.translate(document, MODEL, return_token_ids=True)
    chunks = list(client.translate_stream(document, MODEL, return_token_ids=True))
    assert "".join(c.delta for c in chunks) == whole.text
    # one chunk per generated token, in document order: the ids are the document's, sentence after sentence
    assert [t for c in chunks for t in c.token_ids] == whole.hypotheses[0].token_ids
    assert chunks[-1].finish_reason == "eos" and not any(c.finish_reason for c in chunks[:-1])
    html = "<p>It costs €1,234.50. <b>It is 7:30 AM.</b></p>"
    (whole,) = client.translate(html, MODEL, format="html")
    assert "".join(c.delta for c in client.translate_stream(html, MODEL, format="html")) == whole.text


def test_n_best_of_a_document_combines_its_sentences(client):
    first, second = "It costs €1,234.50.", "Monday, March 3, 2025"
    options = dict(beam_size=4, num_hypotheses=3, return_scores=True, return_token_ids=True)
    a, b = client.translate([first, second], MODEL, **options)
    (doc,) = client.translate(f"{first} {second}", MODEL, **options)
    assert doc.hypotheses[0].text == f"{a.hypotheses[0].text} {b.hypotheses[0].text}"
    assert doc.hypotheses[0].score == pytest.approx(a.hypotheses[0].score + b.hypotheses[0].score, abs=1e-5)
    assert len({tuple(h.token_ids) for h in doc.hypotheses}) == 3  # three combinations (two may read the same)
    assert doc.hypotheses[0].token_ids == a.hypotheses[0].token_ids + b.hypotheses[0].token_ids
    scores = [h.score for h in doc.hypotheses]
    assert scores == sorted(scores, reverse=True)
    combos = sorted((x.score + y.score for x in a.hypotheses for y in b.hypotheses), reverse=True)[:3]
    assert scores == pytest.approx(combos, abs=1e-5)


def test_metrics_count_sentences_and_characters(server, client):
    before = server.metric("attnserve_request_sentences_sum", model=MODEL)
    chars = server.metric("attnserve_request_characters_sum", model=MODEL)
    text = "It costs €1,234.50. It is 7:30 AM.\nMonday, March 3, 2025"
    client.translate([text, "at 3:45 PM"], MODEL)
    assert server.metric("attnserve_request_sentences_sum", model=MODEL) == before + 4
    assert server.metric("attnserve_request_characters_sum", model=MODEL) == chars + len(text) + 10


def test_kserve_translates_documents_with_the_format_parameter(server, client):
    tritonclient_grpc = pytest.importorskip("tritonclient.grpc")
    import numpy as np
    from tritonclient.utils import InferenceServerException

    texts = ["Monday, March 3, 2025\n\n  It costs €1,234.50. It is 7:30 AM.", "<p>on the <b>4th of July</b></p>"]
    expected = [r.text for r in client.translate(texts[:1], MODEL)]
    expected += [r.text for r in client.translate(texts[1:], MODEL, format="html")]
    triton = tritonclient_grpc.InferenceServerClient(server.address)
    try:
        for text, want, format in zip(texts, expected, ("text", "html")):
            tensor = tritonclient_grpc.InferInput("TEXT", [1], "BYTES")
            tensor.set_data_from_numpy(np.array([text.encode()], dtype=object))
            got = triton.infer(MODEL, [tensor], parameters={"format": format}).as_numpy("TRANSLATION")
            assert got[0].decode() == want
        assert "<b>4. Juli</b>" in expected[1] and expected[0].count("\n") == 2
        with pytest.raises(InferenceServerException) as err:
            triton.infer(MODEL, [tensor], parameters={"format": "latex"})
        assert err.value.status() == "StatusCode.INVALID_ARGUMENT" and "format" in err.value.message()
    finally:
        triton.close()


def test_client_cli_reads_an_html_document_from_stdin(server, client, capsys, monkeypatch):
    import io

    from attnserve.client.cli import main as client_main

    page = "<ul>\n  <li>on the <b>4th of July</b></li>\n  <li>It costs &euro;1,234.50.</li>\n</ul>"
    (want,) = client.translate(page, MODEL, format="html")
    monkeypatch.setattr("sys.stdin", io.StringIO(page + "\n"))  # as a file ends, or echo writes it
    assert client_main(["--address", server.address, "translate", "--format", "html", "-", "--model", MODEL]) == 0
    assert capsys.readouterr().out == want.text + "\n"  # that newline once: not a blank line after it
    assert "<li>Es kostet 1.234,50 &euro;.</li>" in want.text  # the entity spelled as sent, where German puts it


def test_a_cancelled_document_frees_every_row(server, client):
    engine = server.app.registry.models[MODEL].engine
    # 192 different sentences (a repeated sentence is decoded once)
    document = "\n".join(f"{english} ({i})" for i, (english, _) in enumerate(_examples() * 12))
    with pytest.raises(AttnServeError) as err:
        client.translate(document, MODEL, timeout=0.05)
    assert err.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    deadline = time.monotonic() + 20
    while (engine.active_sequences or engine.queued) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert engine.active_sequences == 0 and engine.queued == 0


def test_a_sentence_over_the_source_limit_is_cut_and_translated_whole(client, splitter, tokenizer):
    dates = ["Monday, March 3, 2025", "Friday, January 9, 2026", "Vienna, 12 October 1999", "the 21st of June"]
    sentence = "; ".join(dates * 4)  # one sentence, no line break
    assert len(tokenizer.encode(sentence).ids) > 64  # the old server refused it: "shorten or split it"
    prepared = splitter.split(sentence)  # where the server cuts it: after "; " (clause punctuation)
    assert prepared.segments > 1 and all(len(ids) <= 64 for ids in prepared.ids)
    (result,) = client.translate(sentence, MODEL)
    pieces = alone(client, list(prepared.sources))
    assert result.text == prepared.document.join([pieces[s] for s in prepared.sources])  # every piece, in place
