"""Text files: .txt, .md, .html and .srt.

- ``.txt``: the whole file is one document (``format=text``): lines, blank lines and
  indentation come back as sent (``server.documents``).
- ``.html`` / ``.htm``: the whole page is one document in the service's ``html`` mode:
  markup, scripts, styles and ``translate="no"`` content come back byte for byte.
- ``.md``: line by line, each line a document in the service's ``markdown`` mode (its inline
  emphasis, code spans and links placed by alignment); fenced and indented code is not
  translated, and a line's block markers (``#``, ``>``, ``-``, ``1.``) stay in front of its
  translation.
- ``.srt``: cues read by ``subrip``; a cue's lines are one sentence to the model and its
  translation is put back on as many lines, by proportion of words; index and timing lines
  come back byte for byte.

Files are UTF-8 (a byte-order mark is kept); anything else is refused with a 400. Every
reader here runs in time linear in the file (no regular expression that can backtrack over a
line) and counts the characters it reads for translation against ``--max-file-chars`` as it goes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..documents import HTML, MARKDOWN, TEXT
from . import subrip
from .extracted import Characters, Check, Extracted, unit_texts
from .refusals import FileRefused
from .run_placement import Placement, Unit

BOM = "\ufeff"


def decode(data: bytes, kind: str) -> tuple[str, str]:
    """(the text, its byte-order mark or "")."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileRefused(f"the {kind} file is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    if text.startswith(BOM):
        return text[1:], BOM
    return text, ""


def whole(data: bytes, kind: str, format: str, media_type: str, chars: Characters) -> Extracted:
    """The file as one document (.txt, .html)."""
    text, bom = decode(data, kind)
    texts = (text,) if text.strip() else ()
    chars.add(len(text) if texts else 0)

    def write(translations: Sequence[str], placement: Placement, check: Check) -> bytes:
        return (bom + translations[0]).encode("utf-8")

    return Extracted(texts, write, format, media_type)


def read_txt(data: bytes, max_file_bytes: int, chars: Characters) -> Extracted:
    return whole(data, ".txt", TEXT, "text/plain; charset=utf-8", chars)


def read_html(data: bytes, max_file_bytes: int, chars: Characters) -> Extracted:
    return whole(data, ".html", HTML, "text/html; charset=utf-8", chars)


_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")  # anchored by match(); one way to match
_TABLE_RULE = frozenset(":|-")


def _is_rule(body: str) -> bool:
    """A thematic break (``---``, ``* * *``: three or more of one of ``-*_``, spaces between) or a
    table's delimiter row (``|---|:--:|``: only ``|:-`` and spaces, a ``|`` after the first character)."""
    stripped = body.strip()
    if not stripped:
        return False
    mark = stripped[0]
    if mark in "-*_" and stripped.count(mark) >= 3 and all(ch == mark or ch.isspace() for ch in stripped):
        return True
    return body.find("|", 1) >= 0 and all(ch in _TABLE_RULE or ch.isspace() for ch in body)


def _marker_end(body: str, at: int) -> int:
    """Where one block marker starting at ``at`` ends (with the whitespace after it), or ``at``:
    a heading ``#`` to ``######``, a quote ``>``, a bullet ``-*+`` (with a task box ``[ ]``), an
    ordered item ``1.`` / ``1)``."""

    def spaces(i: int) -> int:
        while i < len(body) and body[i].isspace():
            i += 1
        return i

    ch, n = body[at] if at < len(body) else "", len(body)
    if ch == "#":
        i = at
        while i < n and body[i] == "#":
            i += 1
        return spaces(i) if i - at <= 6 and i < n and body[i].isspace() else at
    if ch == ">":
        return at + 2 if at + 1 < n and body[at + 1].isspace() else at + 1
    if ch in "-*+":
        if not (at + 1 < n and body[at + 1].isspace()):
            return at
        i = spaces(at + 1)
        box = body[i : i + 3]
        if (
            len(box) == 3
            and box[0] == "["
            and box[1] in " xX"
            and box[2] == "]"
            and i + 3 < n
            and body[i + 3].isspace()
        ):
            i = spaces(i + 3)
        return i
    i = at
    while i < n and "0" <= body[i] <= "9":
        i += 1
    if 0 < i - at <= 9 and i < n and body[i] in ".)" and i + 1 < n and body[i + 1].isspace():
        return spaces(i + 1)
    return at


def markdown_line(body: str) -> tuple[str, str, str]:
    """(the line's block markers with the whitespace around them, its text, its trailing whitespace)."""
    at = 0
    while at < len(body) and body[at].isspace():
        at += 1
    while (after := _marker_end(body, at)) > at:
        at = after
    end = max(at, len(body.rstrip()))
    return body[:at], body[at:end], body[end:]


def read_md(data: bytes, max_file_bytes: int, chars: Characters) -> Extracted:
    text, bom = decode(data, ".md")
    lines = text.splitlines(keepends=True)
    places: list[tuple[int, str, str, str]] = []  # (line, its markers, its text, the rest of it)
    fence = ""
    for i, line in enumerate(lines):
        body = line.rstrip("\r\n")
        opened = _FENCE.match(body)
        if fence or opened:
            if opened and (not fence or opened.group(1)[0] == fence[0]):
                fence = "" if fence else opened.group(1)
            continue
        if body.startswith(("    ", "\t")) or not body.strip() or _is_rule(body):
            continue  # indented code, a blank line, a rule
        markers, content, trailing = markdown_line(body)
        if content:
            chars.add(len(content))
            places.append((i, markers, content, trailing + line[len(body) :]))

    def write(translations: Sequence[str], placement: Placement, check: Check) -> bytes:
        out = list(lines)
        for (i, markers, _, rest), translation in zip(places, translations):
            out[i] = markers + translation + rest
        return (bom + "".join(out)).encode("utf-8")

    return Extracted(tuple(p[2] for p in places), write, MARKDOWN, "text/markdown; charset=utf-8")


def read_srt(data: bytes, max_file_bytes: int, chars: Characters) -> Extracted:
    text, bom = decode(data, ".srt")
    lines = text.splitlines(keepends=True)
    cues = subrip.cues(lines)
    eol = "\r\n" if "\r\n" in text else "\n"
    kept: list[tuple[subrip.Cue, Unit]] = []
    for cue in cues:
        texts = tuple(t for t in (line.strip() for line in lines[cue.start : cue.end]) if t)
        if texts:
            chars.add(sum(map(len, texts)) + len(texts) - 1)
            kept.append((cue, Unit(texts, (" ",) * (len(texts) - 1))))

    def write(translations: Sequence[str], placement: Placement, check: Check) -> bytes:
        out = list(lines)
        for n, ((cue, unit), translation) in enumerate(zip(kept, translations)):
            if n % 1024 == 0:
                check()
            last = lines[cue.end - 1]
            ending = last[len(last.rstrip("\r\n")) :]
            placed = [line for line in placement(unit, translation) if line]
            out[cue.start : cue.end] = [""] * (cue.end - cue.start)
            out[cue.start] = eol.join(placed) + ending
        return (bom + "".join(out)).encode("utf-8")

    return Extracted(unit_texts([u for _, u in kept]), write, TEXT, "application/x-subrip; charset=utf-8")
