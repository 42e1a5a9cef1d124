"""A PDF block's translation, longer than its source (German runs about a third longer than
English), takes the free room around the block before it is shrunk: a list item or a table's cell
stays at its size where the page has space beside it, and never crosses into another column, over
a cell's border or onto another block. Pages built with fpdf2, translated by a stand-in, read back
with PDFium."""

from __future__ import annotations

import pytest
from fpdf import FPDF

from attnserve.benchmarks.pdfs import A4
from attnserve.server import files
from tests.support.pdf_pages import Page, Text, overlapping, pages

LIMIT = 1 << 20
SIZE = 11
PARAGRAPH = (
    "The meeting is on Friday. We will discuss the report and the budget for the next year, "
    "and who will pay for the new office."
)
GERMAN = {
    "\u2022 at 3:45 PM": "\u2022 um 15:45 Uhr am Nachmittag",
    "\u2022 at 5 PM": "\u2022 um 17 Uhr am Abend, wenn die Sitzung des Vorstands endet und alle gehen",
    "Time": "Uhrzeit am Tag",
    "Distance": "Entfernung in Kilometern und in Meilen",
    "Speed": "Geschwindigkeit pro Stunde auf der Straße",
    "Anna Smith 12 Long Road London": "Frau Anna Smith, Lange Straße 12, London im Vereinigten Königreich",
    "June 5, 2025": "Donnerstag, 5. Juni 2025",
    "Notes": "Anmerkungen zur Sitzung des Vorstands im Juni",
}


def page_of(draw) -> bytes:
    pdf = FPDF(unit="pt", format=A4)
    pdf.core_fonts_encoding = "windows-1252"  # the standard fonts' WinAnsiEncoding: the bullet
    pdf.add_page()
    pdf.set_font("Helvetica", size=SIZE)
    draw(pdf)
    return bytes(pdf.output())


def translated(data: bytes, translations: dict[str, str] = GERMAN) -> Page:
    extracted = files.read("a.pdf", data, LIMIT)
    (page,) = pages(extracted.write([translations.get(t, t) for t in extracted.texts]))
    assert overlapping(page) == []  # no line drawn over another object of the page
    return page


def lines_of(page: Page, translation: str) -> list[Text]:
    """The text objects drawing ``translation``, in order."""
    found = [t for t in page.texts if t.text.strip() and t.text.strip() in translation]
    assert " ".join(" ".join(t.text for t in found).split()) == translation
    return found


def source(data: bytes, text: str) -> Text:
    (found,) = [t for t in pages(data)[0].texts if t.text.strip() == text]
    return found


def test_a_short_line_with_free_space_beside_it_is_drawn_at_its_size_on_one_line():
    """A browser's list item 'at 3:45 PM' as 'um 15:45 Uhr am Nachmittag': the page is free to its
    right, up to the right edge of its text, so it is not shrunk to fit the item's own box."""

    def draw(pdf: FPDF) -> None:
        pdf.set_xy(56, 56)
        pdf.multi_cell(483, 14, PARAGRAPH)
        pdf.text(70, 110, "\u2022 at 3:45 PM")
        pdf.text(70, 124, "\u2022 at 6 PM")

    data = page_of(draw)
    page = translated(data)
    (item,) = lines_of(page, GERMAN["\u2022 at 3:45 PM"])
    assert item.size == SIZE and abs(item.bounds[0] - source(data, "\u2022 at 3:45 PM").bounds[0]) < 1
    assert item.bounds[2] <= 539.5  # inside the page's text area


def two_columns(pdf: FPDF) -> None:
    """A page of two columns, 56-286 and 309-539: two list items in the left one, the first beside
    the right column's paragraph, the second below its end."""
    pdf.set_xy(56, 56)
    pdf.multi_cell(230, 14, PARAGRAPH)
    pdf.text(56, 130, "\u2022 at 3:45 PM")
    pdf.set_xy(56, 150)
    pdf.multi_cell(230, 14, PARAGRAPH)
    pdf.text(56, 300, "\u2022 at 5 PM")
    pdf.set_xy(56, 320)
    pdf.multi_cell(230, 14, PARAGRAPH + " " + PARAGRAPH)
    pdf.set_xy(309, 56)
    pdf.multi_cell(230, 14, PARAGRAPH + " " + PARAGRAPH)
    pdf.set_xy(309, 400)
    pdf.multi_cell(230, 14, PARAGRAPH)


def test_a_block_in_the_left_column_grows_to_its_columns_edge_and_never_into_the_right_column():
    data = page_of(two_columns)
    page = translated(data)
    (first,) = lines_of(page, GERMAN["\u2022 at 3:45 PM"])
    assert first.size == SIZE  # its column had room for it
    second = lines_of(page, GERMAN["\u2022 at 5 PM"])  # longer than the column: wrapped, though the right is empty
    assert len(second) > 1
    right_column = min(t.bounds[0] for t in pages(data)[0].texts if t.bounds[0] > 300)
    assert all(t.bounds[2] < right_column - 5 for t in [first, *second])


def bordered_row(pdf: FPDF, texts: list[str], y: float, border: str) -> None:
    """One table row of 120-point cells from x = 56: bordered by a stroked rectangle each, by thin
    filled rectangles as Chrome draws a cell's sides, or not at all."""
    for n, text in enumerate(texts):
        x = 56 + 120 * n
        pdf.set_xy(x, y)
        pdf.cell(120, 18, text, border=1 if border == "stroked" else 0)
        if border == "browser":
            for rect in [(x, y, 120, 0.75), (x, y + 18, 120, 0.75), (x, y, 0.75, 18), (x + 120, y, 0.75, 18)]:
                pdf.rect(*rect, style="F")


@pytest.mark.parametrize("border", ["stroked", "browser"])
def test_a_table_cell_grows_to_its_borders_and_never_over_them(border):
    data = page_of(lambda pdf: bordered_row(pdf, ["Distance", "Time", "Price"], 100, border))
    page = translated(data)
    cells = [(56 + 120 * n, A4[1] - 118, 176 + 120 * n, A4[1] - 100) for n in range(3)]
    (time,) = lines_of(page, GERMAN["Time"])
    assert time.size == SIZE  # the cell had room for it
    for cell, translation in zip(cells, [GERMAN["Distance"], GERMAN["Time"], "Price"]):
        for line in lines_of(page, translation):
            left, bottom, right, top = line.bounds
            assert cell[0] <= left and right <= cell[2] and cell[1] <= bottom and top <= cell[3], (line, cell)


def test_a_borderless_tables_cell_never_reaches_the_next_columns_text():
    """The next cell's text in its row stops a cell's translation, and so does the next column's
    text in the rows around it where the cell beside it is empty."""

    def draw(pdf: FPDF) -> None:
        bordered_row(pdf, ["Distance", "Time", "Price"], 100, "none")
        bordered_row(pdf, ["Speed", "", "Cost"], 118, "none")

    data = page_of(draw)
    page = translated(data)
    (time,) = lines_of(page, GERMAN["Time"])
    assert time.size == SIZE  # room up to the next cell's text
    time_left = source(data, "Time").bounds[0]
    price_left = source(data, "Price").bounds[0]
    assert all(line.bounds[2] < time_left - 2 for line in lines_of(page, GERMAN["Distance"]))
    assert all(line.bounds[2] < time_left - 2 for line in lines_of(page, GERMAN["Speed"]))
    assert time.bounds[2] < price_left - 2


def test_a_block_above_another_grows_down_only_as_far_as_the_gap_allows():
    """A heading in a narrow column (an image beside it) wraps onto a second line at its size into
    the blank below it; a much longer one shrinks rather than run onto the paragraph below."""

    def draw(pdf: FPDF) -> None:
        pdf.text(56, 100, "Notes")
        pdf.rect(200, 80, 100, 200, style="F")  # a figure beside the column
        pdf.set_xy(56, 142)
        pdf.multi_cell(140, 14, PARAGRAPH)

    data = page_of(draw)
    paragraph_top = max(t.bounds[3] for t in pages(data)[0].texts if t.text != "Notes")
    page = translated(data)
    lines = lines_of(page, GERMAN["Notes"])
    assert len(lines) == 2 and all(line.size == SIZE for line in lines)
    longer = "Anmerkungen zur Sitzung des Vorstands im Juni, mit den Zahlen des Jahres und dem Plan für das nächste"
    page = translated(data, {"Notes": longer})
    lines = lines_of(page, longer)
    assert all(line.size < SIZE for line in lines)
    assert min(line.bounds[1] for line in lines) >= paragraph_top + SIZE  # a line's gap above the paragraph


def test_a_right_aligned_block_grows_leftwards():
    """An address set flush right, and a date alone on its line at the right edge of a justified
    paragraph: each translation keeps that right edge and takes the room to its left."""

    def draw(pdf: FPDF) -> None:
        pdf.set_xy(300, 56)
        pdf.multi_cell(239, 14, "Anna Smith\n12 Long Road\nLondon", align="R")
        pdf.set_xy(56, 130)
        pdf.multi_cell(483, 14, "June 5, 2025", align="R")
        pdf.set_xy(56, 160)
        pdf.multi_cell(483, 14, PARAGRAPH + " " + PARAGRAPH, align="J")

    data = page_of(draw)
    page = translated(data)
    address_right = source(data, "London").bounds[2]
    address = lines_of(page, GERMAN["Anna Smith 12 Long Road London"])
    assert all(abs(line.bounds[2] - address_right) < 1 and line.size == SIZE for line in address)
    assert min(line.bounds[0] for line in address) < source(data, "12 Long Road").bounds[0] - 20
    date = source(data, "June 5, 2025")
    (line,) = lines_of(page, GERMAN["June 5, 2025"])
    assert abs(line.bounds[2] - date.bounds[2]) < 1 and line.size == SIZE and line.bounds[0] < date.bounds[0] - 20


LETTER = {
    "June 5, 2025": "5.6.2025",
    "Yours sincerely, John Brown": "Mit freundlichen Grüßen, John Brown",
    "Notes": "Anmerkungen zur Sitzung",
    "Room 4": "Raum 4 im zweiten Stock",
    "Bring the report.": "Bringen Sie den Bericht mit.",
    "A title on its column": "Ein Titel über seiner Spalte",
}


def test_a_single_line_keeps_the_alignment_its_page_shows():
    """A letter in ragged left-aligned text, no block of it right-aligned or justified: its date
    and its signature, each alone on its line and flush with the text area's right edge, stay
    flush right (the date, shorter, no longer starts where the source did; the signature, longer,
    grows to the left); a title centred over a column narrower than the page stays centred on
    it; the heading at the left margin and the short indented lines that begin where a paragraph
    does stay left-aligned."""

    def draw(pdf: FPDF) -> None:
        pdf.set_xy(56, 56)
        pdf.multi_cell(483, 14, "June 5, 2025", align="R")
        pdf.set_xy(56, 90)
        pdf.multi_cell(420, 14, PARAGRAPH + " " + PARAGRAPH)
        pdf.set_xy(56, 150)
        pdf.multi_cell(483, 14, "Yours sincerely, John Brown", align="R")
        pdf.set_xy(56, 190)
        pdf.multi_cell(200, 14, "Notes")
        pdf.set_xy(90, 210)
        pdf.multi_cell(200, 14, PARAGRAPH)
        pdf.set_xy(90, 290)
        pdf.multi_cell(200, 14, "Room 4")
        pdf.set_xy(90, 320)
        pdf.multi_cell(200, 14, "Bring the report.")
        pdf.set_xy(56, 360)
        pdf.multi_cell(300, 14, "A title on its column", align="C")
        pdf.set_xy(56, 380)
        pdf.multi_cell(300, 14, PARAGRAPH, align="C")

    data = page_of(draw)
    page = translated(data, LETTER)
    for text in ("June 5, 2025", "Yours sincerely, John Brown"):
        (line,) = lines_of(page, LETTER[text])
        was = source(data, text).bounds
        assert abs(line.bounds[2] - was[2]) < 1 and line.size == SIZE, text
        assert abs(line.bounds[0] - was[0]) > 10, text
    for text in ("Notes", "Room 4", "Bring the report."):
        (line,) = lines_of(page, LETTER[text])
        assert abs(line.bounds[0] - source(data, text).bounds[0]) < 1, text
    (title,) = lines_of(page, LETTER["A title on its column"])
    was = source(data, "A title on its column").bounds
    assert abs((title.bounds[0] + title.bounds[2]) / 2 - (was[0] + was[2]) / 2) < 1
