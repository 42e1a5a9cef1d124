"""SubRip (.srt) subtitles, read line by line in linear time.

A file is cues, each: an index line (optional), a timing line
``HH:MM:SS,mmm --> HH:MM:SS,mmm`` (optionally followed by a position), text lines, and a blank
line. The reader is as tolerant as the ``srt`` library for real files: ``.`` (or ``:``) as the
decimal separator, a missing index, a byte-order mark, CRLF, extra blank lines between cues,
blank lines inside a cue's text (a cue's text runs until the next timing line, or index line
followed by one), and no blank line before the next cue. Text before the first cue that is not
whitespace is refused, and so is an index line after a blank line followed by a line meant as a
timing line that does not parse (``00:00:03,000 -> 00:00:04,000``): read as text, that cue
would be merged into the one before.

That library matches a whole cue with one regular expression whose timestamp part
(``[0-9]+[,.:]...``) backtracks in cubic time: a 2 KB file of ``"1\n"`` and 2,000 digits takes
a minute. Here a timing line is matched alone, by a pattern with one way to match (digits,
then a separator that is not a digit), and only on lines of at most ``MAX_TIMING_LINE``
characters. Only the text lines are ever rewritten: index and timing lines come back byte for byte.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .refusals import FileRefused

MAX_TIMING_LINE = 256  # "00:00:01,000 --> 00:00:02,500 X1:100 X2:600 Y1:50 Y2:80" is 56
_SEPARATOR = "[,.:\uff0c\uff0e\u3002\uff1a]"  # the srt library's: ASCII and full-width , . :
_TIMESTAMP = rf"[0-9]+{_SEPARATOR}[0-9]+{_SEPARATOR}[0-9]+(?:{_SEPARATOR}[0-9]*)?"
_TIMING = re.compile(rf"[ \t]*{_TIMESTAMP} *-[ -] *> *{_TIMESTAMP}(?:[ \t][^\r\n]*)?")
_INDEX = re.compile(r"-?[0-9]+(?:\.[0-9]*)?")


@dataclass(frozen=True)
class Cue:
    """Lines ``start:end`` of the file are the cue's text lines (``end`` after its last one
    with something in it)."""

    start: int
    end: int


def is_timing(line: str) -> bool:
    body = line.rstrip("\r\n")
    return len(body) <= MAX_TIMING_LINE and _TIMING.fullmatch(body) is not None


def _is_index(line: str) -> bool:
    body = line.strip()
    return len(body) <= MAX_TIMING_LINE and _INDEX.fullmatch(body) is not None


def _cue_header(lines: list[str], i: int) -> int | None:
    """The line after the timing line of a cue starting at line ``i`` (its index line, blank lines,
    its timing line), or None when no cue starts there."""
    if is_timing(lines[i]):
        return i + 1
    if not _is_index(lines[i]):
        return None
    j = i + 1
    while j < len(lines) and not lines[j].strip():  # the srt library allows blank lines after an index
        j += 1
    return j + 1 if j < len(lines) and is_timing(lines[j]) else None


def _looks_like_timing(line: str) -> bool:
    """A line meant as a timing line: digits, a ``:`` and an arrow's ``-`` or ``>``."""
    body = line.strip()
    return len(body) <= MAX_TIMING_LINE and ":" in body and ("-" in body or ">" in body) and any(map(str.isdigit, body))


def _refuse_broken_header(lines: list[str], i: int) -> None:
    """FileRefused when the text line ``i`` of a cue, after a blank line, is an index line followed by
    a timing line that does not parse (``->`` for ``-->``): read as text, the next cue would be
    merged into this one, its index and timing translated and its own text lost."""
    if lines[i - 1].strip() or not _is_index(lines[i]) or i + 1 >= len(lines) or not _looks_like_timing(lines[i + 1]):
        return
    shown = lines[i + 1].strip()[:40]
    raise FileRefused(
        f"the .srt file does not parse as SubRip subtitles: line {i + 2} ({shown!r}), after the index line "
        f"{lines[i].strip()[:20]!r}, is not a timing line HH:MM:SS,mmm --> HH:MM:SS,mmm"
    )


def cues(lines: list[str]) -> list[Cue]:
    """The cues of the file's lines (``str.splitlines(keepends=True)``); FileRefused when the text
    before the first cue is not blank."""
    found: list[Cue] = []
    i, n = 0, len(lines)
    while i < n and not lines[i].strip():
        i += 1
    if i < n and _cue_header(lines, i) is None:
        shown = lines[i].strip()[:40]
        raise FileRefused(
            f"the .srt file does not parse as SubRip subtitles: line {i + 1} ({shown!r}) does not start a cue "
            "(an index line, then a timing line HH:MM:SS,mmm --> HH:MM:SS,mmm)"
        )
    while i < n:
        header = _cue_header(lines, i)
        assert header is not None, "the loop stops only at the start of a cue"
        i = last = header
        while i < n:
            if lines[i].strip():
                if _cue_header(lines, i) is not None:
                    break
                _refuse_broken_header(lines, i)
                last = i + 1
            i += 1
        found.append(Cue(header, last))
    return found


# SubRip's styling tags, as players read them; linear: a tag's body stops at the next < or >
_TAG = re.compile(r"</?(?:[ibus]|font)(?:[ \t][^<>\r\n]*)?>", re.IGNORECASE)
_OVERRIDE = re.compile(r"(?:\{\\[^{}\r\n]*\})+")  # {\an8}: a position (or style) override, SSA's spelling
_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_ESCAPED = re.compile("&(?:amp|lt|gt);")
_IN_TAG = "\x00"  # a tag's space while a translation is shared out on lines by words


def override(line: str) -> tuple[str, str]:
    """(the ``{\\...}`` overrides a cue's first line starts with, the rest): a player's
    instruction, not words, put back in front of the cue's translation."""
    found = _OVERRIDE.match(line)
    return (found.group(), line[found.end() :]) if found else ("", line)


def has_tags(text: str) -> bool:
    return _TAG.search(text) is not None


def _outside_tags(text: str, change: Callable[[str], str]) -> str:
    out, at = [], 0
    for tag in _TAG.finditer(text):
        out += (change(text[at : tag.start()]), tag.group())
        at = tag.end()
    out.append(change(text[at:]))
    return "".join(out)


def to_html(text: str) -> str:
    """A cue's text for the service's html mode: its tags as they are (the mode places inline
    markup by alignment), ``&``, ``<`` and ``>`` of its words escaped."""
    return _outside_tags(text, lambda part: "".join(_ESCAPES.get(ch, ch) for ch in part))


def from_html(text: str) -> str:
    """The html mode's translation as a cue's text: the escapes of :func:`to_html` undone once, so a
    cue without tags reads as the text mode's translation."""
    unescaped = {v: k for k, v in _ESCAPES.items()}
    return _outside_tags(text, lambda part: _ESCAPED.sub(lambda m: unescaped[m.group()], part))


def tags_as_words(text: str) -> str:
    """``text`` with each tag's spaces hidden, so a translation shared out on lines by words
    keeps every tag whole on one line (:func:`tags_back`)."""
    return _TAG.sub(lambda tag: tag.group().replace(" ", _IN_TAG).replace("\t", _IN_TAG), text)


def tags_back(text: str) -> str:
    return text.replace(_IN_TAG, " ")
