"""Text files: .txt, .md, .html and .srt.

- ``.txt``: the whole file is one document (``format=text``): lines, blank lines and
  indentation come back as sent (``server.documents``).
- ``.html`` / ``.htm``: the whole page is one document in the service's ``html`` mode:
  markup, scripts, styles and ``translate="no"`` content come back byte for byte.
- ``.md``: line by line; fenced and indented code is not translated, and a line's block
  markers (``#``, ``>``, ``-``, ``1.``) stay in front of its translation.
- ``.srt``: parsed and written by the ``srt`` library; a cue's lines are one sentence to the
  model and its translation is put back on as many lines, by proportion of words.

Files are UTF-8 (a byte-order mark is kept); anything else is refused with a 400.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import srt

from ..documents import HTML, TEXT
from .errors import FileRefused
from .extracted import Extracted, unit_texts
from .placement import Placement, Unit

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


def whole(data: bytes, kind: str, format: str, media_type: str) -> Extracted:
    """The file as one document (.txt, .html)."""
    text, bom = decode(data, kind)
    texts = (text,) if text.strip() else ()

    def write(translations: Sequence[str], placement: Placement) -> bytes:
        return (bom + translations[0]).encode("utf-8")

    return Extracted(texts, write, format, media_type)


def read_txt(data: bytes, max_file_bytes: int) -> Extracted:
    return whole(data, ".txt", TEXT, "text/plain; charset=utf-8")


def read_html(data: bytes, max_file_bytes: int) -> Extracted:
    return whole(data, ".html", HTML, "text/html; charset=utf-8")


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_MARKERS = re.compile(r"^(\s*(?:#{1,6}\s+|>\s?|[-*+]\s+(?:\[[ xX]\]\s+)?|\d{1,9}[.)]\s+)*)(.*?)(\s*)$")
_RULE = re.compile(r"^\s*([-*_])(\s*\1){2,}\s*$|^\s*\|?[\s:|-]+\|[\s:|-]*$")  # a thematic break, a table rule


def read_md(data: bytes, max_file_bytes: int) -> Extracted:
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
        if body.startswith(("    ", "\t")) or _RULE.match(body) or not body.strip():
            continue  # indented code, a rule, a blank line
        markers, content, trailing = _MARKERS.match(body).groups()
        if content:
            places.append((i, markers, content, trailing + line[len(body) :]))

    def write(translations: Sequence[str], placement: Placement) -> bytes:
        out = list(lines)
        for (i, markers, _, rest), translation in zip(places, translations):
            out[i] = markers + translation + rest
        return (bom + "".join(out)).encode("utf-8")

    return Extracted(tuple(p[2] for p in places), write, TEXT, "text/markdown; charset=utf-8")


def read_srt(data: bytes, max_file_bytes: int) -> Extracted:
    text, bom = decode(data, ".srt")
    try:
        cues = list(srt.parse(text))
    except (srt.SRTParseError, ValueError) as exc:
        raise FileRefused(f"the .srt file does not parse as SubRip subtitles: {exc}") from None
    eol = "\r\n" if "\r\n" in text else "\n"
    units = [Unit(tuple(lines), (" ",) * (len(lines) - 1)) for lines in (c.content.splitlines() for c in cues)]
    kept = [i for i, u in enumerate(units) if u.runs and u.text.strip()]

    def write(translations: Sequence[str], placement: Placement) -> bytes:
        for i, translation in zip(kept, translations):
            cues[i].content = "\n".join(line for line in placement(units[i], translation) if line)
        return (bom + srt.compose(cues, reindex=False, eol=eol)).encode("utf-8")

    return Extracted(unit_texts([units[i] for i in kept]), write, TEXT, "application/x-subrip; charset=utf-8")
