"""What keeps a markup document's structure whatever the model answers (structure first).

A translation is model output: it may be empty, repeat itself, hold newlines, or hold characters
that are markup in the document's format (``*``, a backtick, ``[``, ``- `` at a line's start).
Three guards stand between it and the document:

- **Line breaks.** A sentence of a markdown paragraph or an html text may wrap over several lines
  (``with **the whole\\nsuite**``); the model translates it as one line. The source's breaks,
  spelled as sent (``"\\n"``, ``"\\n> "`` in a block quote, ``"  \\n"`` for a hard break), go back
  into the translation at the spaces nearest their relative places (:func:`break_places`), so a
  document of 168 lines comes back with 168. Newlines the model writes become spaces.
- **Markdown's specials** in the translation are backslash-escaped (:func:`escape_markdown`): a
  ``*`` or a backtick the model writes is shown as written, never read as emphasis or a code span
  that would swallow the document's own; at a line's start ``#``, ``>``, ``-``, ``+``, ``=`` and
  ``1.`` are escaped too (:func:`escape_line_start`), so no heading, quote or list appears.
  CommonMark shows an escaped ASCII punctuation character as the character (spec § 2.4).
- **Nothing to show.** A translation without a letter or a digit (empty, only markup-like
  characters) of a sentence that had some is not used: the sentence comes back as sent, its
  markup whole, rather than as ``****`` or ``[](target)``.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

# Line breaks a translation may hold (str.splitlines' set), each one character -> one space, so
# offsets into the translation (word alignments) stay valid.
_LINE_BREAKS_TO_SPACES = str.maketrans({ch: " " for ch in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"})
# Where a source line break goes in a translation while its markup is placed: a whitespace
# character (markup placement treats it as the space it replaced) that no translation holds once
# its own line breaks are spaces.
BREAK = "\u2028"
_MARKDOWN_SPECIALS = frozenset("\\`*_[]<>~|")
_ENTITY = re.compile(r"&(?:#[xX][0-9a-fA-F]+|#[0-9]+|[a-zA-Z][a-zA-Z0-9]*);")
# What a line may start with before its text and still be a block's start: indentation, block
# quote markers, list markers.
_CONTAINERS = re.compile(r"[ \t]*(?:(?:>|[-+*]|\d{1,9}[.)])[ \t]*)*")
# A block marker at a line's start: ATX heading, list item, setext underline or thematic break,
# ordered list item, block quote (``*``, a backtick and ``~`` are escaped wherever they are).
_BLOCK_MARKER = re.compile(r"[ \t]*(?:(#{1,6}|[-+]+|=+)(?=\s|$)|\d{1,9}([.)])(?=\s|$)|(>))")


def one_line(translation: str) -> str:
    """``translation`` with its line breaks as spaces, character for character."""
    return translation.translate(_LINE_BREAKS_TO_SPACES)


def shows_something(translation: str) -> bool:
    """Whether a translation has a letter or a digit: anything to put in a sentence's place."""
    return any(ch.isalnum() for ch in translation)


_GAP = re.compile(r"(?<=\S)[ \t]+(?=\S)")


def break_places(text_length: int, breaks: Sequence[int], translation: str) -> list[int] | None:
    """Offsets of spaces of ``translation`` (one line) to put the source's line breaks at: for a
    break at ``breaks[k]`` of a source of ``text_length`` characters, the space nearest the same
    relative place, in order, one gap between words each; None when the translation has fewer
    gaps than there are breaks (a sentence of several lines translated as one word)."""
    # one place per run of spaces between two words: every line gets a word
    spaces = [m.start() for m in _GAP.finditer(translation)]
    if len(spaces) < len(breaks):
        return None
    out, lo = [], 0
    for n, offset in enumerate(breaks):
        hi = len(spaces) - (len(breaks) - n - 1)  # leave a space for every later break
        want = offset * len(translation) / max(1, text_length)
        k = min(max(bisect.bisect_left(spaces, want, lo, hi), lo), hi - 1)
        if k > lo and want - spaces[k - 1] <= spaces[k] - want:
            k -= 1
        out.append(spaces[k])
        lo = k + 1
    return out


def mark_breaks(translation: str, places: Sequence[int]) -> str:
    chars = list(translation)
    for at in places:
        chars[at] = BREAK
    return "".join(chars)


def restore_breaks(rendered: str, spellings: Sequence[str], markdown: bool) -> str:
    """``rendered`` with each :data:`BREAK` replaced by the source's break, in order; spaces
    around a break go (two before it would make a markdown hard break), and in markdown a block
    marker after it is escaped."""
    parts = rendered.split(BREAK)
    assert len(parts) == len(spellings) + 1, "every break is rendered once"
    out = []
    for k, part in enumerate(parts):
        if k > 0:
            part = part.lstrip(" \t")
            part = escape_line_start(part) if markdown else part
        if k < len(spellings):
            out += (part.rstrip(" \t"), spellings[k])
        else:
            out.append(part)
    return "".join(out)


def escape_markdown(text: str, spelled: dict[str, str] | None = None) -> str:
    """``text`` with every character markdown would read as inline markup backslash-escaped, and
    the characters of ``spelled`` spelled as given (as the source spelled them)."""
    spelled = spelled or {}
    if not spelled and not any(ch in _MARKDOWN_SPECIALS or ch == "&" for ch in text) and not text.endswith("!"):
        return text
    out = []
    for i, ch in enumerate(text):
        if ch in spelled:
            out.append(spelled[ch])
            continue
        # "&" only where it would spell an entity; "!" only last, where the document's "[" may follow
        if ch in _MARKDOWN_SPECIALS or (ch == "&" and _ENTITY.match(text, i)) or (ch == "!" and i == len(text) - 1):
            out.append("\\")
        out.append(ch)
    return "".join(out)


def at_block_start(line_so_far: str) -> bool:
    """Whether text after ``line_so_far`` (a line's beginning) would begin a block."""
    return _CONTAINERS.fullmatch(line_so_far) is not None


def escape_line_start(text: str) -> str:
    """``text``, at a line's start, with a block marker it begins with escaped."""
    m = _BLOCK_MARKER.match(text)
    if m is None:
        return text
    group = next(g for g in (1, 2, 3) if m.group(g) is not None)
    at = m.start(group)
    return f"{text[:at]}\\{text[at:]}"
