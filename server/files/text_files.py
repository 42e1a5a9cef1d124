"""Text files: .txt, .md, .html and .srt.

- ``.txt``: the whole file is one document (``format=text``): lines, blank lines and
  indentation come back as sent (``server.documents``).
- ``.html`` / ``.htm``: the whole page is one document in the service's ``html`` mode:
  markup, scripts, styles and ``translate="no"`` content come back byte for byte. Its
  characters are its text as that mode reads it (``html_characters``), not its markup; its tags
  are counted first (``page_tags``), so a page is parsed for that count only within them.
- ``.md``: the whole file is one document in the service's ``markdown`` mode (CommonMark
  with tables: paragraphs, headings and table cells translated, inline emphasis, code spans
  and links placed by alignment; block markers, rules, fenced and indented code and html
  blocks byte for byte); a leading front matter block (``---`` YAML, ``+++`` TOML) is kept.
  Its characters are its source after the front matter, markup included: a block's few
  characters of it, and nothing cheap to count first bounds a parse as html's ``<`` do.
- ``.srt``: cues read by ``subrip``; a cue's lines are one sentence to the model and its
  translation is put back on as many lines, by proportion of words; index and timing lines
  come back byte for byte. Styling tags (``<i>``, ``<font color=...>``) are placed by the html
  mode, and a leading ``{\\an8}`` position override is kept in front of its cue.

Files are UTF-8, or UTF-16 / UTF-32 with a byte-order mark (what Windows tools write as
"Unicode": Notepad, Excel's Unicode text, subtitle editors); a file comes back in its own encoding,
its byte-order mark kept. Anything else (a legacy code page such as Windows-1252, UTF-16 without
a mark) is refused with a 400 that says how to save it: guessing a code page would translate
mojibake without a word. Every
reader here runs in time linear in the file (no regular expression that can backtrack over a
line) and counts the characters it reads for translation against ``--max-file-chars`` as it goes.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass

from ..documents import HTML, MARKDOWN, TEXT
from ..documents.markup import html_runs
from . import archive, subrip
from .extracted import Characters, Check, Extracted, unit_texts
from .refusals import FileRefused
from .run_placement import Placement, Unit

# Byte-order marks and their codecs; UTF-32's little-endian mark begins with UTF-16's, so it comes first.
_MARKED = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


@dataclass(frozen=True)
class TextEncoding:
    """How a text file was written, so its translation is written the same way."""

    codec: str = "utf-8"
    bom: bytes = b""

    def encode(self, text: str) -> bytes:
        return self.bom + text.encode(self.codec)

    @property
    def charset(self) -> str:
        return self.codec.removesuffix("-le").removesuffix("-be") if self.bom else self.codec


def decode(data: bytes, kind: str) -> tuple[str, TextEncoding]:
    """(the text without its byte-order mark, its encoding)."""
    codec, bom = next(((c, b) for b, c in _MARKED if data.startswith(b)), ("utf-8", b""))
    try:
        return data[len(bom) :].decode(codec), TextEncoding(codec, bom)
    except UnicodeDecodeError as exc:
        where = f"{exc.reason} at byte {exc.start + len(bom)}"
        if bom:
            raise FileRefused(
                f"the {kind} file is not {codec[:6].upper()} text as its byte-order mark says: {where}"
            ) from None
        raise FileRefused(
            f"the {kind} file is not UTF-8 text ({where}): save it as UTF-8 (or UTF-16 with a byte-order mark)"
        ) from None


def page_tags(kind: str, chars: Characters) -> archive.Tags:
    """The tags (each ``<``) html pages may hold, counted before a page is parsed for its text: one
    a character of ``--max-file-chars`` (as many as a page whose whole source counted could hold),
    ``archive.MAX_TAGS`` at most, so a page of a million empty tags is refused before its parse."""
    limit = archive.MAX_TAGS if chars.limit is None else min(archive.MAX_TAGS, chars.limit)
    refusal = (
        f"the {kind} file holds more than {limit:,} html tags; this server reads at most one a character "
        "of text it translates in one file (--max-file-chars)"
    )
    return archive.Tags(kind, limit, refusal)


def html_characters(page: str) -> int:
    """Characters of text in an html page, as the html mode reads them for the model
    (``documents.markup.html_runs``): text outside tags, comments, scripts, styles and
    ``translate="no"`` elements, references decoded, each run's whitespace one space (a
    source's indentation is layout, as a browser shows it)."""
    return sum(len(" ".join(run.plain.split())) for run in html_runs(page))


def whole(data: bytes, kind: str, format: str, media_type: str, chars: Characters) -> Extracted:
    """The file as one document (.txt, .html: its characters of text, not its markup, counted)."""
    text, encoding = decode(data, kind)
    texts = (text,) if text.strip() else ()
    if texts and format == HTML:
        if chars.counting:
            page_tags(kind, chars).add(text)
            chars.add(html_characters(text))
    else:
        chars.add(len(text) if texts else 0)

    def write(translations: Sequence[str], placement: Placement, check: Check) -> bytes:
        return encoding.encode(translations[0])

    return Extracted(texts, write, format, f"{media_type}; charset={encoding.charset}")


def read_txt(data: bytes, max_file_bytes: int, chars: Characters) -> Extracted:
    return whole(data, ".txt", TEXT, "text/plain", chars)


def read_html(data: bytes, max_file_bytes: int, chars: Characters) -> Extracted:
    return whole(data, ".html", HTML, "text/html", chars)


def front_matter(text: str) -> int:
    """Where a leading front matter block ends (Jekyll's and Hugo's YAML between ``---`` lines,
    Hugo's TOML between ``+++`` lines), or 0: it is the page's settings, not its text."""
    first = text.split("\n", 1)[0].rstrip("\r")
    if first not in ("---", "+++"):
        return 0
    at = len(first) + 1
    while at < len(text):
        end = text.find("\n", at)
        end = len(text) if end < 0 else end + 1
        if text[at:end].rstrip("\r\n") in (first, "..." if first == "---" else first):
            return end
        at = end
    return 0  # never closed: a rule and text, as CommonMark reads it


def read_md(data: bytes, max_file_bytes: int, chars: Characters) -> Extracted:
    """The whole file as one document in the service's markdown mode (after its front matter)."""
    text, encoding = decode(data, ".md")
    head = front_matter(text)
    body = text[head:]
    texts = (body,) if body.strip() else ()
    chars.add(len(body) if texts else 0)

    def write(translations: Sequence[str], placement: Placement, check: Check) -> bytes:
        return encoding.encode(text[:head] + (translations[0] if texts else body))

    return Extracted(texts, write, MARKDOWN, f"text/markdown; charset={encoding.charset}")


def read_srt(data: bytes, max_file_bytes: int, chars: Characters) -> Extracted:
    """The cues' text lines, each cue one unit: in the text mode, or, where a cue has styling tags
    (``<i>``, ``<b>``, ``<u>``, ``<font>``), every cue in the html mode, which places the tags by
    alignment (one format a file); a leading ``{\\an8}`` override is kept in front of its cue."""
    text, encoding = decode(data, ".srt")
    lines = text.splitlines(keepends=True)
    # a cue's lines are joined as the file ends its lines: CRLF (Windows), LF, or CR alone (classic Mac)
    eol = next((line[len(line.rstrip("\r\n")) :] for line in lines if line.endswith(("\n", "\r"))), "\n")
    kept: list[tuple[subrip.Cue, str, list[str]]] = []  # (cue, its override, its text lines)
    for cue in subrip.cues(lines):
        texts = [t for t in (line.strip() for line in lines[cue.start : cue.end]) if t]
        front = ""
        if texts:
            front, first = subrip.override(texts[0])
            texts = [t for t in (first.strip(), *texts[1:]) if t]
        if texts:
            chars.add(sum(map(len, texts)) + len(texts) - 1)
            kept.append((cue, front, texts))
    markup = any(subrip.has_tags(t) for _, _, texts in kept for t in texts)
    as_sent = subrip.to_html if markup else str
    units = [Unit(tuple(map(as_sent, texts)), (" ",) * (len(texts) - 1)) for _, _, texts in kept]

    def write(translations: Sequence[str], placement: Placement, check: Check) -> bytes:
        out = list(lines)
        for n, ((cue, front, _), unit, translation) in enumerate(zip(kept, units, translations)):
            if n % 1024 == 0:
                check()
            last = lines[cue.end - 1]
            ending = last[len(last.rstrip("\r\n")) :]
            placed = _on_lines(unit, translation, placement, markup)
            out[cue.start : cue.end] = [""] * (cue.end - cue.start)
            out[cue.start] = front + eol.join(placed) + ending
        return encoding.encode("".join(out))

    format = HTML if markup else TEXT
    return Extracted(unit_texts(units), write, format, f"application/x-subrip; charset={encoding.charset}")


def _on_lines(unit: Unit, translation: str, placement: Placement, markup: bool) -> list[str]:
    """A cue's translation on as many lines as it had (fewer where it has fewer words); in the
    html mode, each tag whole on one line and the words unescaped."""
    if not markup:
        return [line for line in placement(unit, translation) if line]
    hidden = Unit(tuple(map(subrip.tags_as_words, unit.runs)), unit.joints)
    placed = placement(hidden, subrip.tags_as_words(translation))
    return [subrip.from_html(subrip.tags_back(line)) for line in placed if line]
