"""A PDF page's paths that decide how its text is read (``pdf_blocks``): vertical rules that part
two cells, horizontal borders that part a cell from the one below it, thin horizontal paths that
underline or strike through a line, and small closed shapes that mark a list item.

A table's border is a thin filled rectangle in Chrome's PDFs (each side of each cell its own), a
stroked line in LibreOffice's, the side of a stroked rectangle in others'. Between two lines it
lies above the lower line's ascenders, where no strike-through (across the letters) lies, and
below the upper line's descenders or past its ends, where no underline (just under the baseline,
no longer than the line) lies.

Chrome prints a list's bullets as paths, not glyphs: a disc (a filled circle of 48 Bézier curves),
a circle (the same, stroked: a nested list's), a square (a filled rectangle: the third level, or
``list-style-type: square``) and a triangle (``disclosure-closed``), each one closed subpath about
0.3 of the item's font size (the triangle 0.65), raised to the middle of its lowercase letters
(0.1 to 0.6 sizes above the baseline), 0.4 to 1.1 sizes left of the item's text.
"""

from __future__ import annotations

import bisect
import ctypes
from collections.abc import Iterable

try:
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c
except ImportError:  # a dependency of attnserve: without it a PDF is refused and every other format served
    pdfium = pdfium_c = None  # type: ignore[assignment]

RULE_WIDTH = 3.0  # a path at most this many points wide is a vertical rule (a table's border)
BULLET_SIZE = (0.2, 0.7)  # a bullet's larger side, in the line's font sizes
BULLET_SIDES = 0.6  # a bullet's smaller side is at least this fraction of its larger: as wide as high
BULLET_GAP = (0.35, 2.0)  # from a bullet's right edge to the line's text, in font sizes
BULLET_SEGMENTS = 64  # a bullet's outline has at most this many segments (Chrome's disc has 49)
ASCENT, DESCENT = 0.72, 0.22  # a line's letters above and below its baseline, in font sizes


def _closed_shape(obj: pdfium_c.FPDF_PAGEOBJECT) -> bool:
    """Whether the path is drawn (filled or stroked) and is one closed outline: one subpath of a
    few segments that closes or ends where it began (an icon has several, or many more segments)."""
    fill, stroke = ctypes.c_int(), ctypes.c_int()
    if not pdfium_c.FPDFPath_GetDrawMode(obj, fill, stroke) or not (fill.value or stroke.value):
        return False
    count = pdfium_c.FPDFPath_CountSegments(obj)
    if not 3 <= count <= BULLET_SEGMENTS:
        return False
    segments = [pdfium_c.FPDFPath_GetPathSegment(obj, k) for k in range(count)]
    if any(pdfium_c.FPDFPathSegment_GetType(s) == pdfium_c.FPDF_SEGMENT_MOVETO for s in segments[1:]):
        return False
    if pdfium_c.FPDFPathSegment_GetClose(segments[-1]):
        return True
    ends = [(ctypes.c_float(), ctypes.c_float()) for _ in range(2)]
    for segment, (x, y) in zip((segments[0], segments[-1]), ends):
        pdfium_c.FPDFPathSegment_GetPoint(segment, x, y)
    (x0, y0), (x1, y1) = ends
    return abs(x0.value - x1.value) < 0.01 and abs(y0.value - y1.value) < 0.01


class Paths:
    """A page's vertical rules: thin paths (a browser's table borders are filled rectangles under
    a point wide) and the sides of stroked rectangles (a cell's border), sorted by x; text on
    either side of one is in two cells, however narrow their padding. Its thin horizontal
    paths, where a line's underline (a link's) or strike-through may be; with the top and bottom
    sides of stroked rectangles, sorted by height, the borders between a table's rows. And its
    small closed shapes, about as wide as high, sorted by right edge: where a list's bullet may be."""

    def __init__(self, page: pdfium_c.FPDF_PAGE, count: int) -> None:
        rules: list[tuple[float, float, float]] = []
        self.flat: list[tuple[int, float, float, float, float]] = []
        self.dots: list[tuple[float, float, float, float]] = []  # right, left, bottom, top
        self.across: list[tuple[float, float, float, float]] = []  # bottom, top, left, right
        bounds = [ctypes.c_float() for _ in range(4)]
        fill, stroke = ctypes.c_int(), ctypes.c_int()
        for i in range(count):
            obj = pdfium_c.FPDFPage_GetObject(page, i)
            if pdfium_c.FPDFPageObj_GetType(obj) != pdfium_c.FPDF_PAGEOBJ_PATH:
                continue
            if not pdfium_c.FPDFPageObj_GetBounds(obj, *bounds):
                continue
            left, bottom, right, top = (b.value for b in bounds)
            width, height = right - left, top - bottom
            if height <= RULE_WIDTH < width:
                self.flat.append((i, left, bottom, right, top))
                self.across.append((bottom, top, left, right))
            if width <= RULE_WIDTH:
                rules.append(((left + right) / 2, bottom, top))
            elif pdfium_c.FPDFPath_GetDrawMode(obj, fill, stroke) and not fill.value and stroke.value:
                rules += [(left, bottom, top), (right, bottom, top)]
                if height > RULE_WIDTH:  # its top and bottom sides, as wide as its stroke
                    line = ctypes.c_float()
                    pen = line.value if pdfium_c.FPDFPageObj_GetStrokeWidth(obj, line) else 1.0
                    self.across += [(bottom, bottom + pen, left, right), (top - pen, top, left, right)]
            if min(width, height) >= BULLET_SIDES * max(width, height) > 0 and _closed_shape(obj):
                self.dots.append((right, left, bottom, top))
        rules.sort()
        self.flat.sort(key=lambda path: path[2])
        self.flat_bottom = [path[2] for path in self.flat]
        self.x = [r[0] for r in rules]
        self.rules = rules
        self.across.sort()
        self.across_bottom = [path[0] for path in self.across]
        self.dots.sort()
        self.dots_right = [dot[0] for dot in self.dots]

    def marks(self, lines: Iterable[tuple[float, float, float, float]]) -> tuple[int, ...]:
        """The thin horizontal paths along lines, each given as (left, right, baseline, size):
        under a baseline (at most 0.3 sizes below it: an underline) or across the letters (0.15 to
        0.5 sizes above: a strike-through), no longer than the line. A rule between paragraphs lies
        further below or runs past the text; a table's border, however tight the cell, meets both
        of the cell's sides."""
        found = []
        for line_left, line_right, base, size in lines:
            left, right = line_left - 0.3 * size, line_right + 0.3 * size
            near = bisect.bisect_left(self.flat_bottom, base - 0.3 * size)
            for i, x0, bottom, x1, top in self.flat[near : bisect.bisect_right(self.flat_bottom, base + 0.5 * size)]:
                if top - bottom > 0.15 * size or not left <= x0 < x1 <= right:
                    continue
                middle = (bottom + top) / 2  # a table's border meets the cell's sides
                if self.between(x0 - 1, x0 + 1, middle) and self.between(x1 - 1, x1 + 1, middle):
                    continue
                if (
                    base - 0.3 * size <= bottom
                    and top <= base + 0.05 * size
                    or base + 0.15 * size <= bottom
                    and top <= base + 0.5 * size
                ):
                    found.append(i)
        return tuple(found)

    def between(self, left: float, right: float, y: float) -> bool:
        """Whether a rule crosses height ``y`` between ``left`` and ``right``."""
        found = self.rules[bisect.bisect_left(self.x, left) : bisect.bisect_right(self.x, right)]
        return any(bottom <= y <= top for _, bottom, top in found)

    def border(self, upper: tuple[float, float, float, float], lower: tuple[float, float, float, float]) -> bool:
        """Whether a table's border parts two lines, each given as (left, right, baseline, size): a
        horizontal path above the lower line's ascenders and under the upper one's baseline, running
        at least as far as the lines overlap (a border runs along its whole cell). The upper line's
        underline it cannot be: it lies below that line's descenders, or runs more than 0.3 sizes
        past one of its ends (a word processor's cell without padding puts its border as close under
        the baseline as the descenders reach; an underline is no longer than its line)."""
        (left0, right0, base0, size0), (left1, right1, base1, size1) = upper, lower
        start, end = sorted((max(left0, left1), min(right0, right1)))
        slack = 0.1 * size1
        found = self.across[
            bisect.bisect_left(self.across_bottom, base1 + ASCENT * size1) : bisect.bisect_right(
                self.across_bottom, base0
            )
        ]
        for _, top, x0, x1 in found:
            if top > base0 or x0 > start + slack or x1 < end - slack:
                continue
            if top <= base0 - DESCENT * size0 or x0 < left0 - 0.3 * size0 or x1 > right0 + 0.3 * size0:
                return True
        return False

    def bullet(self, start: float, baseline: float, size: float) -> float | None:
        """The left edge of a bullet before a line whose text starts at ``start`` (None where none
        stands): a small closed shape (0.2 to 0.7 sizes) inside the line's letters' height, its
        right edge 0.35 to 2 sizes left of the text. An icon drawn inline sits a word space from its
        word, nearer; a table's border, an underline or a rule is no shape as wide as high."""
        low, high = start - BULLET_GAP[1] * size, start - BULLET_GAP[0] * size
        for right, left, bottom, top in self.dots[
            bisect.bisect_left(self.dots_right, low) : bisect.bisect_right(self.dots_right, high)
        ]:
            side = max(right - left, top - bottom)
            if not BULLET_SIZE[0] * size <= side <= BULLET_SIZE[1] * size:
                continue
            if baseline - DESCENT * size <= bottom and top <= baseline + ASCENT * size:
                return left
        return None
