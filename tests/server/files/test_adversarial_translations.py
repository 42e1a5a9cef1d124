"""Whatever the model says, a written file keeps its structure: every paragraph, run and its
style (bold, underline, colour, a hyperlink's run), table cell, header and footer of a .docx,
every run of a slide, every span of an .odt. The "translations" are adversarial (empty, the
source repeated, its words reordered, marker-like text, stray whitespace) and so are the word
placements (any run for any word, or none): the written package, its text taken out, must be
the source's, and the words written must be the translation's, in order, none lost or repeated."""

from __future__ import annotations

import io
import zipfile

from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

from attnserve.server import files
from attnserve.server.files import slots
from attnserve.server.files.jobs import write_file
from tests.support import office_files as office

LIMIT = 1 << 20
W_NS = office.W
DECLARATION = office.DECLARATION
HYPERLINK = '<w:rStyle w:val="Hyperlink"/>'
R_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"


def w_run(text: str, props: str = "") -> str:
    return f'<w:r>{f"<w:rPr>{props}</w:rPr>" if props else ""}<w:t xml:space="preserve">{text}</w:t></w:r>'


def w_paragraph(*runs: str) -> str:
    return f"<w:p>{''.join(runs)}</w:p>"


def w_part(root: str, body: str) -> str:
    return f'{DECLARATION}<w:{root} xmlns:w="{W_NS}" xmlns:r="{R_NS}">{body}</w:{root}>'


def rich_docx() -> bytes:
    """A .docx with the formatting users send: two and three styled runs, underline, colour, a
    hyperlink run, a tab and a break between runs, a table, a header and a footer."""
    body = "".join(
        [
            w_paragraph(
                w_run("on "), w_run("Friday, January 9, 2026", "<w:b/>"), w_run(" at "), w_run("3:45 PM", "<w:i/>")
            ),
            w_paragraph(
                w_run("more than "),
                w_run("1,500", "<w:b/>"),
                w_run(" miles and "),
                w_run("$1,250.00", '<w:u w:val="single"/><w:color w:val="FF0000"/>'),
            ),
            w_paragraph(
                w_run("See "),
                "<w:hyperlink r:id='rId9'>" + w_run("the report", HYPERLINK) + "</w:hyperlink>",
                w_run(" for details"),
                "<w:r><w:tab/></w:r>",
                w_run("next Friday at 6:00 PM", "<w:i/>"),
            ),
            "<w:tbl><w:tr>"
            + "".join(
                f"<w:tc>{w_paragraph(w_run(cell), w_run(' cell', '<w:b/>'))}</w:tc>" for cell in ("First", "Second")
            )
            + "</w:tr></w:tbl>",
            w_paragraph(w_run("It costs "), w_run("1,234.50", "<w:b/>"), "<w:r><w:br/></w:r>", w_run(" euros.")),
            "<w:sectPr/>",
        ]
    )
    header = w_paragraph(w_run("Quarterly "), w_run("report", "<w:b/>"))
    footer = w_paragraph(w_run("Page "), w_run("one", "<w:i/>"), w_run(" of the report"))
    return office._zip(
        [
            ("[Content_Types].xml", f"{DECLARATION}<Types/>"),
            ("word/document.xml", w_part("document", f"<w:body>{body}</w:body>")),
            ("word/header1.xml", w_part("hdr", header)),
            ("word/footer1.xml", w_part("ftr", footer)),
            ("word/media/image1.png", office.PNG),
        ]
    )


STYLED = [
    [("on ", ""), ("Friday, January 9, 2026", "b"), (" at ", ""), ("3:45 PM", "i")],
    [("more than ", ""), ("1,500", "b"), (" miles and ", ""), ("$1,250.00", "i")],
    [("Plain paragraph.", "")],
]
SOURCES = {
    "rich.docx": rich_docx(),
    "slides.pptx": office.pptx([STYLED, STYLED[:1]]),
    "text.odt": office.odt(STYLED),
    "slides.odp": office.odp([STYLED]),
}
MARKERS = ["<b>", "</i>", "**", "*", "`", "[](x)", "&amp;", "<w:t>", "]]>", "\t", "\n", "  ", "\u200b", "{0}"]


def skeleton(data: bytes) -> dict[str, bytes]:
    """Every entry of the package; an XML part with its character data taken out (what stays
    is every element, attribute and their order: paragraphs, runs, styles, cells, parts)."""
    out = {}
    with zipfile.ZipFile(io.BytesIO(data)) as package:
        for info in package.infolist():
            raw = package.read(info)
            if info.filename.endswith(".xml"):
                root = etree.fromstring(raw)
                for element in root.iter():
                    element.text = element.tail = None
                raw = etree.tostring(root)
            out[info.filename] = raw
    return out


@st.composite
def translation(draw, source: str) -> str:
    words = source.split()
    kind = draw(st.sampled_from(["empty", "repeated", "reordered", "markers", "text"]))
    if kind == "empty":
        return draw(st.sampled_from(["", " ", "\n"]))
    if kind == "repeated":
        return " ".join([source] * draw(st.integers(2, 4)))
    if kind == "reordered":
        return " ".join(draw(st.permutations(words)))
    if kind == "markers":
        return " ".join(draw(st.lists(st.sampled_from(MARKERS + words), max_size=12)))
    return draw(st.text(max_size=40))  # control characters and lone surrogates included


def words_of(data: bytes, name: str) -> list[str]:
    try:
        return [w for text in files.read(name, data, LIMIT).texts for w in text.split()]
    except files.FileRefused:  # every paragraph came back empty
        return []


@given(st.sampled_from(sorted(SOURCES)), st.data())
@settings(max_examples=120, deadline=None)
def test_any_translation_and_placement_keeps_the_file_structure_and_the_words(name, data):
    source = SOURCES[name]
    extracted = files.read(name, source, LIMIT)
    translations = [data.draw(translation(text)) for text in extracted.texts]
    preferred = {}
    for unit, text in zip(extracted.units, translations):
        runs = st.one_of(st.none(), st.integers(-1, len(unit.runs)))
        n = len(text.split())
        preferred[unit.text] = data.draw(st.one_of(st.none(), st.lists(runs, min_size=n, max_size=n), st.lists(runs)))
    out = write_file(name, source, LIMIT, translations, data.draw(st.sampled_from([None, preferred])))
    assert skeleton(out) == skeleton(source)
    assert words_of(out, name) == [w for t in translations for w in slots.xml_text(t).split()]


def test_the_rich_docx_reads_every_paragraph_cell_header_and_footer():
    texts = files.read("rich.docx", SOURCES["rich.docx"], LIMIT).texts
    assert "See the report for details\tnext Friday at 6:00 PM" in texts
    assert {"First cell", "Second cell", "Quarterly report", "Page one of the report"} <= set(texts)
