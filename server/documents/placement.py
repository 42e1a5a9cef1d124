"""Inline markup placed in a translation by word alignment.

An inline element (``<b>``, ``<i>``, ``<a href>``, ``<span>``, markdown's ``*emphasis*`` and
``[link text](url)``) wraps some words of a sentence. The translation reorders words, so the
markup goes around the target words aligned to the words it wrapped, wherever they landed:
``"Monday, <i>March</i> 3, 2025"`` -> ``"Montag, 3. <i>März</i> 2025"``. An element's source
words are those its characters overlap; its target words run from the first to the last
target word linked to any of them (so words between come inside it, and the comma of
``"Montag,"``, a word outside it, stays outside). An element none of whose words is linked
goes around the target word where its first source word's neighbourhood maps (its place in the
sentence scaled to the translation), never around nothing. Void markup (``<br>``, ``<img>``, a
comment, a code span) sits before the target word aligned to the source word that followed it,
set off by spaces as in the source. Where nesting would leave an element around nothing, every
element goes around the whole translation (:func:`wrap_whole`).

Keeping the markup nested compares each element with those placed before it: elements squared.
A sentence with more than ``MAX_PLACED_ELEMENTS`` (``<b></b>`` 4,000 times in one sentence took
20 s) gets every element around the whole translation (:func:`wrap_whole`), as without an alignment.

The words each element covers are :func:`covered_ranges`'s, and an unlinked one's word is
:func:`scaled_word`'s; a file's styled runs are placed by both too
(``service.run_alignment.preferences``, ``files.run_placement.place_aligned``): one placement for
html, markdown, .docx, .odt, .pptx and EPUB.
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
    if not target_spans:
        return 0, 0
    # none of its words linked: around the word where its first one's neighbourhood maps, never
    # around nothing (an empty "****" or "[](target)")
    j = scaled_word(min(words), len(source_spans), len(target_spans)) if words else 0
    return target_spans[j]


def scaled_word(word: int, source_words: int, target_words: int) -> int:
    """The target word where source word ``word``'s neighbourhood maps (its place in the sentence
    scaled to the translation): where a stretch none of whose words is linked goes."""
    return min(target_words - 1, round(word * target_words / max(1, source_words)))


def _scaled(
    word: int, source_spans: Sequence[tuple[int, int]], target_spans: Sequence[tuple[int, int]], start: bool
) -> int:
    if not target_spans:
        return 0
    j = scaled_word(word, len(source_spans), len(target_spans))
    return target_spans[j][0] if start else target_spans[j][1]


def wrap_whole(translation: str, elements: Sequence[InlineElement], escape: Callable[[str], str]) -> str:
    """Every element's markup around the whole translation, nested as listed (void markup first,
    each followed by a space): where there is no alignment, or it cannot place every element
    around a word. Markup closing an element opened before the sentence comes after it, then
    markup opening one closed after it (as in the source, where the one closes before the other
    opens)."""
    void = [e for e in elements if e.open and not e.close and e.start == e.end]
    whole = [e for e in elements if e.open and e.close]
    opening = "".join(e.open + " " for e in void) + "".join(e.open for e in whole)
    closing = "".join(e.close for e in reversed(whole))
    left = [e for e in elements if not e.open]
    right = [e for e in elements if e.open and not e.close and e.start != e.end]
    partial = "".join(e.close for e in left) + "".join(e.open for e in right)
    return opening + escape(translation) + closing + partial


def _trimmed(element: InlineElement, span: tuple[int, int], translation: str, source: str) -> tuple[int, int]:
    """Punctuation ending the element's last target word stays outside ("<a>Friday</a>," ->
    "<a>Freitag</a>,") unless the element's source text ended with punctuation too."""
    start, end = span
    outside = not source or source[element.end - 1 : element.end] not in _PUNCTUATION
    punctuation = end - 1 > start and translation[end - 1] in _PUNCTUATION
    if element.end > element.start and outside and punctuation and not translation[end - 2].isspace():
        end -= 1
    return start, end


_BEFORE, _AFTER = -1, 1 << 30  # where markup opened before the sentence, or closing after it, reaches


def _extent(element: InlineElement) -> tuple[int, int]:
    """The element's source characters; one opened before the sentence (no opening markup here)
    reaches before its start, one closed after it (no closing markup here) past its end."""
    return (_BEFORE if not element.open else element.start), (_AFTER if not element.close else element.end)


def _inside(e: InlineElement, q: InlineElement) -> bool:
    (es, ee), (qs, qe) = _extent(e), _extent(q)
    return qs <= es and ee <= qe


def _nested(
    elements: Sequence[InlineElement], ranges: list[tuple[int, int]], translation: str
) -> list[tuple[int, int]]:
    """Target ranges adjusted so the markup nests: widest source elements first, each inside the
    innermost element that contains it in the source, and after any earlier one it would cross.
    Two whole elements may nest either way round where their words land together; one opened
    before the sentence or closed after it holds only what it held in the source."""
    order = sorted(range(len(elements)), key=lambda k: (_extent(elements[k])[0], -_width(elements[k]), k))
    out = list(ranges)
    placed: list[int] = []
    for k in order:
        e, (start, end) = elements[k], out[k]
        if not e.open:
            start = 0
        if not e.close:
            end = len(translation)
        for p in placed:
            q, (ps, pe) = elements[p], out[p]
            whole = all(x.open and x.close for x in (e, q))
            if _inside(e, q):  # inside q in the source: inside it here too
                start, end = min(max(start, ps), pe), max(min(end, pe), ps)
            elif (
                start < pe and end > ps and not (whole and ((ps <= start and end <= pe) or (start <= ps and pe <= end)))
            ):
                start = min(max(start, pe), end)  # crossing a sibling: begin at the word after it
                while 0 < start < end and not translation[start - 1].isspace():  # not inside its last word
                    start += 1
                while start < end and translation[start].isspace():
                    start += 1
        out[k] = (start, max(start, end))
        placed.append(k)
    return out


def _width(element: InlineElement) -> int:
    start, end = _extent(element)
    return end - start


def _spaced(markup: str, at: int, source: str, start: int, translation: str) -> str:
    """Void markup placed at ``start`` of the translation, set off by spaces as it was in the
    source from what follows and precedes it: a code span that ended a sentence ("with `x`.")
    and lands before a word is not glued to it, nor one placed after the last word."""
    after = source[at] if at < len(source) else ""
    before = source[at - 1] if at > 0 else " "
    if start < len(translation) and (after.isspace() or (translation[start].isalnum() and not after.isalnum())):
        markup += " "
    if start > 0 and not translation[start - 1].isspace() and before.isspace():
        markup = " " + markup
    return markup


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
    one that would cross an earlier sibling starts where that one ends (all of them around the
    whole translation where that leaves one around nothing); at one offset closing markup comes
    first (innermost first), then void markup, then opening markup (outermost first)."""
    if len(elements) > MAX_PLACED_ELEMENTS:  # keeping them nested compares each with those before: elements squared
        return wrap_whole(translation, elements, escape)
    ranges = [_trimmed(e, target_range(e, links, source_spans, target_spans), translation, source) for e in elements]
    ranges = _nested(elements, ranges, translation)
    if any(e.start != e.end and start == end for e, (start, end) in zip(elements, ranges)) and target_spans:
        return wrap_whole(translation, elements, escape)  # nesting left one around nothing
    inserts: list[tuple[int, int, tuple[int, ...], str]] = []  # (offset, order, tie, markup)
    for k, (element, (start, end)) in enumerate(zip(elements, ranges)):
        if element.start == element.end or start == end:  # void, or nothing to wrap: its markup in one piece
            markup = element.open + element.close
            if element.start == element.end:
                markup = _spaced(markup, element.start, source, start, translation)
            inserts.append((start, 1, (k,), markup))
            continue
        width = _width(element)
        # at one offset the element reaching further opens first and the one opened later closes
        # first (so they nest); equal ranges: the wider source element outside
        inserts.append((start, 2, (-end, -width, k), element.open))
        inserts.append((end, 0, (-start, width, -k), element.close))
    inserts.sort()
    out, at, void_at = [], 0, None
    for offset, order, _, markup in inserts:
        if order == 1 and void_at == offset and not out[-1].endswith(" ") and not markup.startswith(" "):
            markup = " " + markup  # two code spans placed together stay two, not one glued pair
        out += (escape(translation[at:offset]), markup)
        at, void_at = offset, offset if order == 1 else None
    out.append(escape(translation[at:]))
    return "".join(out)
