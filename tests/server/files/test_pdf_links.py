"""A PDF's links (link annotations: a web address, a place in the file) go with their words: the
translation's words a link's run was given (by word alignments, else by proportion of words) are
where a click on the link lands, on one line or over two, in one block or in two, and a link
whose words cannot be placed covers its block's translation rather than the empty place its
words were. Pages built with fpdf2, read back with PDFium."""

from __future__ import annotations

import time

import pytest
from fpdf import FPDF

from attnserve.benchmarks.pdfs import A4
from attnserve.server import files
from attnserve.server.files import place_aligned
from attnserve.server.files.run_placement import place
from tests.support.pdf_pages import links, pages

LIMIT = 1 << 20
AGENDA = "https://example.com/agenda"
PARAGRAPH = "The meeting is on Friday. We will discuss the report and the budget for the next year. Please read the "
REST = " before you come, and tell us if anything is missing."
GERMAN = (
    "Die Sitzung ist am Freitag. Wir besprechen den Bericht und das Budget für das nächste Jahr. "
    "Bitte lesen Sie vor Ihrem Kommen {} und sagen Sie uns, ob etwas fehlt."
)
NOTES = "Wenn Sie nicht kommen können, lesen Sie die Anmerkungen unten."


def letter() -> bytes:
    """A paragraph with a link to a web page in its third line, one with a link to a heading
    below, and the heading."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_margins(56, 56, 56)
    pdf.set_font("Helvetica", size=11)
    pdf.set_xy(56, 56)
    pdf.write(14, PARAGRAPH)
    pdf.write(14, "agenda for the meeting", link=AGENDA)
    pdf.write(14, REST)
    pdf.ln(30)
    notes = pdf.add_link()
    pdf.write(14, "If you cannot come, see the ")
    pdf.write(14, "notes", link=notes)
    pdf.write(14, " below.")
    pdf.ln(40)
    pdf.set_link(notes, y=pdf.get_y())
    pdf.write(14, "Notes")
    return bytes(pdf.output())


def translated(linked: str, placement=None) -> bytes:
    """The letter in German, the agenda link's words ``linked``: placed as word alignments would
    place them, or by ``placement``; the notes link's by proportion of words."""
    extracted = files.read("a.pdf", letter(), LIMIT)
    german = GERMAN.format(linked)
    before, after = (len(part.split()) for part in GERMAN.split("{}"))
    preferred = {extracted.texts[0]: [0] * before + [1] * len(linked.split()) + [2] * after}

    def aligned(unit, translation):
        return place_aligned(unit, translation, preferred.get(unit.text))

    return extracted.write([german, NOTES, "Anmerkungen"], placement or aligned)


def test_a_link_lands_on_its_translated_words():
    assert links(letter()) == [(AGENDA, ["agenda for the meeting"]), ("page 0", ["notes"])]
    out = translated("die Tagesordnung der Sitzung")
    assert links(out) == [(AGENDA, ["die Tagesordnung der Sitzung"]), ("page 0", ["Anmerkungen"])]


def test_a_link_whose_words_wrap_covers_them_on_each_line():
    linked = "die Tagesordnung der Sitzung des Vorstands im kommenden Jahr und die Liste der Gäste"
    out = translated(linked)
    (target, areas), _ = links(out)
    assert target == AGENDA and len(areas) == 2
    assert " ".join(areas) == linked
    lines = [t.text.strip() for t in pages(out)[0].texts]
    assert any(line.endswith(areas[0]) for line in lines) and any(line.startswith(areas[1]) for line in lines)


def test_a_link_whose_words_cannot_be_placed_covers_its_blocks_translation():
    def first_run_takes_all(unit, translation):
        return [translation] + [""] * (len(unit.runs) - 1)

    out = translated("die Tagesordnung der Sitzung", first_run_takes_all)
    (_, agenda), (_, notes) = links(out)
    assert len(agenda) > 1 and " ".join(agenda) == " ".join(GERMAN.format("die Tagesordnung der Sitzung").split())
    assert notes == [NOTES]


def card(below: float, beside: str) -> bytes:
    """A link's one rectangle over two blocks: a heading and the first words of the line
    ``below`` points under it (70: the rectangle's middle on no text), and ``beside`` them a
    column whose text comes between theirs in the page's order."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", size=16)
    pdf.text(56, 100, "Reports")
    pdf.set_font("Helvetica", size=11)
    if beside:
        pdf.text(300, 112, beside)
    pdf.text(56, 100 + below, "Download the full report")
    pdf.link(54, 84, pdf.get_string_width("Download the full") + 4, below + 22, AGENDA)
    return bytes(pdf.output())


def last_run_takes_all(unit, translation):
    return [""] * (len(unit.runs) - 1) + [translation]


@pytest.mark.parametrize("below, beside", [(70, ""), (30, "Contact us by mail")], ids=["apart", "a column beside"])
@pytest.mark.parametrize(
    "placement, covered",
    [(place, "Den ganzen Bericht"), (last_run_takes_all, "Den ganzen Bericht herunterladen")],
    ids=["placed", "not placed in one block"],
)
def test_a_link_over_two_blocks_covers_its_words_in_each(below, beside, placement, covered):
    """Its words in each block are placed on that block's translation, and the link covers them
    all; where they cannot be placed in one block, it covers that block's translation."""
    source = card(below, beside)
    assert links(source) == [(AGENDA, ["Reports Download the full"])]
    extracted = files.read("a.pdf", source, LIMIT)
    german = ["Berichte", "Kontakt per Post", "Den ganzen Bericht herunterladen"]
    out = extracted.write(german if beside else german[::2], placement)
    assert links(out) == [(AGENDA, ["Berichte", covered])]


def test_a_link_whose_words_all_came_back_empty_is_removed():
    """A block whose translation is empty keeps no link over the blank place its words were; a
    link over two blocks, one of them empty, covers the other's words."""
    out = files.read("a.pdf", letter(), LIMIT).write(["", NOTES, "Anmerkungen"])
    assert links(out) == [("page 0", ["Anmerkungen"])]
    assert [t.text.strip() for t in pages(out)[0].texts] == [NOTES, "Anmerkungen"]
    out = files.read("a.pdf", card(30, ""), LIMIT).write(["", "Den ganzen Bericht herunterladen"])
    assert links(out) == [(AGENDA, ["Den ganzen Bericht"])]


def test_a_page_of_thousands_of_links_over_all_its_text_is_translated_in_bounded_time():
    """Links past the first 500 rectangles a page stay where they are, and the characters the
    links look at are bounded, so a hostile page costs no more than a few of its text's reads."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", size=6)
    pdf.set_xy(20, 20)
    pdf.multi_cell(555, 7, " ".join(["word"] * 2000))
    for _ in range(3000):
        pdf.link(0, 0, A4[0], A4[1], AGENDA)
    data = bytes(pdf.output())
    started = time.process_time()
    extracted = files.read("a.pdf", data, LIMIT)
    out = extracted.write(["Wort " * 2000])
    assert time.process_time() - started < 5
    assert [t.text.split()[0] for t in pages(out)[0].texts][:1] == ["Wort"]
