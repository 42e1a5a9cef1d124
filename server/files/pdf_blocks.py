"""A PDF page's text blocks, read with PDFium (pypdfium2): the unit a PDF's translation replaces.

PDFium reports a page's objects in content order; a text object is a run of glyphs in one font
and size at one origin (a line, a word, or a few letters, as the producer wrote it). Objects
on one baseline whose gaps are under a word's width make a line; lines below one another in
the same size, spaced as lines of one paragraph and overlapping horizontally, make a block.
A gap is measured from one object's glyphs to the next one's origin (or glyphs, where they begin
further left): a full-width Chinese or Japanese punctuation mark draws its ink in one half of its
em square ("。" left, "「" right), so between the ink of "。「", two glyphs with no space
between them, lies more than an em of blank. A vertical rule between two objects (a table's
border) ends a line however narrow the gap, and so does a column's edge where two cells touch (``pdf_cells``)
or where a borderless table's cells stand a word's gap apart (``pdf_columns``), and a row's cells
standing further apart than its words where no other row shows its columns (``pdf_rows``);
a horizontal rule between two lines (``Paths.border``) ends a block however close the lines,
and so does a table's row next to a paragraph spaced as its lines (Writer's table right under
its text): a line with its row's next cell beside it (``Rows``) joins no block that runs across
the blank between them, nor does a line that runs across the blank beside the line above it.
A list's bullet or label at a line's start begins a block of its own (``pdf_lists``).
Inside a line, objects are joined with a space where PDFium's text page put one: it measures the
gap by the glyphs' advances, where their tight boxes leave gaps between the digits of one number
when a browser writes a glyph an object (on a page it reads as vertical text it puts none around
an object of one glyph, and the advance of the glyph before decides: ``pdf_lines.with_spaces``).
A block's text is its lines joined by spaces (a line-end hyphen joined without one, and so is a
line of Chinese or Japanese wrapped between two of its wide characters, which no space parts). A line
with right-to-left letters (Hebrew, Arabic) is read from its objects' own characters where they
stand on the page (``Drawn``: PDFium's text page returns some objects in reading order, others as
drawn, and puts its added spaces on the wrong side) and reordered into reading order (``pdf_bidi``).

Only the page's own upright text is read: text inside form XObjects, rotated or skewed text
and invisible text (an OCR layer over a scanned image) is kept as it is, and so is text whose
font maps no characters to Unicode (no ToUnicode map: PDFium reads its raw codes, control
characters, which would be translated as gibberish and drawn as boxes).
"""

from __future__ import annotations

import ctypes
import re
import threading
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import partial

from .pdf_bidi import MIRROR, has_rtl, logical, right_to_left
from .pdf_cells import part_cells
from .pdf_columns import part_columns
from .pdf_fonts import outline
from .pdf_lines import Line, Rows, Run, gap_between, with_spaces
from .pdf_lists import SYMBOL_BULLETS, item, label
from .pdf_paths import ASCENT, DESCENT, Paths, pdfium_c
from .pdf_rows import part_gaps

LINE_GAP = 1.0  # a gap wider than this many font sizes starts a new line (a column, a table cell)
LABEL_GAP = 4.0  # but a list's label alone at a line's start reaches its text this far (a tab)
LEADING = (0.9, 1.6)  # baseline-to-baseline, in font sizes, of two lines of one block
SAME_SIZE = 0.15  # sizes within 15% of each other belong to one block
HYPHENS = ("-", "\u2010", "\u00ad")  # a line ending in one joins the next without a space


@dataclass(frozen=True)
class Block:
    """Lines of one paragraph: ``objects`` their text objects' indices on page ``page``; the box
    (``left``, ``bottom``, ``right``, ``top``) their glyphs and line boxes cover; the first line's
    origin ``x`` and ``baseline``; the size, leading (baseline to baseline, in sizes) and line count.
    ``lead`` is the object whose font, size and colour its translation takes: the first that holds
    a letter or digit, so an item's text decides, not its bullet (Symbol's U+F0B7, LibreOffice's
    '•' in OpenSymbol), whose font's fallback is no font of the document's."""

    page: int
    objects: tuple[int, ...]
    text: str
    left: float
    bottom: float
    right: float
    top: float
    x: float
    baseline: float
    size: float
    leading: float
    lines: int
    color: tuple[int, int, int, int]
    lead: int
    marks: tuple[int, ...] = ()  # paths underlining or striking through its lines, removed with its text
    align: str = "left"  # of its lines: "left", "right", "centre", or "justified" (left and right edges even)
    links: tuple[tuple[int, int, int], ...] = ()  # (link annotation, start, end) of its text (``pdf_links``)


_BUFFERS = threading.local()  # each thread's buffer for text_of (and its pointer), grown to the longest text read
UNMAPPED = re.compile("[\x00-\x1f\ufffd]")  # control characters, U+FFFD: codes PDFium mapped to no character


def _buffer(size: int) -> tuple[ctypes.Array[ctypes.c_char], ctypes._Pointer]:
    buffer = ctypes.create_string_buffer(size)
    _BUFFERS.held = buffer, ctypes.cast(buffer, ctypes.POINTER(pdfium_c.FPDF_WCHAR))
    return _BUFFERS.held


def text_of(obj: pdfium_c.FPDF_PAGEOBJECT, textpage: pdfium_c.FPDF_TEXTPAGE) -> str:
    """A text object's text (UTF-16 from PDFium)."""
    # PDFium finds an object's text by going through its page's characters, and copies it only
    # where the buffer holds it all (returning the bytes needed, the terminating NUL's among
    # them): one call with a buffer kept from object to object reads most objects
    buffer, pointer = getattr(_BUFFERS, "held", None) or _buffer(4096)
    n = pdfium_c.FPDFTextObj_GetText(obj, textpage, pointer, len(buffer))
    if n <= 2:
        return ""
    if n > len(buffer):
        buffer, pointer = _buffer(n)
        pdfium_c.FPDFTextObj_GetText(obj, textpage, pointer, n)
    return ctypes.string_at(buffer, n - 2).decode("utf-16-le", errors="replace")


def unreadable(text: str) -> bool:
    """Whether PDFium could not map the text's codes to Unicode: mostly control characters or
    U+FFFD (a stray one, a soft hyphen's mark, is dropped from readable text)."""
    return 2 * len(UNMAPPED.findall(text)) > len(text.strip())


class Drawn:
    """A page's characters by text object, in the order they stand on the page (left to right by
    origin), read from PDFium's text page once a page, when an object holds right-to-left text:
    PDFium returns one such object's text in reading order and another's as drawn."""

    def __init__(self, textpage: pdfium_c.FPDF_TEXTPAGE) -> None:
        self.textpage = textpage
        self.by_object: dict[int, list[tuple[float, int, str]]] | None = None
        self.last: dict[int, int] | None = None  # object -> its last character's index on the text page
        self.extents: dict[tuple[int, str], tuple[float, float] | None] = {}  # (font, bracket) -> its ink's x span

    def run(self, page: pdfium_c.FPDF_PAGE, run: Run) -> Run:
        """``run`` with its object's own characters as they stand (without PDFium's added spaces)."""
        if self.by_object is None:
            self.by_object = self._read()
        obj = pdfium_c.FPDFPage_GetObject(page, run.index)
        found = self.by_object.get(ctypes.cast(obj, ctypes.c_void_p).value or 0, [])
        text = "".join(" " if ch in "\r\n" else ch for _, _, ch in sorted(found) if ch >= " " or ch in "\r\n")
        return replace(run, text=text.replace("\ufffd", "")) if text.strip() else run

    def end(self, page: pdfium_c.FPDF_PAGE, run: Run) -> float:
        """Where the pen stands after ``run``'s last glyph (0 where unknown): the right of the
        glyph's loose box, which PDFium's text page spans by the glyph's advance, kerned and spaced
        as drawn. The page's characters are mapped to their objects once, when a line asks."""
        if self.last is None:
            self.last = {}
            for k in range(pdfium_c.FPDFText_CountChars(self.textpage)):
                obj = pdfium_c.FPDFText_GetTextObject(self.textpage, k)
                if obj and not pdfium_c.FPDFText_IsGenerated(self.textpage, k):
                    self.last[ctypes.cast(obj, ctypes.c_void_p).value or 0] = k
        obj = pdfium_c.FPDFPage_GetObject(page, run.index)
        k, box = self.last.get(ctypes.cast(obj, ctypes.c_void_p).value or 0), pdfium_c.FS_RECTF()
        return box.right if k is not None and pdfium_c.FPDFText_GetLooseCharBox(self.textpage, k, box) else 0.0

    def _read(self) -> dict[int, list[tuple[float, int, str]]]:
        textpage, by_object = self.textpage, {}  # type: ignore[var-annotated]
        x, y = ctypes.c_double(), ctypes.c_double()
        for k in range(pdfium_c.FPDFText_CountChars(textpage)):
            obj = pdfium_c.FPDFText_GetTextObject(textpage, k)
            code = pdfium_c.FPDFText_GetUnicode(textpage, k)
            if not obj or pdfium_c.FPDFText_IsGenerated(textpage, k) or 0xD800 <= code < 0xE000:
                continue  # a space PDFium put in, or half of a character beyond U+FFFF (no RTL letter)
            pdfium_c.FPDFText_GetCharOrigin(textpage, k, x, y)
            ch = chr(code)
            if ch in MIRROR:
                ch = self._shape(k, obj, ch, x.value)
            # characters at one origin (a ligature's letters) keep their order when read
            key = -k if has_rtl(ch) else k
            by_object.setdefault(ctypes.cast(obj, ctypes.c_void_p).value, []).append((round(x.value, 2), key, ch))
        return by_object

    def _shape(self, k: int, obj: pdfium_c.FPDF_PAGEOBJECT, ch: str, x: float) -> str:
        """The bracket character ``k`` of the page as drawn: PDFium's text page mirrors one it
        reads as right to left (reading order's), which ``pdf_bidi`` mirrors again. The glyph
        whose ink spans what the drawn glyph's does, from its origin; PDFium's where both do."""
        font, size = pdfium_c.FPDFTextObj_GetFont(obj), pdfium_c.FPDFText_GetFontSize(self.textpage, k)
        box = [ctypes.c_double() for _ in range(4)]
        if not font or size <= 0 or not pdfium_c.FPDFText_GetCharBox(self.textpage, k, *box):
            return ch
        ink = ((box[0].value - x) / size, (box[1].value - x) / size)  # left, right in sizes

        def off(candidate: str) -> float:
            key = (ctypes.cast(font, ctypes.c_void_p).value or 0, candidate)
            if key not in self.extents:  # a glyph's outline is read once a page, not once a bracket
                xs = [px for _, px, _ in outline(font, candidate)]
                self.extents[key] = (min(xs), max(xs)) if xs else None
            extent = self.extents[key]
            return abs(extent[0] - ink[0]) + abs(extent[1] - ink[1]) if extent else 1e9

        mirror = MIRROR[ch]
        return mirror if off(mirror) + 0.01 < off(ch) else ch


def _run(index: int, obj: pdfium_c.FPDF_PAGEOBJECT, textpage: pdfium_c.FPDF_TEXTPAGE) -> Run | None:
    """The object as a :class:`Run`, or None where it is kept as it is (empty, invisible, rotated, unreadable)."""
    if pdfium_c.FPDFTextObj_GetTextRenderMode(obj) == pdfium_c.FPDF_TEXTRENDERMODE_INVISIBLE:
        return None
    matrix = pdfium_c.FS_MATRIX()
    if not pdfium_c.FPDFPageObj_GetMatrix(obj, matrix) or matrix.b or matrix.c or matrix.a <= 0 or matrix.d <= 0:
        return None
    size = ctypes.c_float()
    if not pdfium_c.FPDFTextObj_GetFontSize(obj, size) or size.value * matrix.d < 1:
        return None
    text = text_of(obj, textpage).replace("\r", " ").replace("\n", " ").replace("\x00", "")
    if not text.strip() or unreadable(text):
        return None
    text = UNMAPPED.sub("", text)
    bounds = [ctypes.c_float() for _ in range(4)]
    if not pdfium_c.FPDFPageObj_GetBounds(obj, *bounds):
        return None
    rgba = [ctypes.c_uint() for _ in range(4)]
    if not pdfium_c.FPDFPageObj_GetFillColor(obj, *rgba):
        rgba = [ctypes.c_uint(v) for v in (0, 0, 0, 255)]
    left, bottom, right, top = (b.value for b in bounds)
    color = tuple(c.value for c in rgba)
    scale, advance = size.value * matrix.d, _advance(obj, text.strip(), size.value) * matrix.a
    return Run(index, text, left, bottom, right, top, matrix.e, matrix.f, scale, color, advance)  # type: ignore[arg-type]


def _advance(obj: pdfium_c.FPDF_PAGEOBJECT, text: str, size: float) -> float:
    """The advance of an object's one glyph at ``size`` (0 for more glyphs, or one its font cannot measure)."""
    width = ctypes.c_float()
    if len(text) != 1 or ord(text) > 0xFFFF:
        return 0.0
    font = pdfium_c.FPDFTextObj_GetFont(obj)
    return width.value if font and pdfium_c.FPDFFont_GetGlyphWidth(font, ord(text), size, width) else 0.0


def _same_line(line: Line, run: Run, rules: Paths) -> bool:
    """Whether ``run`` continues ``line``: on its baseline, less than a font size from it, no rule
    between. A label alone at the line's start (Word and LibreOffice put a tab after "1." or "•")
    reaches its item's text up to ``LABEL_GAP`` sizes away."""
    last = line.runs[-1]
    size = max(last.size, run.size)
    widest = LABEL_GAP if len(line.runs) == 1 and label(last.text) else LINE_GAP
    if abs(run.baseline - last.baseline) >= 0.3 * size or not -0.5 * size < gap_between(last, run) < widest * size:
        return False
    return not rules.between(last.right, run.left, run.baseline + 0.3 * run.size)


def _same_block(lines: list[Line], line: Line, rules: Paths, rows: Rows) -> bool:
    above, first, run = lines[-1], lines[0], line.first
    size = above.first.size
    if item(lines, line) or rules.border(*_along([above, line])):
        return False
    if abs(run.size - size) > SAME_SIZE * size:
        return False
    step = above.first.baseline - run.baseline
    if not LEADING[0] * size <= step <= LEADING[1] * size:
        return False
    if len(lines) > 1 and abs(step - (first.first.baseline - lines[1].first.baseline)) > 0.2 * size:
        return False  # spaced differently from the block's lines: a new paragraph
    widest = max(ln.right for ln in lines)
    if line.right - widest > _first_word(line) + size and not any(has_rtl(r.text) for r in line.runs):
        return False  # its first word would have stood on the line above: another column
    left = min(ln.first.left for ln in lines)
    return run.left < widest and line.right > left and not _across_row(left, widest, above, line, rows)


def _across_row(left: float, right: float, above: Line, line: Line, rows: Rows) -> bool:
    """Whether a table's row and a paragraph meet: a line beside which its row's next cell stands
    under a block (from ``left`` to ``right``) running across the blank between them, or a line
    running across that blank under the line ``above`` (a paragraph above or below a table whose
    rows are spaced as its lines: Writer's table right under its text)."""
    return any(left < low and high < right for low, high in rows.beside(line)) or any(
        line.left < low and high < line.right for low, high in rows.beside(above)
    )


def _first_word(line: Line) -> float:
    """About how wide the line's first word and the space after it are, by the line's mean
    character: a paragraph's line runs past the lines above it by less, whatever its alignment
    (its first word did not fit on the line above), so a line that runs further is another column's
    (a table's cell above a section in two columns, as far apart as a paragraph's lines). One wide
    character, and a closing mark kept with it, for Chinese or Japanese, which wrap between them."""
    text = line.text.strip()
    word = text.split()[0] if text else ""
    count = 2 if wide(word[:1]) else len(word) + 1
    return count * (line.right - min(line.first.left, line.first.x)) / max(len(text), 1)


def wide(ch: str) -> bool:
    """A wide character of a script written without spaces: Chinese, Japanese, their full-width
    punctuation (Korean's Hangul is wide, but Korean parts its words with spaces)."""
    return bool(ch) and unicodedata.east_asian_width(ch) in "WF" and not unicodedata.name(ch, "").startswith("HANGUL")


def _letter(chars: Iterable[str]) -> str:
    """The first of ``chars`` that is no narrow punctuation mark ("" for none)."""
    return next((ch for ch in chars if unicodedata.category(ch)[0] != "P" or wide(ch)), "")


def _unspaced(before: str, after: str) -> bool:
    """Whether lines wrapped between ``before`` and ``after`` join without a space: wide
    characters on both sides, past the narrow punctuation beside them ("。”" and "“好" alike)."""
    return wide(_letter(reversed(before))) and wide(_letter(after))


def _joined(lines: list[Line]) -> str:
    """The lines' text in reading order: each line's right-to-left text reordered (``pdf_bidi``)
    in the direction of the block's majority of letters; a symbol font's bullet before them as
    the Unicode bullet it looks like (``SYMBOL_BULLETS``)."""
    drawn = [" ".join(line.text.split()) for line in lines]
    drawn[0] = SYMBOL_BULLETS.get(drawn[0][:1], drawn[0][:1]) + drawn[0][1:]
    rtl = right_to_left("".join(drawn))
    out = ""
    for text in (logical(text, rtl) for text in drawn):
        if out.endswith(HYPHENS) and text[:1].islower() or _unspaced(out, text):
            out += text
        else:
            out += (" " if out else "") + text
    return out


def _block(page: int, lines: list[Line], marks: tuple[int, ...]) -> Block:
    runs = [r for ln in lines for r in ln.runs]
    first, last = lines[0].first, lines[-1].first
    lead = next((r for r in runs if any(ch.isalnum() for ch in r.text)), first)
    size = lead.size
    leading = (first.baseline - last.baseline) / (len(lines) - 1) / size if len(lines) > 1 else 1.2
    top = max(max(r.top for r in runs), first.baseline + ASCENT * size)
    bottom = min(min(r.bottom for r in runs), last.baseline - DESCENT * size)
    return Block(
        page, tuple(r.index for r in runs), _joined(lines),
        min(min(r.left for r in runs), first.x), bottom, max(r.right for r in runs), top,
        first.x, first.baseline, size, leading, len(lines), lead.color, lead.index, align=_align(lines),
        marks=marks,
    )  # fmt: skip


def _align(lines: list[Line]) -> str:
    """How the lines are aligned, where two or more show it: their left edges even ("left"; with the
    right edges of all but the last even too, on three lines or more, "justified"); else their right
    edges ("right") or their middles ("centre"); else "left" (a hanging label, a first-line indent)."""
    even = 0.15 * lines[0].first.size  # a glyph's side bearing moves its box's edge a little
    lefts = [min(ln.first.left, ln.first.x) for ln in lines]
    rights = [ln.right for ln in lines]
    if len(lines) < 2 or max(lefts) - min(lefts) <= even:
        return "justified" if len(lines) > 2 and max(rights[:-1]) - min(rights[:-1]) <= even else "left"
    if max(rights) - min(rights) <= even:
        return "right"
    middles = [(a + b) / 2 for a, b in zip(lefts, rights)]
    return "centre" if max(middles) - min(middles) <= even else "left"


def _along(lines: list[Line]) -> list[tuple[float, float, float, float]]:
    """Each line's (left, right, baseline, size), where its underline, strike-through or border may lie."""
    return [(min(ln.first.left, ln.first.x), ln.right, ln.first.baseline, ln.first.size) for ln in lines]


def page_blocks(page_index: int, page: pdfium_c.FPDF_PAGE, textpage: pdfium_c.FPDF_TEXTPAGE) -> list[Block]:
    """The page's text blocks in content order."""
    count = pdfium_c.FPDFPage_CountObjects(page)
    rules = Paths(page, count)
    drawn = Drawn(textpage)
    lines: list[Line] = []
    for i in range(count):
        obj = pdfium_c.FPDFPage_GetObject(page, i)
        if pdfium_c.FPDFPageObj_GetType(obj) != pdfium_c.FPDF_PAGEOBJ_TEXT:
            continue
        run = _run(i, obj, textpage)
        if run is None:
            continue
        if lines and _same_line(lines[-1], run, rules):
            lines[-1].runs.append(run)
        else:
            lines.append(Line([run]))
    spaced = [with_spaces(ln.runs, partial(drawn.end, page)) for ln in lines]
    parted = part_columns(part_cells(part_gaps(spaced, label)), label)  # cells
    lines = [Line(list(runs)) for runs in parted]
    rows = Rows(lines)
    for line in lines:  # a right-to-left line is read from its characters as drawn (``Line.text``)
        if any(has_rtl(run.text) for run in line.runs):
            line.runs = [drawn.run(page, run) for run in line.runs]
        first = line.first
        line.bullet = rules.bullet(min(first.left, first.x), first.baseline, first.size)
    blocks: list[Block] = []
    group: list[Line] = []
    for line in lines:
        if group and not _same_block(group, line, rules, rows):
            blocks.append(_block(page_index, group, rules.marks(_along(group))))
            group = []
        group.append(line)
    if group:
        blocks.append(_block(page_index, group, rules.marks(_along(group))))
    return [b for b in blocks if b.text.strip()]
