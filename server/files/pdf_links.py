"""A PDF page's link annotations (a /Link with a /URI or an internal /Dest), moved with their
words (``pdf``): a link's area stays where the page put it while the translation is drawn in
other places, so a click would land on other words or on empty space.

Read: the characters of the page's text whose boxes' middles lie in a link's area (its
/QuadPoints, else its /Rect) mark a stretch of their block's text, widened to whole words
(``Block.links``), in each block they lie in: a link from the end of a paragraph into the list
item below it, or one rectangle over a heading and the line under it, marks words of both (each
block's row in the area is looked for where it lies, past a gap or another column's text). A
block with links is a :class:`~.run_placement.Unit` whose linked stretches are runs of their
own, each in its link's style, so the service places the translation's words on them as on a
.docx's styled runs: by the model's word alignments, else by proportion of words.
Written: a link's words are found on the lines drawn (the writer's pieces and their advances),
in every block it has words in, and its /Rect made the box around them, one quadrilateral a line
in its /QuadPoints where they take more than one line or the link had them (left over ones
repeat the last). Where its words in a block cannot be placed (none given to its run, a block
read right to left, text PDFium's characters do not match), it covers that block's lines instead;
where every block it has words in is translated as nothing, it is removed (``move``).

Work is bounded: ``MAX_AREAS`` link rectangles a page (the links past them stay where they
are), ``LOOKS`` characters looked at for them and ``PROBES`` searches for a block's row; a page
without links costs one call.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import replace

from .pdf_bidi import has_rtl
from .pdf_blocks import Block
from .pdf_paths import ASCENT, DESCENT, pdfium_c
from .pdf_room import Rect
from .run_placement import Placement, Unit

COVER = (-1, -1)  # a link's stretch of a block that is not known: it covers the block
MAX_AREAS = 500  # link rectangles read on a page (an index's page of links has a few hundred)
LOOKS = 50_000  # characters a page's links look at: a hostile page's links stop there
PROBES = MAX_AREAS  # searches a page for a block's row a link's first one missed (each through the page's text)


def areas(page: pdfium_c.FPDF_PAGE) -> dict[int, list[Rect]]:
    """The page's links by annotation index: the rectangles a click on them falls in (up to
    ``MAX_AREAS``; the links past them stay where they are)."""
    out: dict[int, list[Rect]] = {}
    quad, rect, left = pdfium_c.FS_QUADPOINTSF(), pdfium_c.FS_RECTF(), MAX_AREAS
    for k in range(pdfium_c.FPDFPage_GetAnnotCount(page)):
        annot = pdfium_c.FPDFPage_GetAnnot(page, k)
        try:
            if not annot or pdfium_c.FPDFAnnot_GetSubtype(annot) != pdfium_c.FPDF_ANNOT_LINK:
                continue
            found = []
            for n in range(min(pdfium_c.FPDFAnnot_CountAttachmentPoints(annot), left)):
                if pdfium_c.FPDFAnnot_GetAttachmentPoints(annot, n, quad):
                    found.append(_box((quad.x1, quad.x2, quad.x3, quad.x4), (quad.y1, quad.y2, quad.y3, quad.y4)))
            if not found and pdfium_c.FPDFAnnot_GetRect(annot, rect):
                found.append(_box((rect.left, rect.right), (rect.bottom, rect.top)))
            if found:
                out[k], left = found, left - len(found)
        finally:
            pdfium_c.FPDFPage_CloseAnnot(annot)
        if left <= 0:
            break
    return out


def _box(xs: tuple[float, ...], ys: tuple[float, ...]) -> Rect:
    return min(xs), min(ys), max(xs), max(ys)


def linked(page: pdfium_c.FPDF_PAGE, textpage: pdfium_c.FPDF_TEXTPAGE, blocks: list[Block]) -> list[Block]:
    """``blocks`` with the stretches of their text that the page's links cover (``Block.links``)."""
    links = areas(page)
    if not links:
        return blocks
    owners: dict[int, int] = {}  # a text object's handle -> its block, for the blocks under a link
    under: set[int] = set()
    chars: dict[tuple[int, int], list[int]] = {}  # (block, link) -> the text page's characters in its area
    looks = [LOOKS, PROBES]  # characters the page's links may still look at; searches for a block's row
    for k, rects in links.items():
        for rect in rects:
            touched = [n for n, b in enumerate(blocks) if b.left < rect[2] and rect[0] < b.right and _across(b, rect)]
            for n in touched:
                if n not in under:
                    under.add(n)
                    owners.update((_address(pdfium_c.FPDFPage_GetObject(page, i)), n) for i in blocks[n].objects)
            for index, n in _rows(textpage, rect, [blocks[n] for n in touched], touched, owners, looks):
                chars.setdefault((n, k), []).append(index)
    spans: dict[int, dict[int, tuple[int, int]]] = {}
    for (n, k), found in chars.items():
        spans.setdefault(n, {})[k] = _span(textpage, blocks[n], sorted(set(found)), owners)
    out = list(blocks)
    for n, found in spans.items():
        taken = sorted(s for s in found.values() if s != COVER)
        if any(a[1] > b[0] for a, b in zip(taken, taken[1:])):  # two links in one word: each covers the block
            found = dict.fromkeys(found, COVER)
        out[n] = replace(blocks[n], links=tuple((k, *s) for k, s in found.items()))
    return out


def _rows(
    textpage: pdfium_c.FPDF_TEXTPAGE,
    rect: Rect,
    blocks: list[Block],
    numbers: list[int],
    owners: dict[int, int],
    looks: list[int],
) -> list[tuple[int, int]]:
    """(character, block) for the text page's characters in ``rect`` of the ``blocks`` under it
    (numbered ``numbers``): the row PDFium finds at its left edge, then, for each block that row
    did not reach (one beyond a gap, or past another column's text in the page's order), the row
    from the first of its lines in ``rect`` (up to ``looks[1]`` such searches a page: each goes
    through the page's characters)."""
    half = (rect[3] - rect[1]) / 2
    found = _inside(textpage, rect, (min(rect[0] + half, (rect[0] + rect[2]) / 2), rect[1] + half, half), looks)
    out = [(i, owners.get(_address(pdfium_c.FPDFText_GetTextObject(textpage, i)), -1)) for i in found]
    reached = {n for _, n in out}
    for block, number in zip(blocks, numbers):
        probe = _probe(block, rect) if number not in reached and looks[1] > 0 else None
        if probe:
            looks[1] -= 1
            found = _inside(textpage, rect, probe, looks)
            out += [(i, owners.get(_address(pdfium_c.FPDFText_GetTextObject(textpage, i)), -1)) for i in found]
    return [(i, n) for i, n in out if n >= 0]


def _across(block: Block, rect: Rect) -> bool:
    return block.bottom < rect[3] and rect[1] < block.top


def _probe(block: Block, rect: Rect) -> tuple[float, float, float] | None:
    """Where to look for the block's characters in ``rect`` (x, y, tolerance): in the first of its
    lines whose letters' middle lies in it, at its left edge; None where none does."""
    step = block.leading * block.size or block.size
    middle = (ASCENT - DESCENT) / 2 * block.size  # a line's letters' middle above its baseline
    line = max(0, math.ceil((block.baseline + middle - rect[3]) / step))
    y = block.baseline + middle - line * step
    if line >= block.lines or y < rect[1]:
        return None
    left, right = max(rect[0], block.left), min(rect[2], block.right)
    return left + min(block.size / 2, (right - left) / 2), y, block.size


def _inside(
    textpage: pdfium_c.FPDF_TEXTPAGE, rect: Rect, probe: tuple[float, float, float], looks: list[int]
) -> list[int]:
    """The text page's characters other than spaces whose boxes' middles lie in ``rect``: from the
    one PDFium finds at ``probe`` (x, y and how far from it), back and on while they do (a link's
    words are in a row), as far as ``looks[0]`` characters looked at allow."""
    if looks[0] <= 0:
        return []
    left, bottom, right, top = rect
    x, y, near = probe
    k = pdfium_c.FPDFText_GetCharIndexAtPos(textpage, x, y, near, near)
    if k < 0:
        return []
    count, box = pdfium_c.FPDFText_CountChars(textpage), [ctypes.c_double() for _ in range(4)]

    def within(k: int) -> bool | None:  # None: a space, which neither starts nor ends the row
        looks[0] -= 1
        if looks[0] < 0:
            return False
        code = pdfium_c.FPDFText_GetUnicode(textpage, k)
        if code <= 32 or code == 0xFFFD or chr(code).isspace() or pdfium_c.FPDFText_IsGenerated(textpage, k):
            return None
        pdfium_c.FPDFText_GetCharBox(textpage, k, *box)
        x, y = (box[0].value + box[1].value) / 2, (box[2].value + box[3].value) / 2
        return left <= x <= right and bottom <= y <= top

    while k > 0 and within(k - 1) is not False:
        k -= 1
    out, missed = [], 0
    for j in range(k, count):
        hit = within(j)
        if hit:
            out.append(j)
        elif hit is False and (out or missed == 2):  # past the row, or a row not where PDFium found
            break
        elif hit is False:
            missed += 1
    return out if looks[0] >= 0 else []


def _span(textpage: pdfium_c.FPDF_TEXTPAGE, block: Block, found: list[int], owners: dict[int, int]) -> tuple[int, int]:
    """The stretch of ``block.text`` its characters ``found`` (text page indices) are, widened to
    whole words: where the block's text holds them once, or where the block's characters before
    them in the text page's order end; ``COVER`` where neither finds them (reordered right-to-left
    text, characters PDFium reads otherwise than the block does)."""
    text = block.text
    offsets = [i for i, ch in enumerate(text) if not ch.isspace()]
    bare = "".join(text[i] for i in offsets)
    linked = _text(textpage, found)
    at = bare.find(linked)
    if not linked or at < 0 or has_rtl(text):
        return COVER
    if bare.find(linked, at + 1) >= 0:  # more than once: counted from the block's start
        at = _before(textpage, found[0], owners)
        if bare[at : at + len(linked)] != linked:
            return COVER
    start, end = offsets[at], offsets[at + len(linked) - 1] + 1
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    while end < len(text) and not text[end].isspace():
        end += 1
    return start, end


def _before(textpage: pdfium_c.FPDF_TEXTPAGE, first: int, owners: dict[int, int]) -> int:
    """How many characters other than spaces of its block come before the text page's character
    ``first``, counted back until a character of another object (a block is read in its objects'
    order, which is the text page's where no other text is drawn between its lines)."""
    block, before = owners.get(_address(pdfium_c.FPDFText_GetTextObject(textpage, first))), 0
    for k in range(first - 1, -1, -1):
        code = pdfium_c.FPDFText_GetUnicode(textpage, k)
        if code <= 32 or chr(code).isspace() or 0xDC00 <= code < 0xE000 or pdfium_c.FPDFText_IsGenerated(textpage, k):
            continue
        if owners.get(_address(pdfium_c.FPDFText_GetTextObject(textpage, k))) != block:
            break
        before += 1
    return before


def _text(textpage: pdfium_c.FPDF_TEXTPAGE, found: list[int]) -> str:
    """The characters at ``found``, a character beyond U+FFFF from its two halves."""
    codes = [pdfium_c.FPDFText_GetUnicode(textpage, k) for k in found]
    return "".join(map(chr, codes)).encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _address(handle) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


def unit(block: Block) -> Unit:
    """The block's text as runs: each link's stretch one in the link's style, the text between plain."""
    text, runs, styles, at = block.text, [], [], 0
    for start, end, k in sorted((s, e, k) for k, s, e in block.links if (s, e) != COVER):
        if start > at:
            runs.append(text[at:start])
            styles.append("")
        runs.append(text[start:end])
        styles.append(f"link {k}")
        at = end
    if at < len(text) or not runs:
        runs.append(text[at:])
        styles.append("")
    return Unit(tuple(runs), ("",) * (len(runs) - 1), tuple(styles))


def words_of(block: Block, placement: Placement, translation: str) -> dict[int, range | None]:
    """Each of the block's links: the words of ``translation`` its run was given by ``placement``
    (on :func:`unit`'s runs); None where it was given none or its stretch is not known."""
    out: dict[int, range | None] = {k: None for k, *_ in block.links}
    runs, at = unit(block), 0
    for style, text in zip(runs.styles, placement(runs, translation)):
        count = len(text.split())
        if style and count:
            out[int(style.split()[1])] = range(at, at + count)
        at += count
    return out if at == len(translation.split()) else dict.fromkeys(out)


def rectangles(
    links: dict[int, range | None],
    lines: list[str],
    words: list[str],
    spaced: list[bool],
    widths: list[float],
    space: float,
    size: float,
    drawn: list[tuple[float, float, Rect]],
) -> list[tuple[int, Rect]]:
    """(link, rectangle) for each line a link's words were drawn on: ``lines`` of ``words``, the
    pieces ``pdf.pieces`` made (``spaced`` marking each word's first), each line drawn with its
    origin at (x, baseline) and in the bounds ``drawn`` holds, at ``size``. A link without words
    covers every line; a line with right-to-left letters, drawn in visual order, the whole line."""
    firsts = [j for j, gap in enumerate(spaced) if gap]  # the first piece of each word
    ranges, at = [], 0
    for line in lines:  # the pieces on each line, as ``pdf._wrap`` joined them
        begin, length = at, 0
        while at < len(words) and length < len(line):
            length += (at > begin and spaced[at]) + len(words[at])
            at += 1
        ranges.append(range(begin, at))
    out: list[tuple[int, Rect]] = []
    for k, span in links.items():
        if span is None or span.stop > len(firsts) or at != len(words):
            out += [(k, bounds) for _, _, bounds in drawn]
            continue
        pieces = range(firsts[span.start], firsts[span.stop] if span.stop < len(firsts) else len(words))
        for line, on, (x, baseline, bounds) in zip(lines, ranges, drawn):
            inside = range(max(on.start, pieces.start), min(on.stop, pieces.stop))
            if not inside:
                continue
            bottom, top = min(bounds[1], baseline - DESCENT * size), max(bounds[3], baseline + ASCENT * size)
            if has_rtl(line):
                out.append((k, (bounds[0], bottom, bounds[2], top)))
                continue
            at, left = 0.0, 0.0
            for j in range(on.start, inside.stop):
                at += space if spaced[j] and j > on.start else 0.0
                left = at if j == inside.start else left
                at += widths[j]
            out.append((k, (x + left * size, bottom, x + at * size, top)))
    return out


def move(page: pdfium_c.FPDF_PAGE, rects: dict[int, list[Rect]], read: set[int]) -> None:
    """Each link's /Rect made the box around its ``rects`` (one a line), and its /QuadPoints
    those rectangles where they are more than one or it had them. A link of ``read`` (one whose
    words were read in the page's blocks) that got no rectangle, every block it had words in
    translated as nothing, is removed: its words are gone from the page, so kept where they were
    or moved over its blocks' boxes it would be a blank area that leads somewhere when clicked,
    nothing on the page showing that it is there or where it goes."""
    for k, found in rects.items():
        annot = pdfium_c.FPDFPage_GetAnnot(page, k)
        if not annot:
            continue
        try:
            left, bottom = min(r[0] for r in found), min(r[1] for r in found)
            right, top = max(r[2] for r in found), max(r[3] for r in found)
            pdfium_c.FPDFAnnot_SetRect(annot, pdfium_c.FS_RECTF(left, top, right, bottom))
            had = pdfium_c.FPDFAnnot_CountAttachmentPoints(annot)
            if len(found) < 2 and not had:
                continue
            for n in range(max(had, len(found))):
                l, b, r, t = found[min(n, len(found) - 1)]  # left over quadrilaterals repeat the last
                quad = pdfium_c.FS_QUADPOINTSF(l, t, r, t, l, b, r, b)
                if n < had:
                    pdfium_c.FPDFAnnot_SetAttachmentPoints(annot, n, quad)
                else:
                    pdfium_c.FPDFAnnot_AppendAttachmentPoints(annot, quad)
        finally:
            pdfium_c.FPDFPage_CloseAnnot(annot)
    # after the moves, the last first: removing a link renumbers those after it
    for k in sorted(read - rects.keys(), reverse=True):
        pdfium_c.FPDFPage_RemoveAnnot(page, k)
