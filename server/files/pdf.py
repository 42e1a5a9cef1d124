"""PDF: each text block replaced in place by its translation, with PDFium (pypdfium2, Apache-2.0/BSD).

Read: every page's text blocks (``pdf_blocks``), each one text unit, in page and content order.
Written: the file opened again; on each page with blocks, a block's text objects are removed and
its translation drawn at the block's first baseline, left-aligned, in its colour, and fitted to
its box (the rectangle its glyphs and lines covered): first shrunk (to 0.7x its size) on no more
lines than it had, then wrapped onto more lines, shrinking further until it fits. A translation
mostly in right-to-left letters (Arabic, Hebrew) is right-aligned instead, each line broken in
reading order and drawn in visual order, Arabic letters joined (``pdf_bidi``). The thin paths
underlining or striking through a block's lines (``Block.marks``) go with its text: they would
mark other words of the translation, or empty space. Images, other paths, annotations (a link's
area among them) and every other object stay as they were (an image's stream is not touched);
only the changed pages' content streams are rewritten.

The font: the block's own where it has a glyph for every character of the translation (a
standard font such as Helvetica; an embedded font subset to the source's letters usually lacks
some; never a Type3 font, which PDFium cannot write new text in), else the standard font of its
family (Helvetica, Times, Courier; bold, italic), else a Unicode TrueType font of the system
(DejaVu Sans, Liberation Sans), embedded.

Pages without text (scanned images) are left as they are and logged at warning with their
numbers; a file with no text at all is refused (400) as a scan that needs OCR first.

PDFium is not thread-safe: every call into it holds ``LOCK``. Work is bounded: ``MAX_PAGES``
pages, ``MAX_OBJECTS`` page objects, ``--max-file-chars`` characters of text.
"""

from __future__ import annotations

import ctypes
import io
import logging
import os
import threading
import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ..documents import TEXT
from .extracted import Characters, Check, Extracted
from .pdf_bidi import joined, right_to_left, visual
from .pdf_blocks import Block, page_blocks
from .pdf_paths import pdfium, pdfium_c
from .refusals import FileRefused
from .run_placement import Placement

log = logging.getLogger(__name__)

MAX_PAGES = 10_000
MAX_OBJECTS = 2_000_000  # page objects looked at per file: a million empty objects cost bounded time
LOCK = threading.Lock()
SHRINK_FIRST = 0.7  # a block keeps its line count down to this fraction of its size
SMALLEST = 0.3  # and is never drawn below this fraction of it (nor below 3 pt)
STEP = 0.95
UNICODE_FONTS = (
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
)


@contextmanager
def _document(data: bytes) -> Iterator[pdfium.PdfDocument]:
    try:
        doc = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if getattr(exc, "err_code", None) == pdfium_c.FPDF_ERR_PASSWORD:
            raise FileRefused(
                "the PDF is protected by a password; send it without the password (remove the protection first)"
            ) from None
        raise FileRefused(f"the file is not a readable PDF ({exc})") from None
    try:
        yield doc
    finally:
        doc.close()


def read_pdf(data: bytes, max_file_bytes: int, chars: Characters) -> Extracted:
    if pdfium is None:
        raise FileRefused("this server cannot read PDFs: pypdfium2, a dependency of attnserve, is not installed")
    with LOCK, _document(data) as doc:
        pages = len(doc)
        if pages > MAX_PAGES:
            raise FileRefused(f"the PDF has {pages:,} pages; this server translates at most {MAX_PAGES:,}")
        blocks, textless = _read(doc, chars)
    if not blocks:
        if len(textless) == pages:
            raise FileRefused(
                f"the PDF has no text to translate: its {pages} page(s) hold only images (a scan?); run OCR on it first"
            )
        raise FileRefused(
            "the PDF has no text this server can replace: its text is rotated, inside forms, invisible"
            " (a scan's OCR layer) or in fonts that map no characters to Unicode (no ToUnicode map)"
        )
    if textless:
        shown = ", ".join(str(p + 1) for p in textless[:20]) + (", ..." if len(textless) > 20 else "")
        log.warning("PDF: %d of %d pages have no text (scanned?), left as they are: %s", len(textless), pages, shown)

    def write(translations: Sequence[str], placement: Placement, check: Check) -> bytes:
        with LOCK, _document(data) as doc:
            return _write(doc, blocks, translations, check)

    return Extracted(tuple(b.text for b in blocks), write, TEXT, "application/pdf")


def _read(doc: pdfium.PdfDocument, chars: Characters) -> tuple[list[Block], list[int]]:
    """(the blocks of every page, the pages with no text at all)."""
    blocks: list[Block] = []
    textless: list[int] = []
    objects = 0
    for index in range(len(doc)):
        page = doc[index]
        textpage = page.get_textpage()
        try:
            if pdfium_c.FPDFText_CountChars(textpage.raw) <= 0:
                textless.append(index)
                continue
            objects += pdfium_c.FPDFPage_CountObjects(page.raw)
            if objects > MAX_OBJECTS:
                raise FileRefused(
                    f"the PDF has more than {MAX_OBJECTS:,} page objects; this server reads at most that many"
                )
            for block in page_blocks(index, page.raw, textpage.raw):
                chars.add(len(block.text))
                blocks.append(block)
        finally:
            textpage.close()
            page.close()
    return blocks, textless


DRAWN = 1e-9  # the advance of a glyph drawn without one, told apart from a missing glyph's 0
NOT_A_CHARACTER = "\ufdd0"  # a Unicode noncharacter: no font maps it, so it is drawn as the font's .notdef


class Glyphs:
    """One font's advances at size 1, asked of PDFium once a character; 0 where it has no glyph."""

    def __init__(self, font: pdfium_c.FPDF_FONT) -> None:
        self.font = font
        self.advance: dict[str, float] = {}
        self.notdef = outline(font, NOT_A_CHARACTER)

    def _ask(self, ch: str) -> float:
        width = ctypes.c_float()
        if ord(ch) > 0xFFFF or not pdfium_c.FPDFFont_GetGlyphWidth(self.font, ord(ch), ctypes.c_float(1.0), width):
            return 0.0
        # a missing character's width is 0 in a simple embedded subset; in a standard font it is
        # the default width, with no glyph path; in a CID font (a browser's or word processor's
        # subset) it is drawn as .notdef, the box a noncharacter gets
        glyph = outline(self.font, ch)
        if not ch.isspace() and not glyph or self.notdef and glyph == self.notdef:
            return 0.0
        # a combining mark (an Arabic or Hebrew vowel) is drawn over its letter, with no advance
        return max(width.value, 0.0) or (DRAWN if unicodedata.combining(ch) else 0.0)

    def missing(self, text: str) -> int:
        """Characters of ``text`` the font cannot draw (each known after this)."""
        advance = self.advance
        for ch in set(text).difference(advance):
            advance[ch] = self._ask(ch)
        return sum(advance[ch] == 0.0 for ch in set(text))

    def width(self, text: str) -> float:
        """After ``missing(text)``."""
        return sum(map(self.advance.__getitem__, text))


def outline(font: pdfium_c.FPDF_FONT, ch: str) -> tuple[tuple[int, float, float], ...]:
    """The glyph path PDFium draws for ``ch`` at size 1, as (type, x, y) points; () for none."""
    path = pdfium_c.FPDFFont_GetGlyphPath(font, ord(ch), ctypes.c_float(1.0))
    if not path:
        return ()
    points = []
    x, y = ctypes.c_float(), ctypes.c_float()
    for i in range(pdfium_c.FPDFGlyphPath_CountGlyphSegments(path)):
        segment = pdfium_c.FPDFGlyphPath_GetGlyphPathSegment(path, i)
        pdfium_c.FPDFPathSegment_GetPoint(segment, x, y)
        points.append((pdfium_c.FPDFPathSegment_GetType(segment), round(x.value, 4), round(y.value, 4)))
    return tuple(points)


def drawable(font: pdfium_c.FPDF_FONT) -> bool:
    """Whether PDFium can write new text in the font: not a Type3 font (glyphs drawn by content
    streams, as matplotlib's PDFs have), which has no font program and whose new text is lost."""
    size = ctypes.c_size_t()
    pdfium_c.FPDFFont_GetFontData(font, None, 0, size)
    return size.value > 0


class Fonts:
    """The fonts a document's translations are drawn in, and their glyphs."""

    def __init__(self, doc: pdfium.PdfDocument) -> None:
        self.doc = doc
        self.loaded: dict[str, pdfium_c.FPDF_FONT] = {}
        self.known: dict[int, Glyphs] = {}

    def glyphs(self, font: pdfium_c.FPDF_FONT) -> Glyphs:
        key = ctypes.cast(font, ctypes.c_void_p).value or 0
        if key not in self.known:
            self.known[key] = Glyphs(font)
        return self.known[key]

    def missing(self, font: pdfium_c.FPDF_FONT, text: str) -> int:
        return self.glyphs(font).missing(text)

    def standard(self, font: pdfium_c.FPDF_FONT) -> pdfium_c.FPDF_FONT | None:
        name = base_name(font).lower()
        family = "Times" if "times" in name or "serif" in name and "sans" not in name else "Helvetica"
        family = "Courier" if "courier" in name or "mono" in name else family
        bold = "bold" in name or pdfium_c.FPDFFont_GetWeight(font) >= 600
        italic = "italic" in name or "oblique" in name
        if family == "Times":
            style = {(0, 0): "Roman", (1, 0): "Bold", (0, 1): "Italic", (1, 1): "BoldItalic"}[bold, italic]
        else:
            style = {(0, 0): "", (1, 0): "Bold", (0, 1): "Oblique", (1, 1): "BoldOblique"}[bold, italic]
        return self._load(family + ("-" + style if style else ""))

    def unicode(self) -> pdfium_c.FPDF_FONT | None:
        for path in UNICODE_FONTS:
            if os.path.exists(path):
                return self._load(path)
        return None

    def _load(self, name: str) -> pdfium_c.FPDF_FONT | None:
        if name not in self.loaded:
            if name.startswith("/"):
                with open(name, "rb") as file:
                    data = file.read()
                buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
                font = pdfium_c.FPDFText_LoadFont(self.doc.raw, buffer, len(data), pdfium_c.FPDF_FONT_TRUETYPE, 1)
            else:
                font = pdfium_c.FPDFText_LoadStandardFont(self.doc.raw, name.encode())
            self.loaded[name] = font
        return self.loaded[name] or None

    def choose(self, font: pdfium_c.FPDF_FONT, text: str) -> pdfium_c.FPDF_FONT:
        """The first of the block's font, its standard family, a Unicode font that renders every
        character of ``text``; else the one that misses the fewest (logged)."""
        candidates = [font] if drawable(font) else []
        for fallback in (self.standard, lambda _: self.unicode()):
            if candidates and self.missing(candidates[-1], text) == 0:
                return candidates[-1]
            found = fallback(font)
            if found is not None:
                candidates.append(found)
        if not candidates:
            raise FileRefused("the PDF's text is in a font this server cannot draw, and no standard font is here")
        best = min(candidates, key=lambda f: self.missing(f, text))
        if self.missing(best, text):
            log.warning("PDF: no font here renders %d character(s) of a translation", self.missing(best, text))
        return best

    def close(self) -> None:
        for font in self.loaded.values():
            if font:
                pdfium_c.FPDFFont_Close(font)


def base_name(font: pdfium_c.FPDF_FONT) -> str:
    n = pdfium_c.FPDFFont_GetBaseFontName(font, None, 0)
    buffer = ctypes.create_string_buffer(max(n, 1))
    pdfium_c.FPDFFont_GetBaseFontName(font, buffer, n)
    return buffer.value.decode("latin-1")


def _wrap(words: list[str], widths: list[float], space: float, limit: float, loose: bool) -> list[str] | None:
    """Words greedily on lines of at most ``limit`` (size-1 units); None if one word alone is
    wider and not ``loose``."""
    lines: list[str] = []
    line: list[str] = []
    used = 0.0
    for word, width in zip(words, widths):
        if width > limit and not loose:
            return None
        if line and used + space + width > limit:
            lines.append(" ".join(line))
            line, used = [], 0.0
        used += (space if line else 0.0) + width
        line.append(word)
    if line:
        lines.append(" ".join(line))
    return lines


def fit(block: Block, words: list[str], widths: list[float], space: float, left: float) -> tuple[float, list[str]]:
    """(size, lines) of the translation in the box from ``left``: shrink on the block's line count, then wrap."""
    box_width, box_height = block.right - left, block.top - block.bottom
    above = (block.top - block.baseline) / block.size  # the first line's box above its baseline, in sizes
    last = block.baseline - (block.lines - 1) * block.leading * block.size
    below = (last - block.bottom) / block.size

    def fits(size: float, lines: list[str] | None, most: int) -> bool:
        if lines is None or len(lines) > most:
            return False
        return size * (above + below + (len(lines) - 1) * block.leading) <= box_height + 0.01

    total = sum(widths) - space * (block.lines - len(words))  # its words on block.lines lines, at size 1
    size, smallest = min(block.size, block.lines * box_width / max(total, 1e-6)), max(SMALLEST * block.size, 3.0)
    smallest = min(smallest, block.size)
    while size >= SHRINK_FIRST * block.size:
        lines = _wrap(words, widths, space, box_width / size, False)
        if fits(size, lines, block.lines):
            return size, lines  # type: ignore[return-value]
        size *= STEP
    size = block.size
    while size > smallest:
        lines = _wrap(words, widths, space, box_width / size, False)
        if fits(size, lines, len(words)):
            return size, lines  # type: ignore[return-value]
        size *= STEP
    return smallest, _wrap(words, widths, space, box_width / smallest, True) or []


def _draw(doc: pdfium.PdfDocument, page: pdfium.PdfPage, fonts: Fonts, block: Block, font, translation: str) -> None:
    # a right-to-left translation (by the majority of its letters, as a block is read) is
    # right-aligned in the box, its lines broken in reading order and each drawn in visual order
    rtl = right_to_left(translation)
    words = joined(translation).split()
    if not words:
        return
    font = fonts.choose(font, " ".join(words))
    glyphs = fonts.glyphs(font)
    glyphs.missing(" ")
    widths = [glyphs.width(word) for word in words]
    size, lines = fit(block, words, widths, glyphs.width(" ") or 0.25, block.left if rtl else block.x)
    top = block.top - (block.top - block.baseline) / block.size * size
    r, g, b, a = block.color
    for i, line in enumerate(lines):
        obj = pdfium_c.FPDFPageObj_CreateTextObj(doc.raw, font, ctypes.c_float(size))
        encoded = ctypes.create_string_buffer((visual(line, rtl) + "\0").encode("utf-16-le"))
        pdfium_c.FPDFText_SetText(obj, ctypes.cast(encoded, ctypes.POINTER(pdfium_c.FPDF_WCHAR)))
        x = block.right - _right(obj) if rtl else block.x
        pdfium_c.FPDFPageObj_Transform(obj, 1, 0, 0, 1, x, top - i * block.leading * size)
        pdfium_c.FPDFPageObj_SetFillColor(obj, r, g, b, a)
        pdfium_c.FPDFPage_InsertObject(page.raw, obj)


def _right(obj: pdfium_c.FPDF_PAGEOBJECT) -> float:
    """The right edge of a text object's glyphs drawn from x = 0 (as the source block's edge is measured)."""
    bounds = [ctypes.c_float() for _ in range(4)]
    return bounds[2].value if pdfium_c.FPDFPageObj_GetBounds(obj, *bounds) else 0.0


def _write(doc: pdfium.PdfDocument, blocks: list[Block], translations: Sequence[str], check: Check) -> bytes:
    by_page: dict[int, list[tuple[Block, str]]] = {}
    for block, translation in zip(blocks, translations):
        by_page.setdefault(block.page, []).append((block, translation))
    fonts = Fonts(doc)
    try:
        for index, placed in by_page.items():
            check()
            page = doc[index]
            try:
                handles = {i: pdfium_c.FPDFPage_GetObject(page.raw, i) for b, _ in placed for i in b.objects + b.marks}
                for block, translation in placed:  # drawn before the old objects go: they hold the fonts
                    _draw(doc, page, fonts, block, pdfium_c.FPDFTextObj_GetFont(handles[block.objects[0]]), translation)
                for obj in handles.values():
                    if pdfium_c.FPDFPage_RemoveObject(page.raw, obj):
                        pdfium_c.FPDFPageObj_Destroy(obj)
                if not pdfium_c.FPDFPage_GenerateContent(page.raw):
                    raise FileRefused(f"page {index + 1} of the PDF could not be rewritten")
            finally:
                page.close()
        out = io.BytesIO()
        doc.save(out)
        return out.getvalue()
    finally:
        fonts.close()
