"""A borderless table's rows parted into their cells where its columns' edges are (``pdf_blocks`` reads lines).

A browser prints a table without borders with its cells a few points apart: Chrome's default
``<table>`` (cellpadding 1, cellspacing 2) leaves 3 points between the widest cell of a column and
the next column's text, no wider than a space, and PDFium's text page reads a space there. So a
row's cells would be read as one line ("Monday at 3:45 PM Friday") and, rows spaced as a
paragraph's lines, the table as one paragraph. The gap cannot tell a cell from a word; the
columns can: a column's cells begin (or, right-aligned, end) at one x in every row. So an
object that begins after a gap, its glyphs clear of the text before it, at the x where objects
of other rows begin after a gap, begins a cell (a line of its own), where that x is a column's
edge:

- objects of rows at most ``ROWS`` sizes apart begin there, the texts before them not alike
  (where they start or end, or what they read): lines that begin alike ("The meeting", "The cat",
  each word an object) share the x of their second word, and a column's first cells ("Tea",
  "Milk") may end within a hair of each other;
- and one row at least leaves a gap there that already parted the row (wider than a line's
  gap), or three rows begin a cell there, or two rows share another such edge: a justified
  paragraph's words meet a column's edge, or one another's, by chance, one line with one other.

A right-aligned column's cells (numbers) end at one x (within ``RIGHT_X`` sizes: glyph boxes
differ by their side bearings) and begin at different ones; it is a column where one row's cell
begins after a gap that parted the row. A line that has an object across a column's edge (a
paragraph under a table, its words running past the table's columns) is no row and is not
parted. Only whole objects are parted, never one object's text: a line drawn in one object (a
paragraph's line, justified or not) stays whole. The text before an edge is more than one
character, or a word's last glyph where a browser draws its lines glyph by glyph (Chrome, at some
sizes: 11 pt): one with PDFium's space after it, on no monospace grid (whose words begin at one x
from line to line). There a column wants three rows, or two that share another edge where
no word of the table's other rows runs across its x (a cell's words begin at one x wherever the
widths before them add up alike), and a right-aligned column is read from whole objects only.

A row beside a column's rows (a step from one) whose cells are centred in their columns (a
browser's ``<th>``) begins no cell at an edge, and its cells may stand a space apart: it is parted
where an edge lies in a word's gap between two of its objects, unless an edge lies inside one of
its words (a paragraph's line, drawn glyph by glyph).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from .pdf_cells import ROWS, SAME_X, Placed, in_word
from .pdf_lines import WORD_GAP

RIGHT_X = 0.05  # right ends this many sizes apart are one right-aligned column's edge (side bearings)
ALIKE = 0.1  # texts starting and ending within this many sizes of each other are alike
ACROSS = 0.05  # an object reaches across an edge when it runs this many sizes past it on both sides
BESIDE = 0.6  # lines whose baselines are this many sizes apart stand on one row (a row's cells centred)
SAME_ROW = 0.3  # and this close, on one baseline (the line beside parted for a rule or a gap)
WIDE = 1.0  # a gap this many sizes wide parts a row (``pdf_blocks.LINE_GAP``)
NEAR_ROWS = 2.0  # a line this many sizes above or below a column's rows is beside it
LABEL_CHARS = 12  # no list's label ("1.", "iv)", a bullet) is longer
SAME_GRID = 0.01  # glyphs whose advances differ by at most this many sizes stand on a monospace grid

R = TypeVar("R", bound=Placed)


@dataclass(frozen=True)
class Start:
    """Where a cell may begin: object ``at`` of line ``line`` (0: the line begins there, after a
    gap that parted its row), the text before it spanning ``before`` (start, end)."""

    line: int
    at: int
    x: float
    right: float
    baseline: float
    size: float
    before: tuple[float, float]
    wide: bool
    glyph: bool = False  # the text before it one glyph: its line drawn glyph by glyph
    text: str = ""  # the object before it: its text


def part_columns(lines: Sequence[Sequence[R]], label: Callable[[str], bool]) -> list[Sequence[R]]:
    """Lines (each its objects, left to right) with each row of a borderless table parted into its
    cells; a list's item is no row: its text after a ``label`` ("1.", a bullet) is not a cell."""
    starts = _starts(lines, label)
    edges = _columns(lines, starts, right=False) + _columns(lines, starts, right=True)
    cuts: dict[int, set[int]] = {}
    rows: dict[int, bool] = {}  # whether a line is a row: none of its objects across an edge
    for _, edge in edges:
        for start in edge:
            if start.line not in rows:
                rows[start.line] = not _across(lines[start.line], edges, start.baseline)
            if start.at and rows[start.line]:
                cuts.setdefault(start.line, set()).add(start.at)
    for i, near in _beside(lines, edges).items():
        line = lines[i]
        if len(line) > 1 and (at := _straddled(line, near, label)) and not _across(line, edges, line[0].baseline):
            cuts.setdefault(i, set()).update(at)
    out: list[Sequence[R]] = []
    for i, line in enumerate(lines):
        at = [0, *sorted(cuts.get(i, ())), len(line)]
        out += [line[a:b] for a, b in zip(at, at[1:])] if i in cuts else [line]
    return out


def _starts(lines: Sequence[Sequence[Placed]], label: Callable[[str], bool]) -> list[Start]:
    """Every place a cell may begin: an object after a gap, its glyphs clear of the text before
    it (more than one character), and a line that begins right of another on its row."""
    # the lines by baseline: each line's row is looked up by bisection, the page's other rows unread
    rows = sorted((line[0].baseline, min(line[0].left, line[0].x), max(r.right for r in line)) for line in lines)
    bases = [base for base, _, _ in rows]
    out = []
    for i, line in enumerate(lines):
        first = line[0]
        start = min(first.left, first.x)
        near = (BESIDE + 0.1) * first.size  # wider than the row: the exact test below decides
        low, high = bisect.bisect_left(bases, first.baseline - near), bisect.bisect_right(bases, first.baseline + near)
        beside = [
            (right, left)
            for base, left, right in rows[low:high]
            if abs(base - first.baseline) < BESIDE * first.size
            and (abs(base - first.baseline) < SAME_ROW * first.size or start - right >= WIDE * first.size)
            and right <= start
        ]
        if beside:
            right, left = max(beside)
            out.append(Start(i, 0, first.x, first.right, first.baseline, first.size, (left, right), True))
        prefix = ""  # the line's text before the object, while short enough to be a list's label
        grid: bool | None = None  # whether the line's glyphs stand on a monospace grid, once asked
        for k, (before, run) in enumerate(zip(line, line[1:]), 1):
            prefix = (prefix + before.text)[:LABEL_CHARS]
            # one glyph before: inside a word drawn glyph by glyph, unless it is a cell ("7")
            # beginning its row's line (the next glyph not at its advance), or the word's last
            # glyph (PDFium's space after it) on no grid
            whole = len(before.text.strip()) > 1 or (k == 1 and bool(beside) and not in_word(before, run))
            glyph = not whole and before.text.endswith(" ") and bool(before.text.strip())
            if glyph:
                grid = _grid(line) if grid is None else grid
            clear = min(run.left, run.x) >= before.right and (whole or glyph and not grid)
            if clear and not label(prefix):
                span, text = (min(before.left, before.x), before.right), before.text.strip()
                out.append(Start(i, k, run.x, run.right, run.baseline, run.size, span, False, glyph, text))
    return out


def _grid(line: Sequence[Placed]) -> bool:
    """Whether the line is drawn glyph by glyph on a monospace grid: every glyph inside a word
    (one character, no space after it) advances as far as the others, where a proportional
    font's letters advance by their widths."""
    steps = [run.x - before.x for before, run in zip(line, line[1:]) if len(before.text) == 1]
    return len(steps) > 1 and max(steps) - min(steps) <= SAME_GRID * line[0].size


def _columns(lines: Sequence[Sequence[Placed]], starts: list[Start], right: bool) -> list[tuple[float, list[Start]]]:
    """The starts that make a column's edge, one list an edge: beginning (``right``: ending) at one
    x, on rows at most ``ROWS`` sizes apart, the texts before them not alike (or, right-aligned,
    the cells themselves beginning apart), and evidence beyond chance (see the module's docstring)."""
    near = RIGHT_X if right else SAME_X
    differ = _rights_align if right else _lefts_differ

    def key(start: Start) -> float:
        return start.right if right else start.x

    groups: list[list[Start]] = []
    # a word drawn glyph by glyph ends within ``RIGHT_X`` of another row's cell by chance: a
    # right-aligned column is read from cells a gap parted or drawn whole
    for start in sorted((s for s in starts if not (right and s.glyph)), key=key):
        if groups and key(start) - key(groups[-1][-1]) <= near * start.size:
            groups[-1].append(start)
        else:
            groups.append([start])
    chains = []
    for group in groups:
        group.sort(key=lambda s: s.baseline)
        chain: list[Start] = []
        for start in group:
            if chain and start.baseline - chain[-1].baseline > ROWS * start.size:
                chains.append(chain)
                chain = []
            chain.append(start)
        chains.append(chain)
    rows = [{round(s.baseline, 1) for s in chain} for chain in chains]
    found = [k for k, chain in enumerate(chains) if len(rows[k]) > 1 and differ(chain)]
    out = []
    for k in found:
        wide = any(s.wide for s in chains[k])
        if right and not wide:
            continue
        at = max(key(s) for s in chains[k])
        sharing = [j for j in found if j != k and len(rows[k] & rows[j]) > 1]
        # in rows drawn glyph by glyph a cell's words begin at one x wherever the widths before
        # them add up alike ("Rain in May", "New shop"): such an x is no edge where a word of
        # the table's other rows runs across it
        if all(s.glyph for s in chains[k]) and any(_in_word(lines[s.line], at) for j in sharing for s in chains[j]):
            continue
        if wide or len(rows[k]) > 2 or sharing:
            out.append((at, chains[k]))
    return out


def _in_word(line: Sequence[Placed], at: float) -> bool:
    """Whether ``at`` lies inside one of the line's words: inside an object, or between two with
    no space between (PDFium's, or ``WORD_GAP`` sizes)."""
    for before, run in zip(line, line[1:]):
        slack = ACROSS * run.size
        if min(before.left, before.x) + slack < at < before.right - slack:
            return True
        start = min(run.left, run.x)
        if before.right - slack <= at <= start + slack:
            return not (
                before.text.endswith(" ") or run.text.startswith(" ") or start - before.right >= WORD_GAP * run.size
            )
    last = line[-1]
    return min(last.left, last.x) + ACROSS * last.size < at < last.right - ACROSS * last.size


def _lefts_differ(chain: list[Start]) -> bool:
    """Whether the texts before the starts are not all alike (where they start and end, and, drawn
    whole, what they read): a column's first cells ("Tea", "Milk") begin at one x and may end
    within a hair of each other by chance, a paragraph's lines begin alike with one word ("The")."""
    first, size = chain[0], chain[0].size

    def alike(s: Start) -> bool:
        read = s.glyph or first.glyph or s.text == first.text
        return read and all(abs(a - b) <= ALIKE * size for a, b in zip(s.before, first.before))

    return not all(map(alike, chain))


def _rights_align(chain: list[Start]) -> bool:
    """Whether the objects ending at one x begin at different ones: right-aligned, not one column's texts alike."""
    return max(s.x for s in chain) - min(s.x for s in chain) > ALIKE * chain[0].size


def _beside(lines: Sequence[Sequence[Placed]], edges: list[tuple[float, list[Start]]]) -> dict[int, set[float]]:
    """The lines beside a column's rows, each with the edges it stands beside: at most a step from
    one of its rows (the smallest from one row to the next, and ``SAME_ROW`` sizes), as its
    header's row is; a paragraph between two tables whose columns line up stands further."""
    order = sorted(range(len(lines)), key=lambda i: lines[i][0].baseline)
    bases = [lines[i][0].baseline for i in order]
    out: dict[int, set[float]] = {}
    for at, edge in edges:
        rows = sorted({s.baseline for s in edge})
        step = min(b - a for a, b in zip(rows, rows[1:])) + SAME_ROW * edge[0].size
        for base in rows:
            for i in order[bisect.bisect_left(bases, base - step) : bisect.bisect_right(bases, base + step)]:
                out.setdefault(i, set()).add(at)
    return out


def _straddled(line: Sequence[Placed], near: set[float], label: Callable[[str], bool]) -> set[int]:
    """Where a row among a table's columns is parted though its cells begin at no column's edge
    (a browser's ``<th>``, centred in its column): before each object after a word's gap (PDFium's
    space, or ``WORD_GAP`` sizes) that an edge lies in; none where an edge lies between two glyphs
    of one word (a paragraph's, drawn glyph by glyph). A line across an edge (``_across``) is no row."""
    size = line[0].size
    slack = ACROSS * size
    cuts, prefix = set(), ""
    for k, (before, run) in enumerate(zip(line, line[1:]), 1):
        prefix = (prefix + before.text)[:LABEL_CHARS]
        start = min(run.left, run.x)
        if not any(before.right - slack <= at <= start + slack for at in near):
            continue
        if not (before.text.endswith(" ") or run.text.startswith(" ") or start - before.right >= WORD_GAP * size):
            return set()
        if not label(prefix):
            cuts.add(k)
    return cuts


def _across(line: Sequence[Placed], edges: list[tuple[float, list[Start]]], baseline: float) -> bool:
    """Whether an object of ``line`` reaches across the edge ``at`` of a column beside it: no table's row."""
    for at, edge in edges:
        near = NEAR_ROWS * edge[0].size
        if not edge[0].baseline - near <= baseline <= edge[-1].baseline + near:
            continue
        for run in line:
            slack = ACROSS * run.size
            if min(run.left, run.x) < at - slack and run.right > at + slack:
                return True
    return False
