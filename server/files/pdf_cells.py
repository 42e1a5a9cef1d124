"""Table cells whose texts touch, parted where their column's edge is (``pdf_blocks`` reads lines).

Chrome prints a table without side borders and with ``cellpadding=0`` with a cell's text ending a
point or two before the next cell's text, and PDFium's text page puts no space between them: they
would be read as one line, the two words where they meet glued into one ("Distance
travelledFare"). A word Chrome splits into several objects (at a kerning pair, "mi" "nd") meets
its other part as closely, so the gap alone cannot tell them apart. The column can: a cell's text
begins at the x where the texts of its column's other cells begin, and in a row whose cell before
it is narrower a wide gap already begins a line there. So a line is parted before an object that
meets the one before it with no space between (none PDFium read), its glyphs clear of the other's,
at the very origin (within ``SAME_X`` sizes: a browser puts a column's cells at one x) of a line
that begins right of another line on its own baseline, in a row at most ``ROWS`` sizes above or
below. A prose line's words have spaces between them, and its words' parts meet such an edge only
by chance; justified monospace text, which Chrome draws glyph by glyph on a grid whose columns
line up from line to line, is never parted after a single glyph.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Protocol, TypeVar

SAME_X = 0.001  # origins this many font sizes apart are one column's edge: a browser puts both at one x
ROWS = 6.0  # a column's other cells stand at most this many font sizes above or below
PAST = 0.05  # a glyph this many sizes past the advance of the one before it is no glyph of its word


class Placed(Protocol):
    """A text object as ``pdf_lines.Run`` holds it: its text, glyph box, origin and size."""

    @property
    def text(self) -> str: ...
    @property
    def left(self) -> float: ...
    @property
    def right(self) -> float: ...
    @property
    def x(self) -> float: ...
    @property
    def baseline(self) -> float: ...
    @property
    def size(self) -> float: ...
    @property
    def advance(self) -> float: ...


R = TypeVar("R", bound=Placed)


def part_cells(lines: Sequence[Sequence[R]]) -> list[Sequence[R]]:
    """Lines (each its objects, left to right) with each one parted before an object that begins
    a table's cell (its column's edge, see above) though it meets the cell before it with no
    space between."""
    edges = _edges(lines)
    if not edges:
        return list(lines)
    out: list[Sequence[R]] = []
    for line in lines:
        runs = list(line[:1])
        for before, run in zip(line, line[1:]):
            if _touches(before, run) and _on_edge(edges, run):
                out.append(runs)
                runs = []
            runs.append(run)
        out.append(line if len(runs) == len(line) else runs)
    return out


def _touches(before: Placed, run: Placed) -> bool:
    """Whether ``run`` meets ``before`` with no space between (none PDFium read) and its glyphs
    clear of it, ``before`` more than one glyph or one glyph that ``run`` stands past the end of
    its advance: a browser drawing text glyph by glyph puts a word's next glyph at the advance
    (kerned closer), and justified monospace text on a grid whose columns line up from line to
    line (at an edge by chance) too."""
    spaced = before.text.endswith(" ") or run.text.startswith(" ")
    if spaced or min(run.left, run.x) < before.right:
        return False
    return len(before.text) > 1 or before.advance > 0 and not in_word(before, run)


def in_word(before: Placed, run: Placed) -> bool:
    """Whether ``run`` stands where a browser drawing ``before``'s word glyph by glyph puts its next
    glyph: less than ``PAST`` sizes past the advance of ``before``'s one glyph (none known: False)."""
    return 0 < before.advance and run.x - before.x - before.advance < PAST * run.size


def _edges(lines: Sequence[Sequence[Placed]]) -> list[tuple[float, float]]:
    """(x, baseline) of each line that begins right of another line's text on its baseline (a
    table's cell after a narrower one, a column's line), sorted."""
    rows = sorted((line[0].baseline, max(run.right for run in line)) for line in lines)
    bases = [base for base, _ in rows]
    edges = []
    for first, *_ in lines:
        start, near = min(first.left, first.x), 0.3 * first.size
        beside = rows[
            bisect.bisect_left(bases, first.baseline - near) : bisect.bisect_right(bases, first.baseline + near)
        ]
        if any(right <= start for _, right in beside):
            edges.append((first.x, first.baseline))
    return sorted(edges)


def _on_edge(edges: list[tuple[float, float]], run: Placed) -> bool:
    """Whether ``run`` begins at a column's edge: where a cell begins after a gap in another row near it."""
    slack = SAME_X * run.size
    found = edges[bisect.bisect_left(edges, (run.x - slack,)) : bisect.bisect_right(edges, (run.x + slack, 1e9))]
    return any(0.3 * run.size < abs(base - run.baseline) <= ROWS * run.size for _, base in found)
