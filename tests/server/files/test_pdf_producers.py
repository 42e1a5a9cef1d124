"""PDFs as other tools write them, without a model: a browser's glyph-by-glyph text and its
embedded font subsets, table cells with narrow padding, matplotlib's Type3 fonts, fonts without
a ToUnicode map, password-protected files. Each is read into the sentences a person sees and
written back with every translated character drawn, or refused with a reason to act on."""

from __future__ import annotations

import re
import unicodedata

import pytest
from fpdf import FPDF

from attnserve.benchmarks.pdfs import A4
from attnserve.server import files
from attnserve.server.files import FileRefused
from attnserve.server.files.pdf_fonts import UNICODE_FONTS
from tests.support.pdf_pages import pages

LIMIT = 1 << 20
DATE = "Monday, March 3, 2025"
HAS_FONT = pytest.mark.skipif(not any(__import__("os").path.exists(p) for p in UNICODE_FONTS), reason="no TTF here")


def raw_pdf(content: bytes, font: bytes, *extra: bytes, second: bytes = b"Helvetica") -> bytes:
    """One A4 page drawing ``content`` with font ``/F1`` (object 5) and the standard font
    ``second`` (``/F2``); ``extra`` objects from 6 on."""
    helvetica = b"/F2<</Type/Font/Subtype/Type1/BaseFont/%s>>" % second
    objects = [
        b"<</Type/Catalog/Pages 2 0 R>>",
        b"<</Type/Pages/Count 1/Kids[3 0 R]>>",
        b"<</Type/Page/Parent 2 0 R/MediaBox[0 0 595 842]/Contents 4 0 R/Resources<</Font<</F1 5 0 R%s>>>>>>"
        % helvetica,
        b"<</Length %d>>stream\n%s\nendstream" % (len(content), content),
        font,
        *extra,
    ]
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    return out + b"trailer<</Size %d/Root 1 0 R>>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)


def test_a_browsers_glyph_by_glyph_text_reads_as_its_words():
    """Chrome's PDFs draw each glyph as its own object; the tight boxes of Courier's digits leave
    gaps of a fifth of the size between them, which are no spaces."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Courier", size=11)
    x = 56.0
    for ch in f"{DATE} at 10:30 AM":
        if ch != " ":
            pdf.text(x, 100, ch)
        x += pdf.get_string_width(ch)
    extracted = files.read("browser.pdf", bytes(pdf.output()), LIMIT)
    assert extracted.texts == (f"{DATE} at 10:30 AM",)


def cid_subset_like_a_browser(text: str) -> bytes:
    """``text`` in an embedded DejaVu subset (a CID font, Identity-H) whose .notdef glyph takes
    the font's default width, as Chrome writes them: a letter the subset lacks is a box."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.compress = False
    pdf.add_font("dejavu", "", UNICODE_FONTS[0])
    pdf.add_page()
    pdf.set_font("dejavu", size=11)
    pdf.set_xy(56, 56)
    pdf.multi_cell(300, 14, text)
    data = bytes(pdf.output())
    assert b"/DW 600" in data and b"/W [ 0 [ 0 " in data
    return data.replace(b"/W [ 0 [ 0 ", b"/W [ 1 [   ")  # CID 0 (.notdef) without its own width


@HAS_FONT
def test_letters_a_browsers_font_subset_lacks_come_in_a_font_that_has_them():
    extracted = files.read("a.pdf", cid_subset_like_a_browser("Hello there"), LIMIT)
    (text,) = pages(extracted.write(["Grüße an Zoë"]))[0].texts
    assert text.text == "Grüße an Zoë" and text.font == "Helvetica"  # not the subset's boxes


def type3_font() -> tuple[bytes, bytes, bytes]:
    """A Type3 font (glyphs drawn by content streams, as matplotlib writes its text) of a, b, c,
    its glyphs' procedure (object 6) and its ToUnicode map (object 7)."""
    font = (
        b"<</Type/Font/Subtype/Type3/FontBBox[0 0 500 700]/FontMatrix[0.001 0 0 0.001 0 0]"
        b"/CharProcs<</a 6 0 R/b 6 0 R/c 6 0 R/space 6 0 R>>/Encoding<</Type/Encoding"
        b"/Differences[32/space 97/a/b/c]>>/FirstChar 32/LastChar 99/Widths[500" + b" 0" * 64 + b" 500 500 500]"
        b"/ToUnicode 7 0 R>>"
    )
    glyph = b"500 0 0 0 400 600 d1\n0 0 m\n400 0 l\n400 600 l\n0 600 l\nh\nf"
    cmap = (
        b"/CIDInit/ProcSet findresource begin 12 dict begin begincmap/CMapName/T3 def/CMapType 2 def"
        b" 1 begincodespacerange<00><FF>endcodespacerange 4 beginbfchar<20><0020><61><0061><62><0062>"
        b"<63><0063>endbfchar endcmap CMapName currentdict/CMap defineresource pop end end"
    )
    return font, *(b"<</Length %d>>stream\n%s\nendstream" % (len(s), s) for s in (glyph, cmap))


def test_text_in_a_type3_font_is_drawn_in_a_standard_font():
    data = raw_pdf(b"BT /F1 12 Tf 56 700 Td (abc cab) Tj ET", *type3_font())
    extracted = files.read("figure.pdf", data, LIMIT)
    assert extracted.texts == ("abc cab",)
    (text,) = pages(extracted.write(["cab abc"]))[0].texts  # letters the Type3 font has
    assert text.text == "cab abc" and text.font == "Helvetica"


@HAS_FONT
def test_text_whose_font_has_no_unicode_map_is_kept_and_alone_refused():
    """Without ToUnicode PDFium reads an Identity-H font's glyph numbers, control characters:
    translating them would put boxes where the words were."""
    data = cid_subset_like_a_browser(DATE)
    unmapped = data.replace(b"/ToUnicode 7 0 R", b" " * len(b"/ToUnicode 7 0 R"))
    with pytest.raises(FileRefused, match="fonts that map no characters to Unicode .no ToUnicode map."):
        files.read("a.pdf", unmapped, LIMIT)
    assert files.read("a.pdf", data, LIMIT).texts == (DATE,)


@pytest.mark.parametrize("rule", ["stroked cells", "filled rule"])
def test_table_cells_with_narrow_padding_are_separate_blocks(rule):
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    pdf.c_margin = 2
    first, second = DATE, "more than 1,500 miles"
    width = pdf.get_string_width(first) + 4
    border = 1 if rule == "stroked cells" else 0
    pdf.set_xy(56, 100)
    pdf.cell(width, 16, first, border=border)
    pdf.cell(pdf.get_string_width(second) + 4, 16, second, border=border)
    if rule == "filled rule":  # a browser's border: a rectangle under a point wide
        pdf.rect(56 + width - 0.4, 100, 0.75, 16, style="F")
    extracted = files.read("table.pdf", bytes(pdf.output()), LIMIT)
    assert extracted.texts == (first, second)


@pytest.mark.parametrize("border", ["stroked line", "filled rectangle", "stroked cells"])
def test_a_border_between_a_tables_lines_parts_their_cells(border):
    """A bordered table's cells one above the other, their lines as far apart as a paragraph's
    (Chrome's <table border=1> with p{margin:0} or plain cells, a word processor's table): the
    border between them parts the header's cell from the one below, which were read as one text
    ("Distance more than 1,500 miles"). Chrome draws a border as a thin filled rectangle, LibreOffice
    as a stroked line, fpdf2 a cell's as a stroked rectangle. A paragraph whose first line is a link,
    underlined from end to end, stays one text."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    header, cell = "Distance", "more than 1,500 miles"
    width = pdf.get_string_width(cell) + 4
    if border == "stroked cells":
        pdf.set_xy(56, 91.5)
        pdf.cell(width, 15.75, header, border=1, align="C", new_x="LEFT", new_y="NEXT")
        pdf.cell(width, 15.75, cell, border=1)
    else:  # as Chrome prints a table with cellpadding=0: 0.25 sizes under the header's baseline
        pdf.text(56 + (width - pdf.get_string_width(header)) / 2, 100, header)
        pdf.text(58, 115.75, cell)
        if border == "stroked line":  # as LibreOffice's cell without padding: as close as descenders
            pdf.set_line_width(0.75)
            pdf.line(56, 102.6, 56 + width, 102.6)
        else:
            pdf.rect(56, 103, width, 0.75, style="F")
    link, rest = "Read the manual before you start", "and keep it."
    pdf.text(56, 200, link)
    pdf.rect(56, 200.75, pdf.get_string_width(link), 0.75, style="F")  # Chrome's underline
    pdf.text(56, 214.25, rest)
    data = bytes(pdf.output())
    extracted = files.read("table.pdf", data, LIMIT)
    assert extracted.texts == (header, cell, f"{link} {rest}")
    after = pages(extracted.write(["Entfernung", "mehr als 1.500 Meilen", "Lies das Handbuch vorher."]))[0]
    assert after.paths == pages(data)[0].paths[:-1]  # the borders stay; the link's underline goes with it


TABLE = [["Distance travelled", "Fare", "Notes"], ["less than 100 miles", "12 dollars", "Return ticket"],
         ["more than 1,500 miles", "85", "Single"]]  # fmt: skip
# a justified paragraph's lines, each word an object and a word's parts ("mi|nd") objects of their
# own, as Chrome writes them; spaced so that the part named begins where the table's column does
JUSTIFIED = [("The table is wide and we mi|nd it a lot,", "we", 1), ("and so we drove home in a T|oyota.", "oyota.", 2)]
KERNED = {"nd": 0.0, "oyota.": 0.9}  # a word's part after the first starts this far under the last glyph


def justified(pdf: FPDF, y: float, line: str, anchor: str, edge: float) -> None:
    pieces = [(i, part) for i, word in enumerate(line.split()) for part in word.split("|")]
    at = [part for _, part in pieces].index(anchor)
    spaces = pieces[at][0]  # a space after each word before the anchor's
    widths = sum(pdf.get_string_width(part) for _, part in pieces[:at])
    space = (edge - 56 - widths + sum(KERNED.get(part, 0) for _, part in pieces[1 : at + 1])) / spaces
    x = 56.0
    for k, (i, part) in enumerate(pieces):
        if k:
            x += space if i != pieces[k - 1][0] else -KERNED[part]
        pdf.text(x, y, part)
        x += pdf.get_string_width(part)


def test_a_tables_touching_cells_are_read_apart_and_justified_words_whole():
    """Chrome prints a table without side borders and with cellpadding=0 with a cell's text a point
    from the next one's and no space between: "more than 1,500 miles" and "85" were one text, read
    "miles85". Where the next cell begins at the x its column's other cells begin at, after a gap in
    a row near it, it is a cell of its own. A justified paragraph below, a word beginning where a
    column does and words Chrome split in two objects at their kerning, reads as before ("mind",
    "Toyota"), and so does justified monospace text, which Chrome draws glyph by glyph on a grid
    that meets the column's edge ("2025")."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    columns = [56.0]
    for column in range(2):
        columns.append(columns[-1] + max(pdf.get_string_width(row[column]) for row in TABLE) + 1)
    for row, cells in enumerate(TABLE):
        for x, text in zip(columns, cells):
            pdf.text(x, 100 + 14 * row, text)
    for row, (line, anchor, column) in enumerate(JUSTIFIED):
        justified(pdf, 150 + 14 * row, line, anchor, columns[column])
    pdf.set_font("Courier", size=12)
    mono = "Total: 1,500 miles in 2025 by car."
    x = columns[2] - (mono.index("2025") + 1) * 7.2  # "025" at the third column's edge
    for ch in mono:
        if ch != " ":
            pdf.text(x, 192, ch)
        x += 7.2
    texts = files.read("table.pdf", bytes(pdf.output()), LIMIT).texts
    paragraph = " ".join(line for line, _, _ in JUSTIFIED).replace("|", "")
    assert texts == (*(cell for cells in TABLE for cell in cells), paragraph, mono)


@pytest.mark.parametrize("spacing", [0.0, 0.3], ids=["plain", "letter-spaced"])
def test_a_tables_touching_cells_drawn_glyph_by_glyph_are_read_apart(spacing):
    """Chrome draws text at some sizes glyph by glyph: with ``cellpadding=0`` a cell's last glyph
    stands a point from the next cell's first, no space between, and a row was one text
    ("more than 1,500 miles85", "12 dollarsReturn ticket"). A word's glyphs stand at their advances
    (``letter-spacing`` a little further): a glyph past that at a column's edge begins a cell."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)

    def width(text: str) -> float:
        return pdf.get_string_width(text) + spacing * len(text)

    columns = [56.0]
    for column in range(2):
        columns.append(columns[-1] + max(width(row[column]) for row in TABLE) + 1)
    for row, cells in enumerate(TABLE):
        for x, text in zip(columns, cells):
            for ch in text:
                if ch != " ":
                    pdf.text(x, 100 + 14 * row, ch)
                x += width(ch)
    texts = files.read("table.pdf", bytes(pdf.output()), LIMIT).texts
    assert texts == tuple(cell for cells in TABLE for cell in cells)


def symbol_font_list(items: list[tuple[int, str]], symbol: bytes = b"Wingdings", family: bytes = b"Helvetica") -> bytes:
    """``items`` (code, text) as Word and LibreOffice print a list whose bullets are in a symbol
    font (Symbol, Wingdings): the bullet's code in a symbolic TrueType font whose ToUnicode map
    gives U+F000 + code (the private-use code point Windows' symbol fonts have it at), a tab
    before the item's text in the standard font ``family`` at 11, lines 14.7 apart."""
    font = (
        b"<</Type/Font/Subtype/TrueType/BaseFont/%s/FirstChar 32/LastChar 255/Widths[%s]"
        b"/FontDescriptor 6 0 R/ToUnicode 7 0 R>>" % (symbol, b" ".join([b"750"] * 224))
    )
    descriptor = (
        b"<</Type/FontDescriptor/FontName/%s/Flags 4/FontBBox[0 -210 1000 900]/ItalicAngle 0"
        b"/Ascent 900/Descent -210/CapHeight 700/StemV 80>>" % symbol
    )
    codes = sorted({code for code, _ in items})
    cmap = (
        b"/CIDInit/ProcSet findresource begin 12 dict begin begincmap/CMapName/W def/CMapType 2 def 1"
        b" begincodespacerange<00><FF>endcodespacerange %d beginbfchar%sendbfchar endcmap"
        b" CMapName currentdict/CMap defineresource pop end end"
        % (len(codes), b"".join(b"<%02X><F0%02X>" % (code, code) for code in codes))
    )
    content = b""
    for row, (code, text) in enumerate(items):
        y = 700 - 14.7 * row
        content += b"BT /F1 11 Tf 90 %g Td <%02X> Tj ET BT /F2 11 Tf 108 %g Td (%s) Tj ET\n" % (
            y,
            code,
            y,
            text.encode(),
        )
    cmap = b"<</Length %d>>stream\n%s\nendstream" % (len(cmap), cmap)
    return raw_pdf(content, font, descriptor, cmap, second=family)


def test_bullets_in_a_symbol_fonts_private_use_code_points_begin_list_items():
    """Word's bullets are Symbol's U+F0B7 (•) and Wingdings' U+F0A7, U+F076, U+F0D8, U+F0FC
    (▪ ❖ ➢ ✓): their PDFs map them to those private-use code points, as LibreOffice's do, and
    PDFium reads them back so. Each item is a text of its own, its bullet with it (where items
    were read into one paragraph, bullets and all), the bullet the Unicode one it looks like: the
    translation is drawn in a font that has it, where no font but the symbol font has the other."""
    items = [(0xB7, "Eggs"), (0xB7, "Milk and bread"), (0xA7, "Butter"), (0x76, "Cheese"),
             (0xD8, "Apples"), (0xFC, "Pears")]  # fmt: skip
    extracted = files.read("word.pdf", symbol_font_list(items), LIMIT)
    bullets = {0xB7: "\u2022", 0xA7: "\u25aa", 0x76: "\u2756", 0xD8: "\u27a2", 0xFC: "\u2713"}
    assert extracted.texts == tuple(f"{bullets[code]} {text}" for code, text in items)
    translated = pages(extracted.write([text.upper() for text in extracted.texts]))[0]
    assert translated.text.split("\r\n") == [text.upper() for text in extracted.texts]


def bullet_in_another_font(font: str) -> bytes:
    """A list in Times 11 whose bullets are '•' in ``font`` (LibreOffice's OpenSymbol), a tab
    before each item's text, lines 14.7 apart."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_font("bullets", "", font)
    pdf.add_page()
    for row, text in enumerate(["Eggs", "Milk and bread"]):
        pdf.set_font("bullets", size=11)
        pdf.text(90, 100 + 14.7 * row, "\u2022")
        pdf.set_font("Times", size=11)
        pdf.text(108, 100 + 14.7 * row, text)
    return bytes(pdf.output())


@HAS_FONT
@pytest.mark.parametrize("bullet", ["Symbol's private-use bullet", "a bullet in another font"])
def test_a_list_item_is_translated_in_its_texts_font_not_its_bullets(bullet):
    """Word's items begin with Symbol's bullet, LibreOffice's with '•' in OpenSymbol, and the
    item's text is in the document's font: its translation is drawn in that font (here Times),
    where a LibreOffice list set in Times came back in the bullet font's fallback, Helvetica."""
    if bullet == "a bullet in another font":
        data = bullet_in_another_font(UNICODE_FONTS[0])
    else:
        data = symbol_font_list([(0xB7, "Eggs"), (0xB7, "Milk and bread")], symbol=b"Symbol", family=b"Times-Roman")
    extracted = files.read("list.pdf", data, LIMIT)
    assert extracted.texts == ("\u2022 Eggs", "\u2022 Milk and bread")
    translated = pages(extracted.write(["\u2022 Eier", "\u2022 Milch und Brot"]))[0].texts
    assert [(text.text, text.font) for text in translated] == [
        ("\u2022 Eier", "Times-Roman"),
        ("\u2022 Milch und Brot", "Times-Roman"),
    ]


def test_a_line_end_unicode_hyphen_joins_the_word():
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_font("dejavu", "", UNICODE_FONTS[0])
    pdf.add_page()
    pdf.set_font("dejavu", size=11)
    pdf.text(56, 100, "Hyphen\u2010")  # a browser's hyphen where it breaks a word
    pdf.text(56, 114, "ation of words")
    assert files.read("a.pdf", bytes(pdf.output()), LIMIT).texts == ("Hyphen\u2010ation of words",)


@pytest.mark.parametrize("user_password", ["secret", ""])
def test_a_password_protected_pdf_is_refused_saying_so(user_password):
    pdf = FPDF(unit="pt", format=A4)
    pdf.set_encryption(owner_password="owner", user_password=user_password)
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    pdf.text(56, 100, DATE)
    data = bytes(pdf.output())
    if user_password:
        with pytest.raises(FileRefused, match="the PDF is protected by a password; send it without the password"):
            files.read("locked.pdf", data, LIMIT)
        return
    extracted = files.read("open.pdf", data, LIMIT)  # opens without one: translated
    assert extracted.texts == (DATE,)
    assert pages(extracted.write(["Montag, 3. März 2025"]))[0].texts[0].text == "Montag, 3. März 2025"


def right_to_left_like_a_browser(lines: list[list[str]], by_glyph: bool) -> bytes:
    """Lines of words, each given in reading order, drawn as a browser draws a right-to-left
    paragraph: right-aligned, the words from right to left and a Hebrew or Arabic word's letters
    too (a number's or English word's left to right), in visual order in the content stream, each
    glyph (``by_glyph``) or each word its own object, spaces as gaps."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_font("dejavu", "", UNICODE_FONTS[0])
    pdf.add_page()
    pdf.set_font("dejavu", size=14)
    for row, words in enumerate(lines):
        drawn = [word[::-1] if unicodedata.bidirectional(word[0]) in ("R", "AL") else word for word in words[::-1]]
        x = 540 - pdf.get_string_width(" ".join(drawn))
        for word in drawn:
            for piece in word if by_glyph else [word]:
                pdf.text(x, 100 + 20 * row, piece)
                x += pdf.get_string_width(piece)
            x += pdf.get_string_width(" ")
    return bytes(pdf.output())


HEBREW = [["שלום", "עולם,", "זה", "טקסט", "בעברית."], ["גרסה", "2.5", "של", "Python", "יצאה", "היום"]]
ARABIC = [["مرحبا", "بالعالم"], ["الإصدار", "3.12", "من", "Python", "صدر", "اليوم"]]


@HAS_FONT
@pytest.mark.parametrize("by_glyph", [True, False], ids=["glyph objects", "word objects"])
@pytest.mark.parametrize("lines", [HEBREW, ARABIC], ids=["Hebrew", "Arabic"])
def test_right_to_left_text_reaches_the_model_in_reading_order(lines, by_glyph):
    """Hebrew and Arabic are drawn left to right on the page: read in that order they would be
    translated reversed; an English word or a number inside keeps its own order."""
    extracted = files.read("rtl.pdf", right_to_left_like_a_browser(lines, by_glyph), LIMIT)
    assert extracted.texts == (" ".join(" ".join(words) for words in lines),)
    translation = "Hello world, this is text. Version 2.5 of Python came out today"
    drawn = pages(extracted.write([translation]))[0].texts
    assert " ".join(text.text for text in drawn) == translation  # in the block's box, as any block
    # left to right from the left of the block's first line, as any left-to-right translation
    source = pages(right_to_left_like_a_browser(lines, by_glyph))[0].texts
    assert abs(drawn[0].bounds[0] - source[0].bounds[0]) <= 1.0


@HAS_FONT
@pytest.mark.parametrize("lines", [HEBREW, ARABIC], ids=["Hebrew", "Arabic"])
def test_right_to_left_text_translated_into_right_to_left_text_stays_right_aligned(lines):
    data = right_to_left_like_a_browser(lines, by_glyph=False)
    translation = "الإصدار 2.5 من Python صدر اليوم" if lines is HEBREW else "גרסה 2.5 של Python יצאה היום"
    out = files.read("rtl.pdf", data, LIMIT).write([translation])
    (page,) = pages(out)
    assert page.text.replace("\r\n", " ") == translation  # drawn right to left, read back in order
    source_right = max(text.bounds[2] for text in pages(data)[0].texts)
    assert all(abs(text.bounds[2] - source_right) <= 1.0 for text in page.texts)


# (reading order, the glyphs left to right as the bidi algorithm draws them: a bracket in
# right-to-left text drawn as its mirror image)
BRACKETED = [
    ("שלום (עולם) 2025", "2025 (םלוע) םולש"),
    ("ראו [1] וגם (2)", "(2) םגו [1] ואר"),
    ("גרסה (Python 3) יצאה", "האצי (Python 3) הסרג"),
    ("مرحبا (بالعالم) 2025", "2025 (ملاعلاب) ابحرم"),
    ("The word (שלום) means peace", "The word (םולש) means peace"),
]
PIECES = {  # how a producer parts the line into objects
    "words": r"\S+|\s+",
    "brackets apart": r"[()\[\]]|[^()\[\]\s]+|\s+",
    "glyphs": r".",
}


@HAS_FONT
@pytest.mark.parametrize("pieces", PIECES)
@pytest.mark.parametrize(("typed", "drawn"), BRACKETED, ids=range(len(BRACKETED)))
def test_brackets_in_right_to_left_text_keep_their_direction(typed, drawn, pieces):
    """PDFium's text page mirrors a bracket it reads as right-to-left, and the reading order
    mirrored it again: "שלום )עולם( 2025" reached the model, brackets facing out. A bracket is
    read as the glyph drawn, whether in an object of its own or in a word's."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_font("dejavu", "", UNICODE_FONTS[0])
    pdf.add_page()
    pdf.set_font("dejavu", size=14)
    x = 540 - pdf.get_string_width(drawn)
    for piece in re.findall(PIECES[pieces], drawn):
        if piece.strip():
            pdf.text(x, 100, piece)
        x += pdf.get_string_width(piece)
    assert files.read("rtl.pdf", bytes(pdf.output()), LIMIT).texts == (typed,)


@HAS_FONT
def test_an_rtl_word_in_an_english_line_keeps_the_line_in_order():
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_font("dejavu", "", UNICODE_FONTS[0])
    pdf.add_page()
    pdf.set_font("dejavu", size=14)
    x = 56.0
    for word in ["The", "word", "שלום"[::-1], "means", "peace,", "4", "letters"]:  # word objects
        pdf.text(x, 100, word)
        x += pdf.get_string_width(word + " ")
    assert files.read("a.pdf", bytes(pdf.output()), LIMIT).texts == ("The word שלום means peace, 4 letters",)


# where a glyph's ink lies in its advance, in thousandths of an em: full-width punctuation draws
# in one half of its square ("。" and "」" left, "「" right), as in Noto Sans CJK
INK = {**dict.fromkeys("。、，：」』）”", (80, 380)), **dict.fromkeys("「『（“", (620, 920)), " ": (0, 0)}


def cjk_like_a_browser(paragraphs: list[list[str]], size: float = 12.0, paths: bytes = b"") -> bytes:
    """Paragraphs of lines drawn as Chrome prints Chinese, Japanese and Korean: a Type3 font of
    the page's glyphs (each glyph's ink where the real one has it, a ToUnicode map), every glyph
    its own ``Tj`` (a space with the glyph before it), lines 1.5 sizes apart from y = 780 at
    x = 56, paragraphs 3; ``paths`` drawn before them."""
    chars = sorted(set("".join(line for lines in paragraphs for line in lines)))
    code = {ch: 33 + i for i, ch in enumerate(chars)}
    width = {ch: 250 if ch == " " else 1000 if ord(ch) > 0x2000 else 600 for ch in chars}
    procs = []
    for ch in chars:
        left, right = INK.get(ch, (50, width[ch] - 50))
        ink = b" %d -100 m %d -100 l %d 800 l %d 800 l h f" % (left, right, right, left) if right else b""
        procs.append(b"%d 0 %d -100 %d 800 d1%s" % (width[ch], left, right, ink))
    cmap = b"".join(b"<%02X><%04X>" % (code[ch], ord(ch)) for ch in chars)
    cmap = (
        b"/CIDInit/ProcSet findresource begin 12 dict begin begincmap/CMapName/C def/CMapType 2 def 1"
        b" begincodespacerange<00><FF>endcodespacerange %d beginbfchar%sendbfchar endcmap"
        b" CMapName currentdict/CMap defineresource pop end end" % (len(chars), cmap)
    )
    font = b"<</Type/Font/Subtype/Type3/FontBBox[0 -100 1000 800]/FontMatrix[0.001 0 0 0.001 0 0]"
    font += b"/CharProcs<<%s>>" % b"".join(b"/g%d %d 0 R" % (code[ch], 6 + i) for i, ch in enumerate(chars))
    font += b"/Encoding<</Type/Encoding/Differences[33%s]>>" % b"".join(b"/g%d" % code[ch] for ch in chars)
    font += b"/FirstChar 33/LastChar %d/Widths[%s]" % (32 + len(chars), b" ".join(b"%d" % width[ch] for ch in chars))
    font += b"/ToUnicode %d 0 R>>" % (6 + len(chars))
    content, y = paths, 780.0
    for lines in paragraphs:
        for line in lines:
            content += b"BT /F1 %g Tf 1 0 0 1 56 %g Tm" % (size, y)
            for i, ch in enumerate(line):
                if ch == " ":
                    continue
                shown = ch + (" " if line[i + 1 : i + 2] == " " else "")
                hexed = b"".join(b"%02X" % code[c] for c in shown)
                content += b" <%s> Tj %g 0 Td" % (hexed, sum(width[c] for c in shown) * size / 1000)
            content += b" ET\n"
            y -= 1.5 * size
        y -= 1.5 * size
    streams = [*procs, cmap]
    return raw_pdf(content, font, *(b"<</Length %d>>stream\n%s\nendstream" % (len(s), s) for s in streams))


CJK = [  # a paragraph's lines as drawn, the text the translator is given, a stand-in's translation
    (
        ["今日は晴れです。「散歩に行こう」と彼は言った。"],
        "今日は晴れです。「散歩に行こう」と彼は言った。",
        "It is sunny. Let us walk, he said.",
    ),
    (["」「はい」と彼女は答えた。"], "」「はい」と彼女は答えた。", "Yes, she answered."),
    (
        ["他说：“我们明天去北京。”", "“好的。”她回答。"],
        "他说：“我们明天去北京。”“好的。”她回答。",
        "He said: we go. Fine, she said.",
    ),
    (
        ["오늘은 날씨가 좋습니다. 우리는", "공원에 갑니다."],
        "오늘은 날씨가 좋습니다. 우리는 공원에 갑니다.",
        "It is fine. We go out.",
    ),
    (["Total: 1,500 miles", "in 2025."], "Total: 1,500 miles in 2025.", "Gesamt: 1.500 Meilen 2025."),
]


def test_chinese_japanese_and_korean_lines_reach_the_translator_whole():
    """A full-width mark's ink stands in one half of its em ("。" left, "「" right), so the ink of
    "。「" is more than an em apart: measured by ink, a line broke there, and a line opening with
    "」「" lost its first character to a block of its own (left on the page, untranslated).
    Chinese and Japanese wrap without spaces; Korean and Latin wrap at them."""
    extracted = files.read("browser.pdf", cjk_like_a_browser([lines for lines, _, _ in CJK]), LIMIT)
    assert extracted.texts == tuple(text for _, text, _ in CJK)
    translations = [translation for _, _, translation in CJK]
    drawn = pages(extracted.write(translations))[0].texts
    assert " ".join(text.text for text in drawn).split() == " ".join(translations).split()  # no glyph left over


def disc(x: float, y: float, diameter: float) -> bytes:
    """A filled circle of ``diameter`` whose box's lower left corner is (x, y), in PDF coordinates:
    one closed path of four Bézier curves, as Chrome draws a bullet."""
    r, k = diameter / 2, diameter / 2 * 0.5523
    cx, cy = x + r, y + r
    curves = [
        (cx + r, cy + k, cx + k, cy + r, cx, cy + r),
        (cx - k, cy + r, cx - r, cy + k, cx - r, cy),
        (cx - r, cy - k, cx - k, cy - r, cx, cy - r),
        (cx + k, cy - r, cx + r, cy - k, cx + r, cy),
    ]
    return b"%g %g m " % (cx + r, cy) + b"".join(b"%g %g %g %g %g %g c " % curve for curve in curves) + b"h f\n"


# an item's text begins this far right of its bullet's right edge; the bullet stands this far
# above the baseline and is this wide, in font sizes, as Chrome prints <ul> at 12 pt
GAP, RAISED, WIDE = 0.75, 0.19, 0.31


def chrome_list(pdf: FPDF, items: list[tuple[int, str, str]], top: float) -> None:
    """``items`` (level, marker, text) as Chrome prints nested lists in Helvetica 12: its text at
    56 + 30 points a level, lines 14.25 apart, a ``disc``, ``circle`` or ``square`` before it."""
    for row, (level, marker, text) in enumerate(items):
        x, baseline = 56 + 30 * level, top + 14.25 * row
        side, right = WIDE * 12, x - GAP * 12
        if marker == "square":
            pdf.rect(right - side, baseline - RAISED * 12 - side, side, side, style="F")
        else:
            side = 0.42 * 12 if marker == "circle" else side
            pdf.ellipse(right - side, baseline - RAISED * 12 - side, side, side, "D" if marker == "circle" else "F")
        pdf.text(x, baseline, text)


PROSE = ["The report is due on Friday and", "the budget for next year is", "ready for the board."]


def beside_prose(pdf: FPDF, path: str) -> None:
    """``PROSE`` wrapped in Helvetica 12 at x = 56 from y = 300, a ``path`` at its second line's start."""
    for row, line in enumerate(PROSE):
        pdf.text(56, 300 + 14.25 * row, line)
    side, baseline = WIDE * 12, 314.25
    if path == "inline icon":  # a dot inline before its word, a space from it: no bullet
        pdf.ellipse(56 - 0.1 * 12 - side, baseline - RAISED * 12 - side, side, side, "F")
    elif path == "icon an em wide":
        pdf.rect(56 - GAP * 12 - 12, baseline - 10, 12, 12, style="F")
    elif path == "table border":  # a browser's cell borders: thin filled rectangles
        for x in (50, 260):
            pdf.rect(x, 288, 0.75, 46, style="F")
    elif path == "underline":
        pdf.rect(56, baseline + 1.5, pdf.get_string_width("the"), 0.6, style="F")


@pytest.mark.parametrize("path", ["inline icon", "icon an em wide", "table border", "underline"])
def test_a_browsers_bullets_drawn_as_shapes_begin_list_items(path):
    """Chrome prints a <ul>'s bullets as paths, not glyphs (a filled disc, a stroked circle one
    level in, a filled square two in): each item is a block of its own, drawn on its own line, the
    bullet left where it is. An icon inline before a word, an icon an em wide, a table's border
    or an underline at the start of a wrapped line leaves its paragraph whole."""
    items = [(0, "disc", "Eggs"), (0, "disc", "Milk and bread"), (1, "circle", "Whole milk"),
             (1, "circle", "Rye bread"), (2, "square", "Sliced"), (0, "disc", "Butter")]  # fmt: skip
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    chrome_list(pdf, items, 100)
    beside_prose(pdf, path)
    data = bytes(pdf.output())
    extracted = files.read("list.pdf", data, LIMIT)
    assert extracted.texts == (*(text for _, _, text in items), " ".join(PROSE))
    after = pages(extracted.write([text.upper() for text in extracted.texts]))[0]
    assert after.paths[: len(items)] == pages(data)[0].paths[: len(items)]  # the bullets, where they were
    rows = {text.text: text.bounds[1] for text in after.texts}
    assert len({rows[text.upper()] for _, _, text in items}) == len(items)


def test_a_browsers_chinese_list_items_are_not_joined():
    """A Chinese list printed by Chrome: discs before its items, which would otherwise be read as
    one paragraph wrapped between wide characters, joined with no space ("项目一项目二")."""
    bullets = b"".join(disc(56 - GAP * 12 - 3.75, baseline + RAISED * 12, 3.75) for baseline in (780, 762))
    data = cjk_like_a_browser([["项目一", "项目二"]], paths=bullets)
    assert files.read("list.pdf", data, LIMIT).texts == ("项目一", "项目二")


@HAS_FONT
def test_a_label_a_tab_before_its_text_stays_with_its_item():
    """Word and LibreOffice put a tab after a list's label: "1." or "•" stands two or three font
    sizes left of its item's text, which wraps under the text. The label is read with its item,
    not translated alone; text further from a number (a table's next column) is a cell of its own."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_font("dejavu", "", UNICODE_FONTS[0])
    pdf.add_page()
    pdf.set_font("dejavu", size=11)
    rows = [(100, 74, "\u2022", "Eggs"), (114, 74, "\u2022", "Milk and bread"),
            (142, 56, "1.", "Open the file that you want"), (156, 0, "", "to translate"),
            (170, 56, "2.", "Choose a language")]  # fmt: skip
    for y, x, label, text in rows:
        if label:
            pdf.text(x, y, label)
        pdf.text(92, y, text)  # the tab stop: half an inch in
    pdf.text(56, 220, "7.")
    pdf.text(56 + 5 * 11, 220, "Total")  # five sizes further: another column
    extracted = files.read("word.pdf", bytes(pdf.output()), LIMIT)
    assert extracted.texts == (
        "\u2022 Eggs", "\u2022 Milk and bread", "1. Open the file that you want to translate",
        "2. Choose a language", "7.", "Total",
    )  # fmt: skip


@HAS_FONT
@pytest.mark.parametrize("producer", ["word", "chrome"])
def test_a_numbered_item_below_a_bullet_item_begins_an_item_and_the_other_way_round(producer):
    """A bulleted list right above a numbered one and another bulleted list below it, all spaced
    as a paragraph's lines: a label standing where the first item's bullet stands begins an item,
    whichever kind, where "2. Choose a language" was read into "Milk and bread". Word and
    LibreOffice put "•" or "1." at one tab stop, the item's text at the next; Chrome draws its
    bullets as shapes and right-aligns its numbers to the same place. An item's wrapped line under
    its text, and a paragraph's wrapped line, starting with a number, continue their item and
    paragraph."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_font("dejavu", "", UNICODE_FONTS[0])
    pdf.add_page()
    pdf.set_font("dejavu", size=12)
    rows = [("\u2022", "Eggs"), ("\u2022", "Milk and bread, as the list in"), ("", "3. The kitchen says"),
            ("1.", "Open the file"), ("2.", "Choose a language"), ("\u2022", "Butter")]  # fmt: skip
    for row, (label, text) in enumerate(rows):
        baseline = 100 + 14.25 * row
        if producer == "word" and label:
            pdf.text(56, baseline, label)
        elif label == "\u2022":  # Chrome's disc, before text at 86
            chrome_list(pdf, [(1, "disc", "")], baseline)
        elif label:  # Chrome's number and a space, right-aligned to the text
            pdf.text(86 - pdf.get_string_width(label + " "), baseline, label + " ")
        pdf.text(74 if producer == "word" else 86, baseline, text)
    for row, line in enumerate(["Our sales grew by a third that year, as", "2. The table shows."]):
        pdf.text(56, 200 + 14.25 * row, line)
    texts = files.read("lists.pdf", bytes(pdf.output()), LIMIT).texts
    bullet = "\u2022 " if producer == "word" else ""
    assert texts == (
        f"{bullet}Eggs", f"{bullet}Milk and bread, as the list in 3. The kitchen says", "1. Open the file",
        "2. Choose a language", f"{bullet}Butter", "Our sales grew by a third that year, as 2. The table shows.",
    )  # fmt: skip


@HAS_FONT
def test_a_browsers_numbered_list_past_nine_keeps_its_items_apart():
    """Chrome right-aligns an <ol>'s numbers to its items' text: "10." starts more than half a
    font size left of "9." (0.59 in DejaVu Sans), so with items spaced as a paragraph's lines
    (p{margin:0}) items 10 to 12 were read into item 9. Items whose text starts where the block's
    first item's text starts (after its number, drawn as an object of its own, "11." even as two)
    begin items. A line of an item or of a paragraph wrapped before "10. The" continues it."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_font("dejavu", "", UNICODE_FONTS[0])
    pdf.add_page()
    pdf.set_font("dejavu", size=12)
    items = [f"Item number {n} of the list" for n in range(1, 12)] + ["Our sales grew by a third, as"]
    for n, text in enumerate(items, 1):
        baseline, label = 100 + 14.25 * (n - 1), f"{n}. "
        x = 86 - pdf.get_string_width(label)
        for piece in ["1", "1. "] if n == 11 else [label]:  # Chrome splits "11." at its kerning
            pdf.text(x, baseline, piece)
            x += pdf.get_string_width(piece)
        pdf.text(86, baseline, text)
    pdf.text(86, 100 + 14.25 * 12, "10. ")  # item 12's wrapped line: a number, then its words
    pdf.text(86 + pdf.get_string_width("10. "), 100 + 14.25 * 12, "The table shows.")
    prose = ["Our sales grew by a third that year, as", "10. The table shows."]
    for row, line in enumerate(prose):
        pdf.text(56, 400 + 14.25 * row, line)
    texts = files.read("ol.pdf", bytes(pdf.output()), LIMIT).texts
    assert texts == (
        *(f"{n}. {text}" for n, text in enumerate(items[:-1], 1)),
        "12. Our sales grew by a third, as 10. The table shows.",
        " ".join(prose),
    )


@pytest.mark.parametrize("cell", [36.0, 91.5], ids=["first cell", "second cell"])
def test_a_table_cell_above_two_columns_is_not_read_into_the_left_column(cell):
    """Chrome prints a table's cell and, under it, a section in two columns (CSS column-count)
    with nothing between them: the cell's last line and the left column's first are as far apart
    as the lines of a paragraph. That column's line runs far past the cell's, further than its first
    word (which would have stood on the cell's line had they been one paragraph). A paragraph with
    its first line indented, or a short line before a long one, still reads whole."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    for y, x, text in [
        (100, cell, "more than"), (114.25, cell, "1,500 miles"),
        (130.75, 33.75, "Left column text that wraps over"), (145, 33.75, "several lines of the column."),
        (130.75, 312, "Right column text in the second"), (145, 312, "column of the section."),
        (200, 80, "The meeting is on Friday, and we"), (214.25, 56, "will discuss the report and the budget for"),
        (228.5, 56, "the next year."),
    ]:  # fmt: skip
        pdf.text(x, y, text)
    assert files.read("columns.pdf", bytes(pdf.output()), LIMIT).texts == (
        "more than 1,500 miles",
        "Left column text that wraps over several lines of the column.",
        "Right column text in the second column of the section.",
        "The meeting is on Friday, and we will discuss the report and the budget for the next year.",
    )
