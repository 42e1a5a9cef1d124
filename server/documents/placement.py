"""Inline markup placed in a translation by word alignment (issue 34).

An inline element (``<b>``, ``<i>``, ``<a href>``, ``<span>``, markdown's ``*emphasis*`` and
``[link text](url)``) wraps some words of a sentence. The translation reorders words, so the
markup goes around the target words aligned to the words it wrapped, wherever they landed:
``"Monday, <i>March</i> 3, 2025"`` -> ``"Montag, 3. <i>März</i> 2025"``. An element's source
words are those its characters overlap; its target words run from the first to the last
target word linked to any of them (so words between come inside it, and the comma of
``"Montag,"``, a word outside it, stays outside). An element none of whose words is linked
goes around nothing, where its first source word's neighbourhood maps (its place in the
sentence scaled to the translation); one whose other tag lies outside the sentence (it runs
past the sentence's end, or began before it) covers none of it: it ends at the start, or
begins at the end. Void markup (``<br>``, ``<img>``, a comment, a code span)
sits before the target word aligned to the source word that followed it.

Keeping the markup nested compares each element with those placed before it: elements squared.
A sentence with more than ``MAX_PLACED_ELEMENTS`` (``<b></b>`` 4,000 times in one sentence took
20 s) is rendered as one without an alignment (:meth:`Segment.render`): its opening markup
before the translation, its closing markup after.

The words each element covers are :func:`covered_ranges`'s, which a file's styled runs are
placed by too (``files.placement.place_aligned``): one placement for html, markdown, .docx,
.odt, .pptx and EPUB.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_PUNCTUATION = frozenset(",.;:!?")
MAX_PLACED_ELEMENTS = 128  # inline elements of one sentence placed by alignment (a real sentence has a few)


@dataclass(frozen=True)
class InlineElement:
    """Markup around plain characters ``start:end`` of a sentence (``start == end``: void markup)."""

    start: int
    end: int
    open: str  # the markup as sent (an opening tag, a void element, ``**``, ``[``)
    close: str = ""  # its closing markup ("" for void markup)


def _words_in(spans: Sequence[tuple[int, int]], start: int, end: int) -> list[int]:
    if start == end:  # void markup: the word it stands before
        starts = [s for s, _ in spans]
        i = bisect.bisect_left(starts, start)
        return [i] if i < len(spans) else []
    return [i for i, (s, e) in enumerate(spans) if s < end and e > start]


def covered_ranges(
    stretch_of_word: Sequence[int | None], links: Sequence[tuple[int, int]], stretches: int
) -> list[tuple[int, int] | None]:
    """The target words each styled stretch covers, for every format (an html or markdown inline
    element, a run of a .docx, .odt or .pptx paragraph): from the first to the last target word
    linked to any of its source words, ends included (words between come inside it); None where
    none of its words is linked. ``stretch_of_word[i]``: the stretch of source word i, or None.
    Linear in links + stretches."""
    out: list[tuple[int, int] | None] = [None] * stretches
    for i, j in links:
        k = stretch_of_word[i] if 0 <= i < len(stretch_of_word) else None
        if k is None:
            continue
        now = out[k]
        out[k] = (j, j) if now is None else (min(now[0], j), max(now[1], j))
    return out


def covering(ranges: Sequence[tuple[int, int] | None], words: int) -> list[int | None]:
    """For every target word: the stretch whose range (:func:`covered_ranges`) covers it, the
    narrowest where ranges overlap (the innermost element), the earliest of equal ones; None
    where no stretch covers it (text outside every element)."""
    out: list[int | None] = [None] * words
    order = sorted((r[1] - r[0], k) for k, r in enumerate(ranges) if r is not None)
    for _, k in reversed(order):  # widest first: narrower ones overwrite them
        first, last = ranges[k]  # type: ignore[misc]
        out[first : min(last + 1, words)] = [k] * max(0, min(last + 1, words) - first)
    return out


def target_range(
    element: InlineElement,
    links: Sequence[tuple[int, int]],
    source_spans: Sequence[tuple[int, int]],
    target_spans: Sequence[tuple[int, int]],
) -> tuple[int, int]:
    """(start, end) character offsets in the translation for ``element``'s markup."""
    words = set(_words_in(source_spans, element.start, element.end))
    (covered,) = covered_ranges([0 if i in words else None for i in range(len(source_spans))], links, 1)
    if element.start == element.end:  # void: before the first target word of the following source word
        if covered is not None:
            at = target_spans[covered[0]][0]
        elif words:
            at = _scaled(min(words), source_spans, target_spans, start=True)
        else:
            at = target_spans[-1][1] if target_spans else 0
        return at, at
    if covered is not None:
        return target_spans[covered[0]][0], target_spans[covered[1]][1]
    if not element.open or not element.close:  # its other tag is outside the sentence: it covers none of it
        at = target_spans[-1][1] if target_spans and element.open else 0
        return at, at
    at = _scaled(min(words), source_spans, target_spans, start=True) if words else 0
    return at, at


def _scaled(
    word: int, source_spans: Sequence[tuple[int, int]], target_spans: Sequence[tuple[int, int]], start: bool
) -> int:
    if not target_spans:
        return 0
    j = min(len(target_spans) - 1, round(word * len(target_spans) / max(1, len(source_spans))))
    return target_spans[j][0] if start else target_spans[j][1]


def _trimmed(element: InlineElement, span: tuple[int, int], translation: str, source: str) -> tuple[int, int]:
    """Punctuation ending the element's last target word stays outside ("<a>Friday</a>," ->
    "<a>Freitag</a>,") unless the element's source text ended with punctuation too."""
    start, end = span
    outside = not source or source[element.end - 1 : element.end] not in _PUNCTUATION
    if element.end > element.start and outside and end - 1 > start and translation[end - 1] in _PUNCTUATION:
        end -= 1
    return start, end


def _nested(
    elements: Sequence[InlineElement], ranges: list[tuple[int, int]], translation: str
) -> list[tuple[int, int]]:
    """Target ranges adjusted so the markup nests: widest source elements first, each inside the
    innermost element that contains it in the source, and after any earlier one it would cross."""
    order = sorted(range(len(elements)), key=lambda k: (elements[k].start, -(elements[k].end - elements[k].start), k))
    out = list(ranges)
    placed: list[int] = []
    for k in order:
        e, (start, end) = elements[k], out[k]
        for p in placed:
            q, (ps, pe) = elements[p], out[p]
            if q.start <= e.start and e.end <= q.end:  # inside q in the source: inside it here too
                start, end = min(max(start, ps), pe), max(min(end, pe), ps)
            elif start < pe and end > ps and not (ps <= start and end <= pe) and not (start <= ps and pe <= end):
                start = min(max(start, pe), end)  # crossing a sibling: begin at the word after it
                while start < end and translation[start].isspace():
                    start += 1
        out[k] = (start, max(start, end))
        placed.append(k)
    return out


def place_markup(
    translation: str,
    elements: Sequence[InlineElement],
    links: Sequence[tuple[int, int]],
    source_spans: Sequence[tuple[int, int]],
    target_spans: Sequence[tuple[int, int]],
    escape: Callable[[str], str] = lambda text: text,
    source: str = "",
) -> str:
    """``translation`` (escaped by ``escape``) with every element's markup around its target words;
    punctuation ending its last target word stays outside unless the element's ``source`` text
    ended with punctuation too.

    The markup stays well formed: an element nested in another in the source is kept inside it,
    one that would cross an earlier sibling starts where that one ends; at one offset closing
    markup comes first (innermost first), then void markup, then opening markup (outermost
    first)."""
    ranges = [_trimmed(e, target_range(e, links, source_spans, target_spans), translation, source) for e in elements]
    ranges = _nested(elements, ranges, translation)
    inserts: list[tuple[int, int, int, str]] = []  # (offset, order, tie, markup)
    for k, (element, (start, end)) in enumerate(zip(elements, ranges)):
        if element.start == element.end or start == end:  # void, or nothing to wrap: its markup in one piece
            markup = element.open + element.close
            spaced = element.start == element.end and element.start < len(source) and source[element.start].isspace()
            inserts.append((start, 1, k, markup + " " if spaced and start < len(translation) else markup))
            continue
        width = element.end - element.start
        inserts.append((start, 2, -width * 10_000 + k, element.open))  # wider elements open first
        inserts.append((end, 0, width * 10_000 - k, element.close))  # narrower ones close first
    inserts.sort()
    out, at = [], 0
    for offset, _, _, markup in inserts:
        out += (escape(translation[at:offset]), markup)
        at = offset
    out.append(escape(translation[at:]))
    return "".join(out)
