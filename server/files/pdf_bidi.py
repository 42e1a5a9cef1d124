"""A PDF line's right-to-left text in the order it is read, from the order it is drawn.

Browsers, word processors and PDF libraries write Hebrew and Arabic in visual order: the glyphs
left to right as they stand on the page, so a Hebrew word's letters come last letter first.
PDFium's text page does not reorder them reliably (a browser's glyph-by-glyph objects come out
partly reversed), so a line is reordered here from its characters' bidirectional classes
(``unicodedata.bidirectional``), the Unicode bidi algorithm's levels in the simplified form that
maps visual order back to logical: right-to-left letters are level 1; left-to-right words and
numbers inside right-to-left text level 2 (they read left to right); a number's separators
(``2.5``, ``1,500``) and signs (``5%``) belong to it; spaces and punctuation take the direction of
the text on both sides, else the paragraph's; a pair of brackets one direction, by what stands
inside and before it (the algorithm's rule N0, ``_paired``). Reversing the runs at each level, highest first,
is the algorithm's own reordering, which is its own inverse for the same levels. A mirrored
character in right-to-left text (a parenthesis) is drawn as its mirror image and swapped back.
Where two readings draw the same glyphs (a number between a Hebrew and an English word), the
one read is one of them.

A translation is drawn the other way (``visual``): a line, broken in reading order, is put in the
order its glyphs stand left to right by the same reordering, its own inverse, a parenthesis in
right-to-left text mirrored. PDFium draws each character's own glyph, so Arabic letters are first
put in the joined form each takes between its neighbours (``joined``: arabic-reshaper's
presentation forms).
"""

from __future__ import annotations

import re
import unicodedata

import arabic_reshaper

RTL = frozenset({"R", "AL"})
NUMBER = frozenset({"EN", "AN"})
SEPARATOR = frozenset({"CS", "ES"})
MIRROR = dict(zip("()[]{}<>«»‹›", ")(][}{><»«›‹"))
PAIRED = dict(zip("([{", ")]}"))  # the bidi algorithm's paired brackets (ASCII's)
OPENING, CLOSING = frozenset(PAIRED), frozenset(PAIRED.values())
MAX_DEPTH = 63  # the algorithm's bracket stack: pairs nested deeper are not paired


FIRST_RTL = "\u0590"  # no character before Hebrew's block is right to left
PAST_RTL = re.compile(f"[{FIRST_RTL}-\U0010ffff]")


def has_rtl(text: str) -> bool:
    # most text (Latin, with its accents) holds no character past U+0590, and little (a euro
    # sign, a curly quote) holds many: those few are found at C speed and looked up
    return any(unicodedata.bidirectional(ch) in RTL for ch in PAST_RTL.findall(text))


def right_to_left(text: str) -> bool:
    """Whether a paragraph reads right to left: it has more right-to-left letters than left-to-right ones."""
    if not has_rtl(text):
        return False
    kinds = [unicodedata.bidirectional(ch) for ch in text]
    rtl = sum(k in RTL for k in kinds)
    return rtl > 0 and rtl >= kinds.count("L")


def _classes(text: str) -> list[str]:
    """Each character as R, L, N (a number, with its separators and signs) or a neutral (its class)."""
    kinds = [unicodedata.bidirectional(ch) for ch in text]
    out = ["R" if k in RTL else "N" if k in NUMBER else k for k in kinds]
    for i in range(1, len(out) - 1):
        if out[i] in SEPARATOR and out[i - 1] == out[i + 1] == "N":
            out[i] = "N"
    for order in (range(len(out)), range(len(out) - 1, -1, -1)):  # a unit's sign on either side: 5%, $5
        after_number = False
        for i in order:
            if out[i] == "ET" and after_number:
                out[i] = "N"
            after_number = out[i] == "N"
    return out


def _paired(text: str, kinds: list[str], rtl: bool) -> list[str]:
    """``kinds`` with each pair of brackets given one direction, as the bidi algorithm's rule N0
    has it: the paragraph's where that direction's letters (a number: right to left) stand inside,
    else the other where only its letters stand inside and before the pair ("Python (3.12)" in
    Hebrew keeps with its word), else the paragraph's; neither where nothing strong stands inside.
    Without it a bracket took the direction on both its sides, so "abc (def)" in a Hebrew line
    was drawn "(abc (def"."""
    pairs, stack = [], []
    for i, ch in enumerate(text):
        if ch in OPENING and len(stack) < MAX_DEPTH:
            stack.append((PAIRED[ch], i))
        elif ch in CLOSING and (k := next((k for k in range(len(stack) - 1, -1, -1) if stack[k][0] == ch), -1)) >= 0:
            pairs.append((stack[k][1], i))
            del stack[k:]
    out, edge = list(kinds), "R" if rtl else "L"
    acting, last = [], edge  # a number acts as the letters before it ("abc (1)" keeps together)
    for k in kinds:
        last = k if k in ("R", "L") else last
        acting.append(last if k == "N" else k)
    for start, end in sorted(pairs):
        inside = {k for k in acting[start + 1 : end] if k in ("R", "L")}
        if not inside:
            continue
        before = next((k for k in reversed(acting[:start]) if k in ("R", "L")), edge)
        out[start] = out[end] = acting[start] = acting[end] = edge if edge in inside or before == edge else before
    return out


def _nearest(kinds: list[str], keep: frozenset[str], edge: str) -> tuple[list[str], list[str]]:
    """For each position, the nearest class in ``keep`` to its left and to its right (``edge`` past the ends)."""
    left, right = [edge] * len(kinds), [edge] * len(kinds)
    seen = edge
    for i, k in enumerate(kinds):
        left[i] = seen
        seen = k if k in keep else seen
    seen = edge
    for i in range(len(kinds) - 1, -1, -1):
        right[i] = seen
        seen = kinds[i] if kinds[i] in keep else seen
    return left, right


def _number(left: str) -> str:
    """The direction a number acts in: that of the nearest letter before it (the paragraph's at
    its start), as the bidi algorithm's rules W7 and N1 have it: "Python 3" is one left-to-right
    run, a number after a Hebrew word reads as right-to-left context."""
    return left


def _levels(kinds: list[str], rtl: bool) -> list[int]:
    edge = "R" if rtl else "L"
    left, right = _nearest(kinds, frozenset("RL"), edge)
    # a number is level 2 in right-to-left text, and in left-to-right text after a right-to-left word
    acting = [_number(left[i]) if k == "N" else k for i, k in enumerate(kinds)]
    left, right = _nearest(acting, frozenset("RL"), edge)
    levels = []
    for i, (k, a) in enumerate(zip(kinds, acting)):
        if k == "N":
            levels.append(2 if rtl or a == "R" else 0)
            continue
        if a not in ("R", "L"):  # a neutral: the direction on both sides, else the paragraph's
            a = left[i] if left[i] == right[i] else edge
        levels.append(1 if a == "R" else 2 if rtl else 0)
    return levels


def logical(visual: str, rtl: bool) -> str:
    """``visual`` (a line's characters left to right) in reading order; ``rtl``: the paragraph's direction."""
    if not has_rtl(visual):
        return visual
    levels = _levels(_paired(visual, _classes(visual), rtl), rtl)
    chars = [MIRROR.get(ch, ch) if level % 2 else ch for ch, level in zip(visual, levels)]
    for level in range(max(levels), 0, -1):
        i = 0
        while i < len(chars):
            if levels[i] < level:
                i += 1
                continue
            j = i
            while j < len(chars) and levels[j] >= level:
                j += 1
            chars[i:j] = chars[i:j][::-1]
            levels[i:j] = levels[i:j][::-1]
            i = j
    return "".join(chars)


# the letters' joined forms, and lam with alef as the one glyph it must be (arabic-reshaper's
# default); not its word ligature of Allah (U+FDF2), which the fonts drawn in lack
_RESHAPER = arabic_reshaper.ArabicReshaper({"ARABIC LIGATURE ALLAH": False, "delete_harakat": False})


def joined(text: str) -> str:
    """``text`` with its Arabic letters in their contextual presentation forms, in reading order."""
    if not has_rtl(text):
        return text
    return _RESHAPER.reshape(text)


def visual(line: str, rtl: bool) -> str:
    """A line (in reading order) as its glyphs stand left to right; ``rtl``: the paragraph's direction."""
    if not rtl and not has_rtl(line):
        return line
    return logical(line, rtl)
