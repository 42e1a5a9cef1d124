"""A PDF page's text objects as lines: a ``Run`` is one text object, a ``Line`` the runs on one
baseline, left to right (``pdf_blocks`` groups them; ``pdf_lists`` reads their labels), ``Rows``
the page's lines by baseline (which stand beside one another, as a table's cells do)."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, replace

from .pdf_bidi import has_rtl

WORD_GAP = 0.3  # a gap between two objects' glyph boxes wider than this many sizes is a space
SPACE = 0.2  # no font's space is narrower than this many sizes: a narrower blank is inside a word


@dataclass(frozen=True)
class Run:
    """One text object: its index on the page, text, glyph bounds and baseline origin."""

    index: int
    text: str
    left: float
    bottom: float
    right: float
    top: float
    x: float  # origin of its first glyph
    baseline: float
    size: float  # effective font size, in points
    color: tuple[int, int, int, int]
    # an object of one glyph: how far its font advances the pen from its origin, where a browser
    # that draws a word glyph by glyph puts the word's next glyph (0: more glyphs, or unknown)
    advance: float = 0.0


@dataclass
class Line:
    runs: list[Run]
    bullet: float | None = None  # the left of a bullet drawn as a shape before it (``Paths.bullet``)

    @property
    def first(self) -> Run:
        return self.runs[0]

    @property
    def text(self) -> str:
        """The line's characters left to right, as drawn (right-to-left text in visual order)."""
        # PDFium's text page puts the spaces it finds between a right-to-left line's objects on
        # the wrong side of them (its order is neither the page's nor the reading order): there
        # the objects' own spaces (``Drawn``) and the glyph-box gaps decide
        rtl = any(has_rtl(run.text) for run in self.runs)
        out = self.runs[0].text
        for before, run in zip(self.runs, self.runs[1:]):
            gap = gap_between(before, run)
            spaced = out.endswith(" ") or run.text.startswith(" ")
            # PDFium put a space after an object that a word gap follows; its decision is missing
            # only where an object it read lies between (one this reader keeps as it is)
            adjacent = run.index == before.index + 1 and not rtl
            out += run.text if spaced or adjacent or gap <= WORD_GAP * run.size else " " + run.text
        return out

    @property
    def right(self) -> float:
        return max(r.right for r in self.runs)

    @property
    def left(self) -> float:
        return min(self.first.left, self.first.x)


class Rows:
    """A page's lines by baseline, to tell which stand beside another: a table's row has its
    next cell on its baseline, a paragraph's line none (or another column's)."""

    def __init__(self, lines: list[Line]) -> None:
        self.order = sorted(lines, key=lambda ln: ln.first.baseline)
        self.bases = [ln.first.baseline for ln in self.order]

    def beside(self, line: Line) -> list[tuple[float, float]]:
        """The blanks between ``line`` and the nearest lines on its baseline (within 0.3 sizes),
        on its left and its right."""
        base, near, left, right = line.first.baseline, 0.3 * line.first.size, line.left, line.right
        others = self.order[bisect.bisect_left(self.bases, base - near) : bisect.bisect_right(self.bases, base + near)]
        gaps = [(max(o.right for o in others if o.right <= left), left)] if any(o.right <= left for o in others) else []
        if any(o.left >= right for o in others):
            gaps.append((right, min(o.left for o in others if o.left >= right)))
        return gaps


def gap_between(before: Run, run: Run) -> float:
    """The blank between two objects of a line: from ``before``'s glyphs to ``run``'s origin, or
    to its glyphs where they begin left of it; a glyph's ink alone may stand an em from its neighbour's."""
    return min(run.left, run.x) - before.right


def with_spaces(runs: list[Run], end: Callable[[Run], float]) -> list[Run]:
    """A line's objects with a space after each that the next object stands ``SPACE`` sizes or
    more past the advance of its last glyph (``end``: where the pen stands after an object), where
    PDFium's text page put none, one of the two an object of one glyph. It puts one there on a page
    it reads as horizontal text; a page whose text covers more of its height than of its width (a
    few short rows drawn glyph by glyph, blanks between the glyphs' boxes) it reads as vertical,
    and there it breaks the line before and after each one-glyph object and spaces none: a cell's
    words ran together ("LisbontoPorto"), so did its cells ("Tea2") and a word and a one-letter
    word drawn word by word beside them ("We goa"). A right-to-left line is read apart (``Line.text``)."""
    if any(has_rtl(run.text) for run in runs):
        return runs
    out = runs[:1]
    for before, run in zip(runs, runs[1:]):
        unspaced = not (before.text.endswith(" ") or run.text.startswith(" "))
        if unspaced and run.index == before.index + 1 and (before.advance > 0 or run.advance > 0):
            stop = before.x + before.advance if before.advance > 0 else end(before)
            if stop and run.x - stop >= SPACE * run.size:
                out[-1] = replace(out[-1], text=out[-1].text + " ")
        out.append(run)
    return out
