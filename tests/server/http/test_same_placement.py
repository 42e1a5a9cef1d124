"""One placement for every format, on the live server with the bundled English -> German
translator: the same sentences (examples/sentences.tsv's phrase types) with two and three
formatted stretches come back with each word in the same style whether they are sent as html,
markdown, .docx, .odt, .pptx, EPUB or a .md file. A .docx gave every run with words at least one word, so
"on <b>Friday, January 9, 2026</b> at <i>3:45 PM</i>" came back with 2026 unbolded."""

from __future__ import annotations

import re

import pytest
from lxml import etree

from tests.server.files.test_adversarial_translations import HYPERLINK, R_NS, w_paragraph, w_part, w_run
from tests.server.files.test_formats import entries
from tests.server.http.test_files import TEXT, A, W, files_server, translate_texts, translated
from tests.support import office_files as office

SENTENCES = [
    [("on ", ""), ("Friday, January 9, 2026", "b"), (" at ", ""), ("3:45 PM", "i")],
    [("more than ", ""), ("1,500", "b"), (" miles", "")],
    [("Vienna, ", ""), ("12", "b"), (" ", ""), ("October", "i"), (" 1999", "")],
    [("next ", ""), ("Friday", "b"), (" at ", ""), ("6:00 PM", "i")],
    [("two hours", "b"), (" and ", ""), ("fifteen", "i"), (" ", ""), ("minutes", "b")],
    [("on ", ""), ("Monday", "b"), (", ", ""), ("March 3", "i"), (", ", ""), ("2025", "b"), (" at 3:45 PM", "")],
]
# a stretch at the sentence's edge set off by clause punctuation: a phrase of its own in every format
EDGES = [
    [("Monday, March 3, 2025", "b"), (", at 3:45 PM", "")],
    [("Vienna", "i"), (", 12 October 1999", "")],
    [("Monday, March 3, 2025: ", ""), ("9:00 AM – 5:30 PM", "b")],
    [("next Friday", "b"), (", ", ""), ("at 6:00 PM", "i")],
]
ALL = SENTENCES + EDGES
MARKS = {"html": {"b": ("<b>", "</b>"), "i": ("<i>", "</i>")}, "markdown": {"b": ("**", "**"), "i": ("*", "*")}}
TOKEN = {"html": re.compile(r"</?[bi]>"), "markdown": re.compile(r"\*\*|\*")}


@pytest.fixture(scope="module")
def server(serve, tmp_path_factory):
    with files_server(serve, tmp_path_factory.mktemp("downloads")) as handle:
        yield handle


def marked(runs, format: str) -> str:
    marks = MARKS[format]
    return "".join(f"{marks[s][0]}{t}{marks[s][1]}" if s else t for t, s in runs)


def styled_words(pieces) -> list[tuple[str, str]]:
    """(word, style of its first letter or digit) for the words of ``(text, style)`` pieces."""
    chars = [(ch, style) for text, style in pieces for ch in text]
    text = "".join(ch for ch, _ in chars)
    out = []
    for m in re.finditer(r"\S+", text):
        styles = [chars[k][1] for k in range(m.start(), m.end()) if chars[k][0].isalnum()]
        out.append((m.group(), styles[0] if styles else ""))
    return out


def from_markup(text: str, format: str) -> list[tuple[str, str]]:
    pieces, open_, at = [], {"b": False, "i": False}, 0
    for m in TOKEN[format].finditer(text):
        pieces.append((text[at : m.start()], "b" if open_["b"] else "i" if open_["i"] else ""))
        kind = "b" if m.group().strip("</>") == "b" or m.group() == "**" else "i"
        open_[kind] = not open_[kind]
        at = m.end()
    pieces.append((text[at:], ""))
    return styled_words(pieces)


def from_docx(data: bytes) -> list[list[tuple[str, str]]]:
    body = etree.fromstring(entries(data)["word/document.xml"])

    def style(r) -> str:
        return "b" if r.find(f"{W}rPr/{W}b") is not None else "i" if r.find(f"{W}rPr/{W}i") is not None else ""

    return [styled_words(["".join(r.itertext()), style(r)] for r in p.iter(f"{W}r")) for p in body.iter(f"{W}p")]


def from_pptx(data: bytes) -> list[list[tuple[str, str]]]:
    slide = etree.fromstring(entries(data)["ppt/slides/slide1.xml"])

    def style(r) -> str:
        props = r.find(f"{A}rPr")
        return "b" if props.get("b") == "1" else "i" if props.get("i") == "1" else ""

    return [styled_words(["".join(r.itertext()), style(r)] for r in p.iter(f"{A}r")) for p in slide.iter(f"{A}p")]


def from_odt(data: bytes) -> list[list[tuple[str, str]]]:
    content = etree.fromstring(entries(data)["content.xml"])
    out = []
    for p in content.iter(f"{TEXT}p"):
        pieces = [(p.text or "", "")]
        for span in p:
            pieces += [(span.text or "", span.get(f"{TEXT}style-name").lower()), (span.tail or "", "")]
        out.append(styled_words(pieces))
    return out


def from_epub(data: bytes) -> list[list[tuple[str, str]]]:
    pages = entries(data)
    chapters = [pages[f"OEBPS/chapter{n}.xhtml"].decode() for n in range(len(ALL))]
    return [from_markup(re.search(r"<body>(.*)</body>", c, re.S).group(1), "html") for c in chapters]


def test_two_and_three_formatted_stretches_are_placed_alike_in_every_format(server):
    plain = translate_texts(server, ["".join(t for t, _ in runs) for runs in SENTENCES])
    html = [from_markup(t, "html") for t in translate_texts(server, [marked(r, "html") for r in ALL], "html")]
    markdown = translate_texts(server, [marked(r, "markdown") for r in ALL], "markdown")
    assert [[w for w, _ in words] for words in html[: len(SENTENCES)]] == [t.split() for t in plain]  # the same
    assert [from_markup(t, "markdown") for t in markdown] == html
    assert from_docx(translated(server, "dates.docx", office.docx(ALL))) == html
    assert from_odt(translated(server, "dates.odt", office.odt(ALL))) == html
    assert from_pptx(translated(server, "dates.pptx", office.pptx([ALL]))) == html
    md = translated(server, "dates.md", "\n\n".join(marked(r, "markdown") for r in ALL).encode()).decode()
    assert [from_markup(line, "markdown") for line in md.split("\n\n")] == html
    assert from_epub(translated(server, "dates.epub", office.epub([marked(r, "html") for r in ALL]))) == html
    # translated as the phrases they are, as html and markdown are: "09:00–17:30 Uhr", never "2025:00 Uhr"
    assert html[6] == [("Montag,", "b"), ("3.", "b"), ("März", "b"), ("2025,", "b"), ("um", ""), ("15:45", "")] + [
        ("Uhr", "")
    ]  # fmt: skip
    assert html[8] == [("Montag,", ""), ("3.", ""), ("März", ""), ("2025:", ""), ("09:00–17:30", "b"), ("Uhr", "b")]
    # the sentence: the whole date bold, "um 15:45 Uhr" italic
    assert html[0] == [("am", ""), ("Freitag,", "b"), ("9.", "b"), ("Januar", "b"), ("2026", "b")] + [
        ("um", "i"), ("15:45", "i"), ("Uhr", "i")
    ]  # fmt: skip


def test_underline_colour_and_a_hyperlink_stay_on_the_words_they_cover(server):
    paragraphs = [
        w_paragraph(
            w_run("more than "), w_run("1,500", '<w:u w:val="single"/><w:color w:val="FF0000"/>'), w_run(" miles")
        ),
        w_paragraph(
            w_run("next "),
            "<w:hyperlink r:id='rId9'>" + w_run("Friday", HYPERLINK) + "</w:hyperlink>",
            w_run(" at "),
            w_run("6:00 PM", '<w:u w:val="single"/>'),
        ),
    ]
    source = office._zip([("word/document.xml", w_part("document", f"<w:body>{''.join(paragraphs)}</w:body>"))])
    body = etree.fromstring(entries(translated(server, "links.docx", source))["word/document.xml"])
    runs = [[r for r in p.iter(f"{W}r")] for p in body.iter(f"{W}p")]
    html = translate_texts(server, ["more than <u>1,500</u> miles", "next <a>Friday</a> at <u>6:00 PM</u>"], "html")
    assert html == ["mehr als <u>1.500</u> Meilen", "nächsten <a>Freitag</a> <u>um 18:00 Uhr</u>"]
    underlined = [
        " ".join("".join(r.itertext()) for r in p if r.find(f"{W}rPr/{W}u") is not None).split() for p in runs
    ]
    assert underlined == [["1.500"], ["um", "18:00", "Uhr"]]  # as html has them
    (link,) = body.iter(f"{W}hyperlink")
    assert "".join(link.itertext()).split() == ["Freitag"] and link.get(f"{{{R_NS}}}id") == "rId9"
    assert link.find(f"{W}r/{W}rPr/{W}rStyle").get(f"{W}val") == "Hyperlink"
