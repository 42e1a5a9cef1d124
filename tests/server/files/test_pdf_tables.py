"""Tables without borders, as Chrome and LibreOffice print them: each cell's text an object of its
own, a column's cells beginning (or, right-aligned, ending) at one x, a few points after the
widest cell of the column before (Chrome's default cellpadding 1 and cellspacing 2: 3 points),
narrower than a word's gap. Each cell is read, translated and drawn on its own, where a row was
read as one line and the table as one paragraph; a paragraph's words stay together however they
line up with the words of the lines around them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fpdf import FPDF

from attnserve.benchmarks.pdfs import A4
from attnserve.server import files
from tests.support.pdf_pages import pages

LIMIT = 1 << 20
PAD = 3.0  # between a column's widest cell and the next column's text: 4 CSS pixels
STEP = 16.5  # between a table's rows at 12 pt


def table(pdf: FPDF, rows: list[list[str]], top: float, right: frozenset[int] = frozenset()) -> list[float]:
    """``rows`` drawn as Chrome draws a borderless table from x = 36, a cell an object, the first
    row in bold; the columns in ``right`` right-aligned. The columns' left edges."""

    def width(row: int, text: str) -> float:
        pdf.set_font("Helvetica", "B" if row == 0 else "", 12)
        return pdf.get_string_width(text)

    widths = [max(width(r, row[c]) for r, row in enumerate(rows)) for c in range(len(rows[0]))]
    edges = [36.0]
    for w in widths[:-1]:
        edges.append(edges[-1] + w + PAD)
    for r, row in enumerate(rows):
        for c, text in enumerate(row):
            x = edges[c] + (widths[c] - width(r, text) if c in right else 0)
            pdf.text(x, top + STEP * r, text)
    return edges


def words(pdf: FPDF, x: float, y: float, line: str, space: float) -> None:
    """``line`` in Helvetica 12, each word an object, words ``space`` apart (a justified line's)."""
    pdf.set_font("Helvetica", "", 12)
    for word in line.split():
        pdf.text(x, y, word)
        x += pdf.get_string_width(word) + space


def drawn(data: bytes) -> list[tuple[str, float, float]]:
    """The first page's text objects: (text, left, bottom), in the order they are drawn."""
    return [(text.text.strip(), text.bounds[0], text.bounds[1]) for text in pages(data)[0].texts]


TIMES = [["Day", "Time", "Until"], ["Monday", "at 3:45 PM", "Friday"], ["Friday", "at 9:00 AM", "Monday"]]
STOCK = [["Item", "Qty", "Notes"], ["Cherries", "1,500", "Sour ones"], ["Pears", "7", "Ripe"], ["Figs", "42", "Dried"]]


def test_a_borderless_tables_cells_are_read_and_drawn_each_in_its_cell():
    """Chrome's default <table>: 'Monday at 3:45 PM Friday Friday at 9:00 AM Monday' was one text,
    translated into one paragraph drawn from the first cell over the others. Each cell is a text of
    its own and its translation is drawn where its cell begins, on its row."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    edges = table(pdf, TIMES, 100)
    data = bytes(pdf.output())
    extracted = files.read("table.pdf", data, LIMIT)
    cells = [text for row in TIMES for text in row]
    assert extracted.texts == tuple(cells)
    after = drawn(extracted.write([text.lower() for text in cells]))
    cell_at = [edges[c] for row in TIMES for c in range(len(row))]
    for (text, _, bottom), left in zip(drawn(data), cell_at):  # drawn cell by cell, row by row
        # on its row: within a descender of the source (its row 16.5 points from the next)
        assert any(t == text.lower() and abs(x - left) < 1.5 and abs(y - bottom) < 3 for t, x, y in after), text


def test_a_right_aligned_column_of_numbers_and_a_bold_header_are_cells():
    """Numbers right-aligned in their column end at one x and begin at different ones ("1,500" a
    point from "Cherries", "7" far from "Pears"); the column after them begins at one x. The header
    row, in bold, is read cell by cell too."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    table(pdf, STOCK, 100, right=frozenset({1}))
    extracted = files.read("stock.pdf", bytes(pdf.output()), LIMIT)
    assert extracted.texts == tuple(text for row in STOCK for text in row)


def test_a_cells_text_wrapped_onto_two_lines_stays_one_text():
    """LibreOffice and Chrome put a cell's first line on its row's baseline and wrap the rest under
    it (the cell's lines drawn before the next cell): the wrapped cell is one text, the others
    of its row and of the row below their own."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", "", 12)
    second = 36 + pdf.get_string_width("Another") + PAD
    third = second + pdf.get_string_width("A longer cell whose text") + PAD
    for x, y, text in [(36, 100, "Short"), (second, 100, "A longer cell whose text"),
                       (second, 113.8, "wraps onto two lines"), (third, 100, "End"),
                       (36, 130.3, "Another"), (second, 130.3, "Brief"), (third, 130.3, "Last")]:  # fmt: skip
        pdf.text(x, y, text)
    extracted = files.read("wrapped.pdf", bytes(pdf.output()), LIMIT)
    assert extracted.texts == (
        "Short",
        "A longer cell whose text wraps onto two lines",
        "End",
        "Another",
        "Brief",
        "Last",
    )


def test_paragraphs_whose_words_line_up_are_not_read_as_tables():
    """Under a table, whose cells are parted: lines of a paragraph beginning with the same word,
    each word an object (their second words begin at one x); a justified paragraph, each word an
    object, two of whose lines have a word at one x; a paragraph drawn glyph by glyph in Courier,
    as Chrome draws justified monospace text, its glyphs on a grid from line to line. Each reads
    as the paragraph it is."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    table(pdf, TIMES, 100)
    same = ["The meeting is on Friday and we", "The cat sat on the mat all day", "The end of the story."]
    for row, line in enumerate(same):
        words(pdf, 36, 250 + 14.25 * row, line, pdf.get_string_width(" "))
    justified = ["We will discuss all the report", "and the budget for the next year", "as the board asked us."]
    # a space of each line such that "report" and "next", each after five words, begin at one x
    width = [sum(map(pdf.get_string_width, line.split()[:5])) for line in justified]
    spaces = [(width[1] + 5 * 4.5 - width[0]) / 5, 4.5, pdf.get_string_width(" ")]
    for row, (line, space) in enumerate(zip(justified, spaces)):
        words(pdf, 36, 350 + 14.25 * row, line, space)
    mono = ["Total: 1,500 miles in 2025 by car", "and 2,500 miles by train in 2026.", "Done."]
    pdf.set_font("Courier", "", 12)
    for row, line in enumerate(mono):
        for k, ch in enumerate(line):
            if ch != " ":
                pdf.text(36 + 7.2 * k, 450 + 14.25 * row, ch)
    texts = files.read("prose.pdf", bytes(pdf.output()), LIMIT).texts
    assert texts == (*(text for row in TIMES for text in row), *(" ".join(p) for p in (same, justified, mono)))


def in_cells(data: bytes, cells: list[tuple[str, float, float]]) -> None:
    """``data`` read as ``cells`` ((text, x, baseline), in the order they are drawn), each a text of
    its own, and written back with each text lower-cased: each drawn where its cell begins, on its
    row (a paragraph's first line where its first line was)."""
    extracted = files.read("cells.pdf", data, LIMIT)
    assert extracted.texts == tuple(text for text, _, _ in cells)
    after = drawn(extracted.write([text.lower() for text in extracted.texts]))
    for text, x, base in cells:  # within a descender of the baseline, its row 12.8 points from the next
        assert any(
            t and text.lower().startswith(t) and abs(left - x) < 1.5 and abs(y - base) < 3 for t, left, y in after
        ), text


def test_a_writer_table_right_under_a_paragraph_is_read_apart_from_it():
    """LibreOffice Writer prints a table without borders under a paragraph with no space after it
    at the paragraph's leading, its first cell as far left as the paragraph's lines: the header's
    first cell was read as the paragraph's last line ("... for the year. Region") and translated
    with it. A line with its row's next cell beside it is no line of a paragraph running across
    the blank between them, nor is the paragraph under the table's last row."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", "", 11)
    lines = ["The results of the survey are shown in the table below, by region, for the", "year."]
    for row, line in enumerate(lines):  # Writer draws a line as one object
        pdf.text(90.1, 100 + 12.8 * row, line)
    rows = [["Region", "Sales", "Notes"], ["North", "1,200", "Good year"], ["South", "950", "Rain in May"]]
    cells = [(" ".join(lines), 90.1, 100.0)]
    for r, row in enumerate(rows):
        for x, text in zip((90.1, 234.1, 378.1), row):
            pdf.text(x, 125.6 + 12.8 * r, text)
            cells.append((text, x, 125.6 + 12.8 * r))
    after = "Under the table, a paragraph long enough to run across its columns."
    pdf.text(90.1, 125.6 + 12.8 * len(rows), after)
    cells.append((after, 90.1, 125.6 + 12.8 * len(rows)))
    in_cells(bytes(pdf.output()), [(text, x, A4[1] - y) for text, x, y in cells])


def test_a_browsers_centred_header_cells_are_cells_of_their_own():
    """Chrome centres a ``<th>`` in its column: over a column whose cells are wider than it, a
    header cell begins at no column's edge and stands a few points from the next, narrower than a
    word's gap, so the header row was one text ("Name Amount Place", with the first cell below).
    A row beside a table's columns is parted where their edges lie between its words."""
    header, rows = ["Name", "Amount", "Place"], [["Names", "Amounts", "Places"], ["Anna", "1,200", "Lisbon"]]
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", "", 12)
    widths = [max(pdf.get_string_width(row[c]) for row in rows) for c in range(3)]
    edges = [36.0, 36.0 + widths[0] + PAD, 36.0 + widths[0] + widths[1] + 2 * PAD]
    cells = []
    pdf.set_font("Helvetica", "B", 12)
    for text, edge, width in zip(header, edges, widths):
        x = edge + (width - pdf.get_string_width(text)) / 2
        pdf.text(x, 100, text)
        cells.append((text, x, 100.0))
    pdf.set_font("Helvetica", "", 12)
    for r, row in enumerate(rows, 1):
        for text, edge in zip(row, edges):
            pdf.text(edge, 100 + STEP * r, text)
            cells.append((text, edge, 100 + STEP * r))
    in_cells(bytes(pdf.output()), [(text, x, A4[1] - y) for text, x, y in cells])


def glyphs(pdf: FPDF, x: float, y: float, text: str) -> None:
    """``text`` drawn glyph by glyph, each glyph an object at its advance (Chrome's PDF at 11 pt)."""
    for ch in text:
        if ch != " ":
            pdf.text(x, y, ch)
        x += pdf.get_string_width(ch)


def test_a_table_drawn_glyph_by_glyph_is_read_cell_by_cell():
    """Chrome draws text at some sizes (11 pt) glyph by glyph: a cell's last glyph before the next
    cell was taken for a word's, so a row was one line ("Day Time Weather Monday at 3:45 PM ...")
    and the rows one paragraph. A word's last glyph (PDFium's space after it) may end a cell, but
    not on a monospace grid (justified, its words begin at one x from line to line); an x where two
    rows' words begin only because the widths before them add up alike ("Mist at dawn", "Mild in
    May"), and a word of the table's other rows runs across, is no column's edge."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", "", 11)
    rows = [["Day", "Time", "Weather"], ["Monday", "at 3:45 PM", "Good weather"],
            ["Friday", "at 9:00 AM", "Mist at dawn"], ["Sunday", "at noon", "Mild in May"]]  # fmt: skip
    lines = ["The meeting times are shown in the table below, by day, as the board", "asked us to do."]
    cells = []
    for row, line in enumerate(lines):
        glyphs(pdf, 36, 80 + 13 * row, line)
    cells.append((" ".join(lines), 36.0, 80.0))
    widths = [max(pdf.get_string_width(row[c]) for row in rows) for c in range(3)]
    edges = [36.0, 36.0 + widths[0] + PAD, 36.0 + widths[0] + widths[1] + 2 * PAD]
    for r, row in enumerate(rows):
        for text, x in zip(row, edges):
            glyphs(pdf, x, 120 + 15 * r, text)
            cells.append((text, x, 120.0 + 15 * r))
    # justified monospace text, its spaces stretched (1.8 points, 3.6) so that the words after
    # "is" and "Trains", "Planes" begin at one x, the glyphs before them at different ones
    mono = [[("Car", 0.0), ("is", 30.6), ("fast on the road", 54.0)], [("Trains", 0.0), ("run far and fast,", 54.0)],
            [("Planes", 0.0), ("go faster still.", 54.0)]]  # fmt: skip
    pdf.set_font("Courier", "", 12)
    for row, words in enumerate(mono):
        for word, x in words:
            glyphs(pdf, 36 + x, 250 + 14.25 * row, word)
    cells.append((" ".join(word for words in mono for word, _ in words), 36.0, 250.0))
    in_cells(bytes(pdf.output()), [(text, x, A4[1] - y) for text, x, y in cells])


def test_a_paragraph_drawn_glyph_by_glyph_under_a_number_stays_whole():
    """A number a wide gap after its label ends where the first glyph of a word of the paragraph
    under it (drawn glyph by glyph) ends: no right-aligned column, the paragraph one text."""
    line = "Prices went up in the spring and again in the autumn."

    def page(x: float) -> bytes:
        pdf = FPDF(unit="pt", format=A4)
        pdf.add_page()
        pdf.set_font("Helvetica", "", 11)
        pdf.text(36, 100, "Total")
        pdf.text(120, 100, "1,500")
        glyphs(pdf, x, 115, line)
        return bytes(pdf.output())

    texts = pages(page(36))[0].texts
    number = next(t for t in texts if t.text.strip() == "1,500")
    spring = texts[2 + len("Prices went up in the ".replace(" ", ""))]  # the "s" of "spring"
    assert spring.text.strip() == "s"
    data = page(36 + number.bounds[2] - spring.bounds[2])  # "s" ending where "1,500" does
    assert files.read("number.pdf", data, LIMIT).texts == ("Total", "1,500", line)


def glyph_row(pdf: FPDF, row: list[str], edges: list[float], y: float) -> list[tuple[str, float, float]]:
    """``row`` drawn glyph by glyph, a cell from each of ``edges``: its cells as (text, x, baseline)."""
    for text, x in zip(row, edges):
        glyphs(pdf, x, y, text)
    return [(text, x, y) for text, x in zip(row, edges)]


def spaced(pdf: FPDF, x: float, y: float, words: list[str], space: float) -> None:
    """``words`` drawn glyph by glyph, ``space`` points from one word's advance to the next."""
    for word in words:
        glyphs(pdf, x, y, word)
        x += pdf.get_string_width(word) + space


# a table's header and first row on one page, a page break, and its last row alone on the next,
# with the paragraphs under it: Chrome's default padding (3 points) around narrower cells, and
# cellpadding=0 (a point apart) around the columns' widest cells
SPLIT = {
    "default padding": (PAD, [["Route", "Fare", "Notes"], ["Lisbon to Porto", "25 euros", "Single"]],
                        ["Paris to Porto", "7 euros", "Return"]),
    "cellpadding 0": (1.0, [["Route", "Fare", "Notes"], ["Paris to Porto", "7 euros", "Return"]],
                      ["Lisbon to Porto", "25 euros", "Single"]),
}  # fmt: skip


@pytest.mark.parametrize("padding", SPLIT)
def test_a_tables_row_alone_on_its_page_is_read_cell_by_cell(padding):
    """Chrome draws text at 11 pt glyph by glyph; a page break left a table's last row alone on
    its page, with no other row to show where its columns begin, and the row was one text ("Paris
    to Porto 7 euros Return", "Lisbon to Portoo25 eurosSingle"). Its cells stand further apart than
    its words (or, a point apart, further than a glyph's advance from the one before): each is a
    text of its own. Under it, a justified paragraph whose spaces are stretched alike, a sentence
    with a wide gap before its lowercase words and one with two spaces after its full stop read whole."""
    pad, first, last = SPLIT[padding]
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", "", 11)
    widths = [max(pdf.get_string_width(row[c]) for row in [*first, last]) for c in range(3)]
    edges = [36.0, 36.0 + widths[0] + pad, 36.0 + widths[0] + widths[1] + 2 * pad]
    cells = [cell for r, row in enumerate(first) for cell in glyph_row(pdf, row, edges, 100 + 15 * r)]
    pdf.add_page()
    cells += glyph_row(pdf, last, edges, 60)
    justified = ["We drove from Paris to Porto in May and back", "in June."]
    spaced(pdf, 36, 100, justified[0].split(), 8.0)  # stretched to 0.7 sizes each
    spaced(pdf, 36, 114, justified[1].split(), pdf.get_string_width(" "))
    spaced(pdf, 36, 150, ["The fare is paid"], 0)
    spaced(pdf, 36 + pdf.get_string_width("The fare is paid") + 9.5, 150, ["on the train."], 0)
    spaced(pdf, 36, 190, ["Trains run daily.", "Book early."], 2 * pdf.get_string_width(" "))
    texts = files.read("split.pdf", bytes(pdf.output()), LIMIT).texts
    prose = (" ".join(justified), "The fare is paid on the train.", "Trains run daily. Book early.")
    assert texts == (*(text for text, _, _ in cells), *prose)


@pytest.mark.parametrize("spaces", [1.5, 2.0])
def test_two_rows_whose_first_cells_end_a_hair_apart_are_read_cell_by_cell(spaces):
    """Two rows of short cells, each column ``spaces`` word spaces after the widest cell of the one
    before: "Tea" and "Milk" begin at one x and end 0.9 points apart, so they were taken for the
    alike words a paragraph's lines begin with ("The meeting", "The cat") and the rows read "Tea 2",
    "Milk 14" (or, a space apart, "Tea 2 cups Milk 14 jugs"). Under them, a justified paragraph
    with wide spaces whose lines begin "Tea was" and "Milk was", at one spacing, reads whole."""
    rows = [["Tea", "2", "cups"], ["Milk", "14", "jugs"]]
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", "", 12)
    space = pdf.get_string_width(" ")
    widths = [max(pdf.get_string_width(row[c]) for row in rows) for c in range(3)]
    edges = [36.0, 36.0 + widths[0] + spaces * space, 36.0 + widths[0] + widths[1] + 2 * spaces * space]
    for r, row in enumerate(rows):
        for text, x in zip(row, edges):
            pdf.text(x, 100 + STEP * r, text)
    justified = ["Tea was served in the hall", "Milk was poured for all who", "came to the meeting."]
    for row, (line, gap) in enumerate(zip(justified, [spaces * space, spaces * space, space])):
        words(pdf, 36, 200 + 14.25 * row, line, gap)
    lone = "A lone line of words set wide apart"
    words(pdf, 36, 300, lone, spaces * space)
    texts = files.read("rows.pdf", bytes(pdf.output()), LIMIT).texts
    assert texts == (*(text for row in rows for text in row), " ".join(justified), lone)


@pytest.mark.parametrize("spaces", [1.5, 2.0, 2.5])
def test_rows_drawn_glyph_by_glyph_keep_the_spaces_of_their_cells(spaces):
    """Rows drawn glyph by glyph, each column ``spaces`` word spaces after the widest cell of the
    one before, beside a justified paragraph drawn so, and two of the rows alone on a page: PDFium's
    text page reads such a page (more of its height covered by text than of its width) as vertical
    text and puts no space after any glyph, so a cell's words ran together ("LisbontoPorto",
    "25euros", the paragraph's "Wedroveto") and, 2.5 spaces apart, its cells too ("Tea2"). Each
    cell keeps its spaces, as the rows drawn a cell an object on the last page do, and the
    paragraph reads whole."""
    rows = [["Lisbon to Porto", "25 euros", "Single"], ["Tea", "2", "cups"], ["Milk", "14", "jugs"]]
    justified = ["We drove to it", "in May and in", "June."]
    pdf = FPDF(unit="pt", format=A4)
    pdf.set_font("Helvetica", "", 12)
    space = pdf.get_string_width(" ")

    def table(draw: Callable[[FPDF, float, float, str], None], rows: list[list[str]]) -> None:
        pdf.add_page()
        widths = [max(pdf.get_string_width(row[c]) for row in rows) for c in range(3)]
        edges = [36.0, 36.0 + widths[0] + spaces * space, 36.0 + widths[0] + widths[1] + 2 * spaces * space]
        for r, row in enumerate(rows):
            for text, x in zip(row, edges):
                draw(pdf, x, 100 + 15 * r, text)

    table(glyphs, rows)
    for row, line in enumerate(justified):
        spaced(pdf, 330, 100 + 13 * row, line.split(), spaces * space if row < 2 else space)
    table(glyphs, rows[1:])
    table(FPDF.text, rows)
    texts = files.read("glyphs.pdf", bytes(pdf.output()), LIMIT).texts
    cells = [text for row in rows for text in row]
    assert texts == (*cells, " ".join(justified), *cells[3:], *cells)


def test_words_drawn_word_by_word_keep_their_space_before_a_one_letter_word():
    """Lines drawn a word an object, a one-letter word among them, beside rows drawn glyph by glyph
    on the same page: PDFium's text page reads the page as vertical text and puts no space before an
    object of one glyph, so "We go a bus" read "We goa bus". A word keeps its space before a
    one-glyph object a space past its last glyph's advance, and none before one drawn at it ("bus.")."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", "", 12)
    space = pdf.get_string_width(" ")
    for r, text in enumerate(["Lisbon to Porto", "Tea", "Milk"]):
        glyphs(pdf, 36, 100 + 15 * r, text)
    lines = ["We go a bus", "Tea of a kind", "I see a bus"]
    for r, line in enumerate(lines):
        words(pdf, 330, 100 + 40 * r, line, space)
    pdf.text(330 + pdf.get_string_width(lines[-1]), 180, ".")  # at the advance of the word before
    texts = files.read("words.pdf", bytes(pdf.output()), LIMIT).texts
    assert texts == ("Lisbon to Porto Tea Milk", *lines[:2], lines[2] + ".")
