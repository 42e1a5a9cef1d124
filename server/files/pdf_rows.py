"""A table's row parted into its cells by its own gaps, where no row near it shows its columns
(``pdf_blocks`` reads lines; ``pdf_cells`` and ``pdf_columns`` part rows where other rows show the
columns' edges).

A page break that leaves one or two of a table's rows on a page leaves no other row to show where
its columns begin, and a browser's cells a few points apart were read as one line ("1,500 miles
85 dollars", or "miles85" where the cells are a point apart). The row itself shows them: its cells
stand further apart than its words. So a line is parted, with no column to go by, before an object

- after a gap at least ``CELL_GAP`` times the line's narrowest word gap (its font's space) and
  twice ``WORD_GAP`` sizes: a justified line's spaces are all stretched alike, two spaces after a
  full stop are narrower, and a gap of a size or more parts any line (``pdf_blocks.LINE_GAP``);
- or, in a line drawn glyph by glyph, at least ``PAST`` sizes past the advance of the glyph
  before and less than a space (PDFium's text page puts a right-to-left line's spaces on the
  wrong side of its glyphs), with no space between, where the line's other glyphs stand at their advances (within
  ``AT`` sizes, or closer: kerned): a browser sets a word's glyphs at their advances, or every
  glyph further apart (letter spacing, justified Chinese), never one pair alone.

A list's label and its text are no cells, and a lowercase word after a letter or a comma
continues a sentence (a tab-like gap inside it): neither is parted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from .pdf_cells import PAST, Placed
from .pdf_lines import SPACE, WORD_GAP

CELL_GAP = 2.5  # a gap this many times the line's narrowest word gap parts a row's cells
AT = 0.01  # a glyph this close (in sizes) past the advance of the one before stands at it
GLYPHS = 3  # glyphs at their advances that show a line is set so
LABEL_CHARS = 12  # no list's label ("1.", "iv)", a bullet) is longer

R = TypeVar("R", bound=Placed)


def part_gaps(lines: Sequence[Sequence[R]], label: Callable[[str], bool]) -> list[Sequence[R]]:
    """Lines (each its objects, left to right) with each parted where its own gaps show a table's cells."""
    out: list[Sequence[R]] = []
    for line in lines:
        cuts = _cuts(line, label) if len(line) > 1 else []
        at = [0, *cuts, len(line)]
        out += [line[a:b] for a, b in zip(at, at[1:])] if cuts else [line]
    return out


def _spaced(before: Placed, run: Placed) -> bool:
    return before.text.endswith(" ") or run.text.startswith(" ")


def _cuts(line: Sequence[Placed], label: Callable[[str], bool]) -> list[int]:
    """Where the line's cells begin (indices of its objects), by its gaps (see the module's docstring)."""
    pairs = list(zip(line, line[1:]))
    gaps = [min(run.left, run.x) - before.right for before, run in pairs]
    words = [
        gap
        for (before, run), gap in zip(pairs, gaps)
        if gap >= SPACE * run.size and (_spaced(before, run) or gap >= WORD_GAP * run.size)
    ]
    narrowest = min(words, default=0.0)
    # how far past its advance each glyph stands from the one before, with no space between
    past = [
        run.x - before.x - before.advance if before.advance > 0 and not _spaced(before, run) else None
        for before, run in pairs
    ]
    known = [p for p in past if p is not None]
    apart = [p is not None and PAST * run.size <= p < SPACE * run.size for p, (_, run) in zip(past, pairs)]
    at_advance = sum(p <= AT * line[0].size for p in known)
    glyph_set = at_advance >= GLYPHS and at_advance + sum(apart) == len(known)
    cuts, prefix = [], ""
    for k, ((before, run), gap, part) in enumerate(zip(pairs, gaps, apart), 1):
        prefix = (prefix + before.text)[:LABEL_CHARS]
        wide = gap >= max(CELL_GAP * narrowest, 2 * WORD_GAP * run.size)
        alike = abs(before.size - run.size) <= AT * run.size  # a cell's font, not inline code's
        glyph = part and glyph_set and alike and before.text[-1:].isalnum() and run.text[:1].isalnum()
        if (wide or glyph) and not label(prefix) and not _sentence(before.text, run.text):
            cuts.append(k)
    return cuts


def _sentence(before: str, after: str) -> bool:
    """Whether ``after`` continues a sentence ``before`` ends: a lowercase word after a letter or a comma."""
    end = before.rstrip()[-1:]
    return after.lstrip()[:1].islower() and (end.isalpha() or end == ",")
