"""The free room around a PDF block that its translation may take (``pdf``): a translation longer
than its source (German runs about a third longer than English) is drawn at its size where the
page has space beside or below the block, and shrunk only where it has none.

To the right (to the left for a right-aligned block or a right-to-left translation, both ways for
a centred one, keeping its middle), a block grows up to half a size short of the nearest object in
its band (another block's text, an image, a path: a table's border, a vertical rule; text two
sizes or nearer, across a column gap, leaves it none); to its column's edge where a block of
another column stands beside it within two of its line steps above or below (a borderless table's
next column, the cell beside it empty: the widest block of its own column in that block's rows);
to a column gap of the page (a gap in the page's text, found from the heights of the blocks above
each point of its width, with text at least three lines high on both sides); and never past the
page's text area (its text's outermost edges, or the margin mirroring the other side's: the
page's box as its text leaves it). A path or image the block lies inside (a cell's stroked
rectangle, a shaded box) is the edge of its room. Below, within its grown width, it reaches down
to a line step above the next object, so that the translation does not read as one paragraph with
it, and no lower than the bottom of the page's text area.

Each block's room avoids every other block's source text and the lines already drawn on the
page, so no translation grows over another. The page's objects are indexed once, by the squares of a
grid they cover; a page whose objects would fill more than ``MAX_ENTRIES`` squares (a drawing of
thousands of overlapping shapes) or that takes more than ``BUDGET`` looks gives its remaining
blocks their own boxes.
"""

from __future__ import annotations

import bisect
import ctypes
import math
from collections.abc import Iterator
from itertools import accumulate

from .pdf_bidi import right_to_left
from .pdf_blocks import Block
from .pdf_paths import pdfium_c

CELL = 24.0  # the grid's squares, in points
MAX_ENTRIES = 500_000  # squares the page's objects may fill
BUDGET = 3_000_000  # objects looked at for a page's blocks
NEAR = 2.0  # line steps above and below a block where a block beside it ends its room
GUTTER = 0.25  # a column gap holds under this fraction of the text on either side of it
COLUMN = 3.0  # and the text on each side is at least this many of the page's lines high
SPACE = 0.5  # sizes a grown block keeps from what stops it beside it
NARROW = 2.0  # text in its band this many sizes or nearer beside a block (a column gap) leaves it no room
BINS = 2000  # the page's width is measured in at most this many steps to find its column gaps

Rect = tuple[float, float, float, float]  # left, bottom, right, top
Entry = tuple[int, float, float, float, float, bool]  # object index (-1: a drawn line), rect, is text


class Room:
    """One page's objects and text area, for the room of each of its blocks in turn."""

    def __init__(self, page: pdfium_c.FPDF_PAGE, count: int, blocks: list[Block], box: Rect) -> None:
        self.cells: dict[tuple[int, int], list[Entry]] | None = {}
        self.entries, self.looked, self.box = 0, 0, box
        self.pending: list[tuple[int, Rect, bool]] | None = []  # indexed on the first block that asks for room
        edges = [math.inf, math.inf, -math.inf, -math.inf]
        bounds = [ctypes.c_float() for _ in range(4)]
        for i in range(count):
            obj = pdfium_c.FPDFPage_GetObject(page, i)
            if not pdfium_c.FPDFPageObj_GetBounds(obj, *bounds):
                continue
            text = pdfium_c.FPDFPageObj_GetType(obj) == pdfium_c.FPDF_PAGEOBJ_TEXT
            if text and pdfium_c.FPDFTextObj_GetTextRenderMode(obj) == pdfium_c.FPDF_TEXTRENDERMODE_INVISIBLE:
                continue
            rect = _clip((bounds[0].value, bounds[1].value, bounds[2].value, bounds[3].value), box)
            if rect is None:
                continue
            if text:
                edges = [min(edges[0], rect[0]), min(edges[1], rect[1]), max(edges[2], rect[2]), max(edges[3], rect[3])]
            self.add(i, rect, text)  # type: ignore[arg-type]
        left, bottom, right, top = box
        self.centre = (left + right) / 2
        self.text_left, self.mirrored = edges[0], left + right - edges[0]  # the left margin, and the right one like it
        self.left, self.right = min(edges[0], left + right - edges[2]), max(edges[2], left + right - edges[0])
        self.bottom = min(edges[1], bottom + top - edges[3])
        self.rows: dict[int, list[tuple[Rect, int]]] = {}
        for n, block in enumerate(blocks):
            for row in _span(block.bottom, block.top):
                self.rows.setdefault(row, []).append(((block.left, block.bottom, block.right, block.top), n))
        self.numbers = {id(block): n for n, block in enumerate(blocks)}
        self.margins = [b.right for b in blocks if b.align in ("right", "justified")]
        self.blocks = blocks
        self.edges: tuple[list[float], list[float], list[float]] | None = None
        self.gutters = _gutters(blocks, self.left, self.right)

    def add(self, index: int, rect: Rect, text: bool) -> None:
        """An object the blocks' room must leave free (``index`` -1: a line of a drawn translation)."""
        if self.pending is not None:
            self.pending.append((index, rect, text))
            return
        if self.cells is None:
            return
        if (rect := _clip(rect, self.box)) is None:  # type: ignore[assignment]
            return
        columns, rows = range(_cell(rect[0]), _cell(rect[2]) + 1), range(_cell(rect[1]), _cell(rect[3]) + 1)
        self.entries += len(columns) * len(rows)
        if self.entries > MAX_ENTRIES:
            self.cells = None
            return
        cells, entry = self.cells, (index, *rect, text)
        for column in columns:
            for row in rows:
                cells.setdefault((column, row), []).append(entry)

    def align(self, block: Block, rtl: bool) -> str:
        """The block's alignment: its lines', else a single line's not at the text's left by the
        page (``_single``); "right" for a right-to-left translation."""
        tolerance = max(0.5, 0.05 * block.size)
        # right-to-left source text stands at the right by its direction: a left-to-right
        # translation of it is left-aligned
        align = "left" if block.align == "right" and right_to_left(block.text) else block.align
        if block.lines == 1 and block.left > self.text_left + tolerance:
            align = self._single(block, tolerance) or align
        if rtl and align != "centre":
            return "right"  # a right-to-left translation is right-aligned, and grows to the left
        return "left" if align == "justified" else align

    def _single(self, block: Block, tolerance: float) -> str | None:
        """A single line's alignment as the page shows it, None where it shows none: centred on
        the page, or ending at a right-aligned or justified block's right edge; else, where its
        left edge is none of the page's other blocks' (an indented line, a column's, starts where
        others do), right-aligned where its right edge is the margin mirroring the text's left one
        or another block's right edge, or centred where its middle is another block's (a date
        above a ragged letter, a signature, a title centred over its column)."""
        middle = (block.left + block.right) / 2
        if abs(middle - self.centre) <= tolerance:
            return "centre"
        if any(abs(block.right - margin) <= tolerance for margin in self.margins):
            return "right"
        if self.edges is None:  # sorted once a page, for the first single line that needs them
            edges = [(b.left, b.right, (b.left + b.right) / 2) for b in self.blocks]
            self.edges = tuple(sorted(values) for values in zip(*edges))  # type: ignore[assignment]
        lefts, rights, middles = self.edges  # type: ignore[misc]
        even = 0.15 * block.size  # a glyph's side bearing moves the edge of its ink this far
        if _count(lefts, block.left, even) > 1:
            return None
        if abs(block.right - self.mirrored) <= even or _count(rights, block.right, even) > 1:
            return "right"
        if _count(middles, middle, even) > 1:
            return "centre"
        return None

    def grown(self, block: Block, align: str) -> Rect:
        """The box the block's translation may fill: its own, grown into the free room around it."""
        start = block.left if align == "right" else block.x
        if self.pending is not None:  # a page whose every translation fits its own box indexes nothing
            pending, self.pending = self.pending, None
            for entry in pending:
                self.add(*entry)
        if self.cells is None or self.looked > BUDGET:
            return start, block.bottom, block.right, block.top
        mine = {*block.objects, *block.marks}
        number = self.numbers.get(id(block), -1)
        left, right = start, block.right
        if align != "left":
            left = min(block.left, self._side(block, mine, number, -1))
        if align != "right":
            right = max(block.right, self._side(block, mine, number, 1))
        if align == "centre":
            middle = (block.left + block.right) / 2
            half = min(middle - left, right - middle)
            left, right = middle - half, middle + half
        return left, min(block.bottom, self._below(block, mine, left, right)), right, block.top

    def _side(self, block: Block, mine: set[int], number: int, way: int) -> float:
        """How far right (``way`` 1) or left (-1) the block's band is free."""
        low, high = block.bottom + 0.1 * block.size, block.top - 0.1 * block.size
        near, inside = (block.right, block.left) if way > 0 else (block.left, block.right)
        best = self.right if way > 0 else self.left
        best = self._beside(block, number, way, best)
        for start, end in self.gutters:
            if way > 0 and start >= near - 1:
                best = min(best, start)
            elif way < 0 and end <= near + 1:
                best = max(best, end)
        tolerance, space = 0.5, SPACE * block.size
        column, rows = _cell(near), _span(low, high)
        while (column * CELL < best) if way > 0 else ((column + 1) * CELL > best):
            for i, l, b, r, t, text in self._at([column], rows):
                if i in mine or t <= low or b >= high:
                    continue
                front, back = (l, r) if way > 0 else (-r, -l)  # measured in the direction of growth
                if front >= way * near - tolerance:
                    narrow = text and front - way * near < NARROW * block.size
                    limit = way * near if narrow else max(front - space, way * near)
                elif back <= way * near + tolerance:
                    continue  # behind the block's edge
                elif not text and front <= way * inside + tolerance:
                    limit = max(back - space, way * near)  # it holds the block: a cell's rectangle, a shaded box
                else:
                    limit = way * near
                best = min(best, way * limit) if way > 0 else max(best, way * limit)
            column += way
        return best

    def _beside(self, block: Block, number: int, way: int, best: float) -> float:
        """The edge of the block's column where another column's block stands beside it within
        ``NEAR`` line steps above or below (a borderless table's next column, whose cell beside
        this one may be empty): the far edge of the blocks of this column in that block's rows
        that reach past this block's edge (the column's widest cell or line), short of that block
        by ``SPACE``. A block beside it with nothing of this column in its rows (a table under a
        list, its first column narrower than the list's item) is another part of the page."""
        reach = NEAR * block.leading * block.size
        low, high = block.bottom - reach, block.top + reach
        near: dict[int, Rect] = {}
        for row in _span(low, high):
            for rect, n in self.rows.get(row, ()):
                if n != number and rect[3] > low and rect[1] < high:
                    near[n] = rect
        self.looked += len(near) ** 2
        # measured in the direction of growth: (front, back) edges, this block's far edge
        edges = {n: (l, r) if way > 0 else (-r, -l) for n, (l, _, r, _) in near.items()}
        edge = way * (block.right if way > 0 else block.left)
        # the blocks that may be this block's column's: from before its edge to it or past it
        ours = [
            (back, near[m][1], near[m][3]) for m, (ahead, back) in edges.items() if ahead <= edge and edge - 0.5 <= back
        ]
        for n, (front, _) in edges.items():
            if front < edge - 0.5:
                continue
            _, bottom, _, top = near[n]
            column = [back for back, under, over in ours if back <= front and over > bottom and under < top]
            if column:
                limit = max(edge, min(front - SPACE * block.size, max(column)))
                best = min(best, limit) if way > 0 else max(best, -limit)
        return best

    def _below(self, block: Block, mine: set[int], left: float, right: float) -> float:
        """How far down the room from ``left`` to ``right`` under the block is free, a line step kept."""
        gap = block.leading * block.size
        best, tolerance = self.bottom, 0.1 * block.size
        columns = _span(left + tolerance, right - tolerance)
        row = _cell(block.bottom)
        while (row + 1) * CELL + gap > best:
            for i, l, b, r, t, text in self._at(columns, [row]):
                if i in mine or r <= left + tolerance or l >= right - tolerance or b >= block.bottom:
                    continue
                if t <= block.bottom + tolerance:
                    limit = t + gap
                elif not text and l <= left + tolerance and r >= right - tolerance:
                    limit = b + gap  # it holds the block
                else:
                    limit = block.bottom
                best = max(best, limit)
            row -= 1
        return best

    def _at(self, columns: list[int], rows: list[int]) -> Iterator[Entry]:
        assert self.cells is not None
        for column in columns:
            for row in rows:
                found = self.cells.get((column, row), ())
                self.looked += len(found)
                yield from found


def _count(values: list[float], value: float, tolerance: float) -> int:
    """How many of the sorted ``values`` lie within ``tolerance`` of ``value``."""
    return bisect.bisect_right(values, value + tolerance) - bisect.bisect_left(values, value - tolerance)


def _clip(rect: Rect, box: Rect) -> Rect | None:
    """The part of ``rect`` on the page's box, None for none."""
    out = max(rect[0], box[0]), max(rect[1], box[1]), min(rect[2], box[2]), min(rect[3], box[3])
    return out if out[0] <= out[2] and out[1] <= out[3] else None


def _cell(v: float) -> int:
    return math.floor(v / CELL)


def _span(low: float, high: float) -> list[int]:
    return list(range(_cell(low), _cell(high) + 1))


def _gutters(blocks: list[Block], left: float, right: float) -> list[tuple[float, float]]:
    """The page's column gaps: stretches of its width where the blocks above them are under
    ``GUTTER`` of the text height on each side (a heading across both columns keeps the gap)."""
    if not blocks or right <= left:
        return []
    step = max(1.0, (right - left) / BINS)
    count = int((right - left) / step) + 2
    heights = [0.0] * (count + 1)
    for block in blocks:  # each block's height over its width, summed with a difference array
        heights[max(0, int((block.left - left) / step))] += block.top - block.bottom
        heights[min(count, int((block.right - left) / step) + 1)] -= block.top - block.bottom
    covered = list(accumulate(heights[:count], initial=0.0))[1:]
    lines = sorted((b.top - b.bottom) / b.lines for b in blocks)
    column = COLUMN * lines[len(lines) // 2]  # a table's row or two leaves no column gap
    # the most text at or left of each step, and at or right of it
    before, after = list(accumulate(covered, max)), list(accumulate(reversed(covered), max))[::-1]
    gutters: list[tuple[float, float]] = []
    for k, (h, side) in enumerate(zip(covered, map(min, before, after))):
        if h >= GUTTER * side or side < column:
            continue  # a gap: text on both sides, and far less here
        start, end = left + k * step, left + (k + 1) * step
        if gutters and abs(gutters[-1][1] - start) < step / 2:
            gutters[-1] = (gutters[-1][0], end)
        else:
            gutters.append((start, end))
    return gutters
