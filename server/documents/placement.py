"""Inline markup placed in a translation by word alignment (issue 34).

An inline element (``<b>``, ``<i>``, ``<a href>``, ``<span>``, markdown's ``*emphasis*`` and
``[link text](url)``) wraps some words of a sentence. The translation reorders words, so the
markup goes around the target words aligned to the words it wrapped, wherever they landed:
``"Monday, <i>March</i> 3, 2025"`` -> ``"Montag, 3. <i>März</i> 2025"``. An element's source
words are those its characters overlap; its target words run from the first to the last
target word linked to any of them (so words between come inside it, and the comma of
``"Montag,"``, a word outside it, stays outside). An element none of whose words is linked
goes around nothing, where its first source word's neighbourhood maps (its place in the
sentence scaled to the translation). Void markup (``<br>``, ``<img>``, a comment, a code span)
sits before the target word aligned to the source word that followed it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_PUNCTUATION = frozenset(",.;:!?")


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


def target_range(
    element: InlineElement,
    links: Sequence[tuple[int, int]],
    source_spans: Sequence[tuple[int, int]],
    target_spans: Sequence[tuple[int, int]],
) -> tuple[int, int]:
    """(start, end) character offsets in the translation for ``element``'s markup."""
    words = set(_words_in(source_spans, element.start, element.end))
    targets = sorted(j for i, j in links if i in words)
    if element.start == element.end:  # void: before the first target word of the following source word
        if targets:
            at = target_spans[targets[0]][0]
        elif words:
            at = _scaled(min(words), source_spans, target_spans, start=True)
        else:
            at = target_spans[-1][1] if target_spans else 0
        return at, at
    if targets:
        return target_spans[targets[0]][0], target_spans[targets[-1]][1]
    at = _scaled(min(words), source_spans, target_spans, start=True) if words else 0
    return at, at


def _scaled(
    word: int, source_spans: Sequence[tuple[int, int]], target_spans: Sequence[tuple[int, int]], start: bool
) -> int:
    if not target_spans:
        return 0
    j = min(len(target_spans) - 1, round(word * len(target_spans) / max(1, len(source_spans))))
    return target_spans[j][0] if start else target_spans[j][1]


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

    Markup at the same offset keeps a well-formed nesting: closing markup first (innermost
    first), then opening markup (outermost first), then void markup in source order."""
    inserts: list[tuple[int, int, int, str]] = []  # (offset, order, tie, markup)
    for k, element in enumerate(elements):
        start, end = target_range(element, links, source_spans, target_spans)
        outside = not source or source[element.end - 1 : element.end] not in _PUNCTUATION
        if (
            outside and end - 1 > start and translation[end - 1] in _PUNCTUATION
        ):  # "<a>Friday</a>," -> "<a>Freitag</a>,"
            end -= 1
        if element.start == element.end:  # void, or an empty element: its markup as one piece
            markup = element.open + element.close
            spaced = element.start < len(source) and source[element.start].isspace()  # a word of its own (code)
            inserts.append((start, 2, k, markup + " " if spaced and start < len(translation) else markup))
            continue
        width = element.end - element.start
        inserts.append((start, 1, -width * 10_000 + k, element.open))  # wider elements open first
        inserts.append((end, 0, width * 10_000 - k, element.close))  # narrower ones close first
    inserts.sort()
    out, at = [], 0
    for offset, _, _, markup in inserts:
        out += (escape(translation[at:offset]), markup)
        at = offset
    out.append(escape(translation[at:]))
    return "".join(out)
