"""PDF: each text block replaced in place by its translation, with PDFium (pypdfium2, Apache-2.0/BSD).

Read: every page's text blocks (``pdf_blocks``), each one text unit, in page and content order.
Written: the file opened again; on each page with blocks, a block's text objects are removed and
its translation drawn at the block's first baseline, in its colour and alignment (left, right or
centred, as its lines show or a single line stands on the page), and fitted to its box (the
rectangle its glyphs and lines covered) grown into the free room beside and below it
(``pdf_room``: up to the nearest object, a column gap, the page's text area; a line step above
what lies below), since a longer translation would otherwise be shrunk where the page has space
for it: at its size on its line count where the grown box holds it, or on more lines where it has
room below; else shrunk (to 0.7x its size) on no more lines than it had, then wrapped onto more
lines, shrinking further until it fits. A translation mostly in right-to-left letters (Arabic,
Hebrew) is right-aligned instead, growing to the left, each line broken in reading order and drawn
in visual order, Arabic letters joined (``pdf_bidi``). The thin paths
underlining or striking through a block's lines (``Block.marks``) go with its text: they would
mark other words of the translation, or empty space. A link's area moves to where its words are
drawn (``pdf_links``: its words a run of their own in each block, placed by the service's
``Placement`` as a .docx's styled run), and the link is removed where they are all translated as
nothing. Images, other paths, other annotations and every other object stay as they
were (an image's stream is not touched); only the changed pages' content streams are rewritten.

The font: the block's own (its text's, not a bullet's) where it has a glyph for every character of
the translation (a standard font such as Helvetica; an embedded font subset to the source's letters
usually lacks some; never a Type3 font, which PDFium cannot write new text in), else the standard
font of its family (Helvetica, Times, Courier; bold, italic), else a font of the system that has
them (``pdf_fonts``: DejaVu Sans; Droid Sans Fallback for Chinese, Japanese and Korean; Amiri for
Urdu; the target language's script's font first where its Han characters have shapes of their
own: IPAGothic for Japanese), embedded as a subset; where none has every character, runs, each in
a font that has its characters (``pdf_runs.Runs``), each measured in its own font. A translation
wraps at its spaces; Chinese and Japanese, written without them, between characters where
Unicode's line breaking algorithm allows (``pieces``).

Pages without text (scanned images) are left as they are and logged at warning with their
numbers; a file with no text at all is refused (400) as a scan that needs OCR first.

PDFium is not thread-safe: every call into it holds ``LOCK``. Work is bounded: ``MAX_PAGES``
pages, ``MAX_OBJECTS`` page objects, ``--max-file-chars`` characters of text.
"""

from __future__ import annotations

import ctypes
import hashlib
import io
import logging
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from uniseg.linebreak import line_break_units

from ..documents import TEXT
from .extracted import Characters, Check, Extracted
from .pdf_bidi import joined, right_to_left, visual
from .pdf_blocks import Block, page_blocks, wide
from .pdf_fonts import Fonts
from .pdf_links import linked, move, rectangles, unit, words_of
from .pdf_paths import pdfium, pdfium_c
from .pdf_room import Rect, Room
from .pdf_runs import text_objects
from .refusals import FileRefused
from .run_placement import Placement

log = logging.getLogger(__name__)

MAX_PAGES = 10_000
MAX_OBJECTS = 2_000_000  # page objects looked at per file: a million empty objects cost bounded time
LOCK = threading.Lock()
SHRINK_FIRST = 0.7  # a block keeps its line count down to this fraction of its size
SMALLEST = 0.3  # and is never drawn below this fraction of it (nor below 3 pt)
STEP = 0.95


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


def read_pdf(data: bytes, max_file_bytes: int, chars: Characters, target_language: str = "") -> Extracted:
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
            return _write(doc, blocks, translations, placement, check, target_language)

    # a block's links are runs of their own, its translation's words placed on them as on styled runs
    units = tuple(map(unit, blocks)) if any(b.links for b in blocks) else ()
    return Extracted(tuple(b.text for b in blocks), write, TEXT, "application/pdf", units)


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
            for block in linked(page.raw, textpage.raw, page_blocks(index, page.raw, textpage.raw)):
                chars.add(len(block.text))
                blocks.append(block)
        finally:
            textpage.close()
            page.close()
    return blocks, textless


def pieces(text: str) -> tuple[list[str], list[bool]]:
    """The pieces a line of ``text`` may break between, and whether a space stands before each: its
    words, and in a word of Chinese or Japanese (written without spaces) the units between the
    line-break opportunities of Unicode's line breaking algorithm (UAX #14, ``uniseg``): between
    two characters, never before closing punctuation (。，」）) or a small kana, nor after an
    opening bracket (「（), a Latin word or a number kept whole. Korean parts its words with
    spaces, and breaks only there."""
    words: list[str] = []
    spaced: list[bool] = []
    for word in text.split():
        units = list(line_break_units(word)) if not word.isascii() and any(map(wide, word)) else [word]
        words += units
        spaced += [True] + [False] * (len(units) - 1)
    return words, spaced


def _wrap(
    words: list[str], widths: list[float], spaced: list[bool], space: float, limit: float, loose: bool
) -> list[str] | None:
    """Pieces greedily on lines of at most ``limit`` (size-1 units), a space before each
    ``spaced`` one inside a line; None if one piece alone is wider and not ``loose``."""
    lines: list[str] = []
    line, used = "", 0.0
    for word, width, gap in zip(words, widths, spaced):
        if width > limit and not loose:
            return None
        step = space if gap and line else 0.0
        if line and used + step + width > limit:
            lines.append(line)
            line, used, step = "", 0.0, 0.0
        used += step + width
        line += (" " if step else "") + word
    if line:
        lines.append(line)
    return lines


def fit(
    block: Block, words: list[str], widths: list[float], spaced: list[bool], space: float, box: Rect, shrink=True
) -> tuple[float, list[str]]:
    """(size, lines) of the translation in ``box`` (the block's box grown into the room around it,
    ``pdf_room``): at its size, on its line count or on more where the box has room below; else
    shrunk on its line count; then wrapped, shrinking (``shrink`` False: (0, []) instead)."""
    box_width, box_height = box[2] - box[0], box[3] - box[1]
    above = (block.top - block.baseline) / block.size  # the first line's box above its baseline, in sizes
    last = block.baseline - (block.lines - 1) * block.leading * block.size
    below = (last - block.bottom) / block.size

    def fits(size: float, lines: list[str] | None, most: int) -> bool:
        if lines is None or len(lines) > most:
            return False
        return size * (above + below + (len(lines) - 1) * block.leading) <= box_height + 0.01

    def wrap(size: float, loose: bool = False) -> list[str] | None:
        return _wrap(words, widths, spaced, space, box_width / size, loose)

    lines = wrap(block.size)
    if fits(block.size, lines, len(words)):
        return block.size, lines  # type: ignore[return-value]
    if not shrink:
        return 0.0, []
    total = sum(widths) + space * (sum(spaced[1:]) - (block.lines - 1))  # on block.lines lines, at size 1
    size, smallest = min(block.size, block.lines * box_width / max(total, 1e-6)), max(SMALLEST * block.size, 3.0)
    smallest = min(smallest, block.size)
    while size >= SHRINK_FIRST * block.size:
        lines = wrap(size)
        if fits(size, lines, block.lines):
            return size, lines  # type: ignore[return-value]
        size *= STEP
    size = block.size
    while size > smallest:
        lines = wrap(size)
        if fits(size, lines, len(words)):
            return size, lines  # type: ignore[return-value]
        size *= STEP
    return smallest, wrap(smallest, True) or []


def _draw(
    doc: pdfium.PdfDocument,
    page: pdfium.PdfPage,
    fonts: Fonts,
    room: Room,
    block: Block,
    font,
    translation: str,
    links: dict[int, range | None],
) -> list[tuple[int, Rect]]:
    """The translation drawn in the block's place; (link, rectangle) where ``links``' words went."""
    # a right-to-left translation (by the majority of its letters, as a block is read) is
    # right-aligned in the box, its lines broken in reading order and each drawn in visual order
    rtl = right_to_left(translation)
    words, spaced = pieces(joined(translation))
    if not words:
        return []
    pen = fonts.pen(font, " ".join(words))  # one font, or runs of several where none has every character
    widths = [pen.width(word) for word in words]
    align = room.align(block, rtl)
    space = pen.width(" ") or 0.25
    # the block's own box where the translation fits it at its size; the room around it only
    # where it would be shrunk (its line breaks stay the source's width where they can)
    own = (block.left if align == "right" else block.x, block.bottom, block.right, block.top)
    size, lines = fit(block, words, widths, spaced, space, own, shrink=False)
    if not lines:
        size, lines = fit(block, words, widths, spaced, space, room.grown(block, align))
    top = block.top - (block.top - block.baseline) / block.size * size
    r, g, b, a = block.color
    drawn: list[tuple[float, float, Rect]] = []  # each line's origin and bounds, where its links go
    for i, line in enumerate(lines):
        objs = text_objects(doc, pen, visual(line, rtl), size)
        x = block.x
        if align != "left":  # the glyphs' edges, drawn from x = 0, as the source block's are measured
            left, right = _bounds(*objs)[::2]
            x = block.right - right if align == "right" else (block.left + block.right - left - right) / 2
        for obj in objs:
            pdfium_c.FPDFPageObj_Transform(obj, 1, 0, 0, 1, x, top - i * block.leading * size)
            pdfium_c.FPDFPageObj_SetFillColor(obj, r, g, b, a)
            pdfium_c.FPDFPage_InsertObject(page.raw, obj)
        bounds = _bounds(*objs)
        room.add(-1, bounds, True)  # no later block's translation is drawn over it
        drawn.append((x, top - i * block.leading * size, bounds))
    return rectangles(links, lines, words, spaced, widths, space, size, drawn) if links else []


def _bounds(*objs: pdfium_c.FPDF_PAGEOBJECT) -> Rect:
    """The bounds of the objects together (a line's runs)."""
    found: list[Rect] = []
    bounds = [ctypes.c_float() for _ in range(4)]
    for obj in objs:
        if pdfium_c.FPDFPageObj_GetBounds(obj, *bounds):
            found.append((bounds[0].value, bounds[1].value, bounds[2].value, bounds[3].value))
    if not found:
        return 0.0, 0.0, 0.0, 0.0
    return min(b[0] for b in found), min(b[1] for b in found), max(b[2] for b in found), max(b[3] for b in found)


def _write(
    doc: pdfium.PdfDocument,
    blocks: list[Block],
    translations: Sequence[str],
    placement: Placement,
    check: Check,
    target_language: str = "",
) -> bytes:
    by_page: dict[int, list[tuple[Block, str]]] = {}
    for block, translation in zip(blocks, translations):
        by_page.setdefault(block.page, []).append((block, translation))
    fonts = Fonts(doc, set().union(*map(joined, translations)), target_language)  # its script's fonts first
    try:
        for index, placed in by_page.items():
            check()
            page = doc[index]
            try:
                handles = {i: pdfium_c.FPDFPage_GetObject(page.raw, i) for b, _ in placed for i in b.objects + b.marks}
                count = pdfium_c.FPDFPage_CountObjects(page.raw)
                room = Room(page.raw, count, [b for b, _ in placed], tuple(page.get_bbox()))  # type: ignore[arg-type]
                rects: dict[int, list[Rect]] = {}  # each link's rectangles on the translation's lines
                for block, translation in placed:  # drawn before the old objects go: they hold the fonts
                    font = pdfium_c.FPDFTextObj_GetFont(handles[block.lead])
                    links = words_of(block, placement, translation) if block.links else {}
                    for k, rect in _draw(doc, page, fonts, room, block, font, translation, links):
                        rects.setdefault(k, []).append(rect)
                move(page.raw, rects, {k for b, _ in placed for k, *_ in b.links})
                for obj in handles.values():
                    if pdfium_c.FPDFPage_RemoveObject(page.raw, obj):
                        pdfium_c.FPDFPageObj_Destroy(obj)
                if not pdfium_c.FPDFPage_GenerateContent(page.raw):
                    raise FileRefused(f"page {index + 1} of the PDF could not be rewritten")
            finally:
                page.close()
        out = io.BytesIO()
        doc.save(out, flags=pdfium_c.FPDF_REMOVE_SECURITY if unrestricted(doc) else 0)
        return same_bytes(out.getvalue())
    finally:
        fonts.close()


GRANTED = 0xF3C  # print, modify, copy, annotate, fill forms, extract, assemble, print well (bits 3-6, 9-12)


def unrestricted(doc: pdfium.PdfDocument) -> bool:
    """Whether the document is encrypted (opened without a password: only an owner password) with
    permissions that forbid nothing. PDFium encrypts what it saves under a new random AES IV every
    time, with no call to fix it: such a file is written unencrypted, losing nothing, so the same
    translation is the same file. One that forbids something keeps its encryption and permissions
    (a translation does not lift its author's restrictions), and with AES differs run to run."""
    if pdfium_c.FPDF_GetSecurityHandlerRevision(doc.raw) < 0:
        return False
    return pdfium_c.FPDF_GetDocPermissions(doc.raw) & GRANTED == GRANTED


TRAILER_ID = re.compile(rb"/ID\s*\[\s*<([0-9A-Fa-f]{32})>\s*<([0-9A-Fa-f]{32})>\s*\]")


def same_bytes(data: bytes) -> bytes:
    """``data`` (a PDF PDFium saved) with the part of its trailer's /ID that PDFium draws at random
    at every save made from the document's own bytes: the second half, and the first too where the
    source had no /ID (PDFium then draws one for both halves). The same document and translation
    give the same file; same length, so every offset of the cross-reference table holds."""
    found = list(TRAILER_ID.finditer(data, max(0, len(data) - 4096)))[-1:]  # the last trailer's
    if not found:
        return data
    first, second = found[0].groups()
    spans = [found[0].span(2)] + ([found[0].span(1)] if first == second else [])

    def with_id(value: bytes) -> bytes:
        out = data
        for start, end in spans:  # 32 hex digits replaced by 32: the offsets hold
            out = out[:start] + value + out[end:]
        return out

    return with_id(hashlib.md5(with_id(b"0" * 32), usedforsecurity=False).hexdigest().upper().encode())
