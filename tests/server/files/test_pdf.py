"""PDF without a model: which text blocks are read, and the translated file compared with its
source page by page: page count and sizes, images byte for byte, each block's translation inside
the block's rectangle, in the page's font where it has the glyphs, shrunk or wrapped to fit."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
import pytest
from fpdf import FPDF
from fpdf.enums import AccessPermission, EncryptionMethod

from attnserve.benchmarks.pdfs import A4, Box, Image, build, png
from attnserve.server import files
from attnserve.server.files import FileRefused, TooManyCharacters
from attnserve.server.files.pdf_fonts import UNICODE_FONTS
from tests.support.pdf_pages import assert_translated_in_place, pages, within

LIMIT = 1 << 20
PARAGRAPH = "The meeting is on Friday. We will discuss the report and the budget for the next year."


def sample(page_count: int = 3, textless: int = 1):
    """Pages of a bold heading, a wrapped paragraph, a narrow second column and an image; page
    ``textless`` has an image only."""
    layout = []
    for n in range(page_count):
        if n == textless:
            layout.append([Image(png(n), 100, 100, 200)])
            continue
        layout.append([
            Box(f"Heading {n + 1}", 56, 56, 300, 16, "B"),
            Box(f"{PARAGRAPH} Page {n + 1}.", 56, 100, 250, 11),
            Box(f"A note for page {n + 1}", 380, 100, 120, 9),
            Image(png(n), 380, 300, 100),
        ])  # fmt: skip
    return build(layout)


def translate(texts) -> list[str]:
    """A German-length "translation" with letters outside ASCII: each text a third longer."""
    return [t.swapcase() + " – " + " ".join(["Äpfel"] * max(1, len(t) // 18)) for t in texts]


def same_words(a: str) -> str:
    return " ".join(a.split())


def test_blocks_in_order_and_translations_in_place(caplog):
    data, rects = sample()
    with caplog.at_level(logging.WARNING, "attnserve.server.files.pdf"):
        extracted = files.read("report.pdf", data, LIMIT)
    assert "1 of 3 pages have no text (scanned?), left as they are: 2" in caplog.text
    assert extracted.texts == (
        "Heading 1", f"{PARAGRAPH} Page 1.", "A note for page 1",
        "Heading 3", f"{PARAGRAPH} Page 3.", "A note for page 3",
    )  # fmt: skip
    assert extracted.media_type == "application/pdf"
    translations = translate(extracted.texts)
    out = extracted.write(translations)
    source, result = pages(data), pages(out)
    assert [p.size for p in result] == [p.size for p in source]
    assert [p.images for p in result] == [p.images for p in source]  # every image's stream and place
    assert result[1] == source[1]  # the page without text, as it was
    assert [same_words(t) for t in files.read("out.pdf", out, LIMIT).texts] == translations
    assert_translated_in_place(data, out, rects, translations)  # each from its box, over nothing else


def test_the_pages_font_is_kept_where_it_renders_the_translation():
    data, _ = sample(1, textless=-1)
    extracted = files.read("a.pdf", data, LIMIT)
    out = extracted.write(["Titel 1", "Die Besprechung ist am Freitag.", "Ein Hinweis"])
    fonts = [t.font for t in pages(out)[0].texts]
    assert fonts == ["Helvetica-Bold", "Helvetica", "Helvetica"]
    sizes = [t.size for t in pages(out)[0].texts]
    assert sizes == [16, 11, 9]  # shorter than the source: drawn at the source's size


def framed(text: str, size: float = 12) -> tuple[bytes, tuple[float, float, float, float]]:
    """(a page of ``text`` in a table's cell as wide as it, bordered, the cell's rectangle)."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", size=size)
    width = pdf.get_string_width(text) + 2 * pdf.c_margin
    pdf.set_xy(56, 56)
    pdf.cell(width, 1.3 * size, text, border=1)
    return bytes(pdf.output()), (56, A4[1] - 56 - 1.3 * size, 56 + width, A4[1] - 56)


def test_a_longer_translation_without_room_around_it_shrinks_then_wraps_inside_its_box():
    data, cell = framed("A short label")
    extracted = files.read("a.pdf", data, LIMIT)
    (width,) = [t.bounds[2] - t.bounds[0] for t in pages(data)[0].texts]
    a_bit_longer = "A short label, too"  # fits on its line at a smaller size
    texts = pages(extracted.write([a_bit_longer]))[0].texts
    assert len(texts) == 1 and 12 * 0.65 <= texts[0].size < 12 and texts[0].bounds[2] - texts[0].bounds[0] <= width + 1
    much_longer = "Eine viel längere Beschriftung, die auf mehrere Zeilen umbrochen werden muss"
    texts = pages(extracted.write([much_longer]))[0].texts
    assert len(texts) > 1 and all(within(t.bounds, cell, 0.5) for t in texts)
    assert same_words(" ".join(t.text for t in texts)) == much_longer


def test_a_subset_font_without_the_letters_falls_back_to_its_standard_family():
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_font("dejavu", "", UNICODE_FONTS[0])
    pdf.add_page()
    pdf.set_font("dejavu", size=11)
    pdf.set_xy(56, 56)
    pdf.multi_cell(300, 14, "Hello there")  # embedded, subset to these letters
    extracted = files.read("a.pdf", bytes(pdf.output()), LIMIT)
    out = extracted.write(["Grüße an Zoë"])
    (text,) = pages(out)[0].texts
    assert text.text == "Grüße an Zoë" and text.font == "Helvetica"


@pytest.mark.skipif(not any(__import__("os").path.exists(p) for p in UNICODE_FONTS), reason="no Unicode font here")
def test_letters_no_standard_font_has_come_in_a_unicode_font():
    data, _ = build([[Box("Hello", 56, 56, 200, 12)]])
    out = files.read("a.pdf", data, LIMIT).write(["Привет"])
    (text,) = pages(out)[0].texts
    assert text.text == "Привет" and "Helvetica" not in text.font


def test_a_scan_is_refused_and_limits_hold():
    scan, _ = build([[Image(png(1), 50, 50, 400)], [Image(png(2), 50, 50, 400)]])
    with pytest.raises(FileRefused, match="its 2 page.s. hold only images .a scan..; run OCR"):
        files.read("scan.pdf", scan, LIMIT)
    with pytest.raises(FileRefused, match="not a readable PDF"):
        files.read("cut.pdf", sample()[0][:400], LIMIT)
    with pytest.raises(TooManyCharacters):
        files.read("a.pdf", sample()[0], LIMIT, max_chars=50)


def test_pdfs_on_many_threads_at_once():
    data, _ = sample()

    def one(_: int) -> bytes:
        extracted = files.read("a.pdf", data, LIMIT)
        return extracted.write(translate(extracted.texts))

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(8)))
    assert all(pages(r) == pages(results[0]) for r in results)


def protected(method: EncryptionMethod, permissions: AccessPermission) -> bytes:
    """A page encrypted with an owner password only: it opens without one, under ``permissions``."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.set_encryption(owner_password="owner", encryption_method=method, permissions=permissions)
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    pdf.text(56, 100, "Monday, 3 March 2025")
    return bytes(pdf.output())


def security(data: bytes) -> tuple[int, int]:
    """(the security handler's revision, -1 where the file is not encrypted; its permission bits)."""
    doc = pdfium.PdfDocument(data)
    try:
        return pdfium_c.FPDF_GetSecurityHandlerRevision(doc.raw), pdfium_c.FPDF_GetDocPermissions(doc.raw) & 0xF3C
    finally:
        doc.close()


@pytest.mark.parametrize("method", [EncryptionMethod.AES_128, EncryptionMethod.AES_256, EncryptionMethod.RC4])
def test_an_encrypted_pdf_that_restricts_nothing_gives_the_same_translation_every_time(method):
    """PDFium encrypts what it saves with AES under a new random IV each time: a PDF whose
    encryption forbids nothing is written unencrypted, the same file for the same translation."""
    data = protected(method, AccessPermission.all())
    first, second = (files.read("open.pdf", data, LIMIT).write(["Montag, 3. März 2025"]) for _ in range(2))
    assert first == second
    assert security(first)[0] == -1
    assert pages(first)[0].texts[0].text == "Montag, 3. März 2025"


@pytest.mark.parametrize("method", [EncryptionMethod.AES_128, EncryptionMethod.AES_256])
def test_a_pdf_whose_permissions_forbid_printing_or_changes_keeps_them(method):
    data = protected(method, AccessPermission.PRINT_LOW_RES | AccessPermission.COPY)
    out = files.read("restricted.pdf", data, LIMIT).write(["Montag, 3. März 2025"])
    assert security(out) == security(data) and security(out)[0] >= 4
    assert pages(out)[0].texts[0].text == "Montag, 3. März 2025"


def test_pages_and_page_objects_are_bounded(monkeypatch):
    from attnserve.server.files import pdf

    data, _ = sample(3, textless=-1)
    monkeypatch.setattr(pdf, "MAX_PAGES", 2)
    with pytest.raises(FileRefused, match="the PDF has 3 pages; this server translates at most 2"):
        files.read("a.pdf", data, LIMIT)
    monkeypatch.setattr(pdf, "MAX_PAGES", 10)
    monkeypatch.setattr(pdf, "MAX_OBJECTS", 7)  # 4 objects a page
    with pytest.raises(FileRefused, match="more than 7 page objects"):
        files.read("a.pdf", data, LIMIT)


@pytest.mark.parametrize(
    "data",
    [
        b"%PDF-1.4\n%%EOF",
        # a page tree that is its own kid and claims 100 million pages
        b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Count 100000000/Kids[2 0 R]>>"
        b"endobj\ntrailer<</Root 1 0 R>>\n%%EOF",
        b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R/X " + b"[" * 100_000 + b">>endobj\ntrailer<</Root 1 0 R>>",
    ],
    ids=["empty", "self-kid", "nested-arrays"],
)
def test_hostile_pdfs_are_refused_at_once(data):
    with pytest.raises(FileRefused, match="not a readable PDF"):
        files.read("hostile.pdf", data, LIMIT)


def test_without_pypdfium2_a_pdf_is_refused_with_the_reason(monkeypatch):
    from attnserve.server.files import pdf

    monkeypatch.setattr(pdf, "pdfium", None)
    with pytest.raises(FileRefused, match="pypdfium2, a dependency of attnserve, is not installed"):
        files.read("a.pdf", sample()[0], LIMIT)
    assert files.read("a.txt", b"still served", LIMIT).texts == ("still served",)


def test_list_items_spaced_as_lines_are_blocks_of_their_own_and_wrapped_prose_is_not():
    """A list's items, one line each and as far apart as a paragraph's lines, are translated and
    drawn each on its own line: a bullet starts an item; a label ("1.", "3)", "b.", "iv.") starts one
    at the left edge of a block that began with a label or after a lead-in ending in ":". A wrapped
    line of prose starting with a number ("2025 was", "2. The") continues its paragraph."""
    prose = "Our sales grew by a third that year and\n2025 was better still, as chapter\n2. The team grew too."
    data, _ = build([[
        Box("Bring these:\n\u2022 Eggs\n\u2022 Milk and bread", 56, 56, 300),
        Box("Steps:\n1. Open the file\n2. Choose a language\n3) Press Translate", 56, 140, 300),
        Box("a. Apples\nb. Pears\niv. Plums", 56, 240, 300),
        Box(prose, 56, 320, 300),
    ]])  # fmt: skip
    extracted = files.read("list.pdf", data, LIMIT)
    items = ("\u2022 Eggs", "\u2022 Milk and bread", "1. Open the file", "2. Choose a language", "3) Press Translate")
    assert extracted.texts == (
        "Bring these:", items[0], items[1], "Steps:", *items[2:], "a. Apples", "b. Pears", "iv. Plums",
        " ".join(prose.split()),
    )  # fmt: skip
    drawn = pages(extracted.write([t.swapcase() for t in extracted.texts]))[0].texts
    lines = {t.text: t.bounds[1] for t in drawn}  # each item on a line of its own, where it was
    assert all(item.swapcase() in lines for item in items)
    assert len({lines[item.swapcase()] for item in items}) == len(items)


def test_a_hanging_list_item_keeps_its_wrapped_line():
    """A numbered list as a browser prints one: the label, then the item's text, its wrapped line
    under the text (not under the label); the next label starts the next item."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    for y, label, text in [(100, "1.", "A first item that is long and"), (114, "", "wraps onto a second line."),
                           (128, "2.", "A second item.")]:  # fmt: skip
        if label:
            pdf.text(56, y, label)
        pdf.text(70, y, text)
    extracted = files.read("list.pdf", bytes(pdf.output()), LIMIT)
    assert extracted.texts == ("1. A first item that is long and wraps onto a second line.", "2. A second item.")


def test_an_underline_and_a_strike_through_go_with_their_words():
    """fpdf2, as browsers and word processors, draws a link's underline and a strike-through as
    thin paths under and across the words: left behind, they would mark other words of the
    translation or empty space. A rule between paragraphs and a cell's border stay, a browser's
    border of a cell without padding too (thin filled rectangles, the bottom one as close under
    the baseline as an underline: it meets both of the cell's sides)."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    pdf.set_xy(56, 100)
    pdf.write(14, "Read the ")
    pdf.set_font(style="U")
    pdf.write(14, "manual", link="https://example.com/manual")
    pdf.set_font(style="")
    pdf.write(14, " before you start.")
    pdf.line(56, 130, 300, 130)
    pdf.set_xy(56, 140)
    pdf.cell(120, 16, "A cell", border=1)
    pdf.set_xy(56, 170)
    pdf.set_font(style="S")
    pdf.cell(120, 16, "struck out")
    pdf.set_font(style="")
    pdf.text(56, 220, "Tight cell")
    width = pdf.get_string_width("Tight cell")
    for x, y, w, h in [
        (56, 209, width, 0.75),
        (56, 222.25, width, 0.75),
        (55.25, 209, 0.75, 14),
        (56 + width, 209, 0.75, 14),
    ]:
        pdf.rect(x, y, w, h, style="F")
    data = bytes(pdf.output())
    extracted = files.read("a.pdf", data, LIMIT)
    assert extracted.texts == ("Read the manual before you start.", "A cell", "struck out", "Tight cell")
    before = pages(data)[0].paths
    underline, rule, border, strike, *tight = before  # as drawn
    assert underline[3] - underline[1] < 1 and strike[3] - strike[1] < 1
    translations = ["Lies vor dem Start das Handbuch.", "Eine Zelle", "gestrichen", "Enge Zelle"]
    after = pages(extracted.write(translations))[0]
    assert after.paths == [rule, border, *tight]
    assert [t.text for t in after.texts] == translations
