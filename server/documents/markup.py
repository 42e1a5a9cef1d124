"""``format=html``: the text runs of an html fragment or page, with the markup around and
inside them kept exactly as sent.

The parser is the standard library's ``html.parser.HTMLParser``, used as a tokenizer: it
reports every tag, text stretch and character reference with its position in the input, so
each piece of markup is copied back from the input itself, byte for byte. The tree builders
(lxml, selectolax/lexbor, html5lib, justhtml) were tried first: each serialises its tree in
its own spelling (``class=x`` becomes ``class="x"``, ``&#169;`` becomes ``©``, implied
``<html><body>`` appear), which breaks the promise that tags, attributes and entities come
back as sent, and a document to translate needs tokens in source order, not a tree.

- Text between block-level tags (``<p>``, ``<li>``, ``<td>``, ``<br>``, ...) is one run; its
  sentences never cross a block tag. Inline tags (``<b>``, ``<a>``, ``<span>``, ...) and
  comments inside a run are anchors at a position of its plain text (see ``sentences``).
- Character references are decoded for the model and spelled the same way in the
  translation (``Segment.render``); ``&``, ``<`` and ``>`` the model writes are escaped.
- Not translated, copied as sent: ``<script>`` and ``<style>`` content, and any element with
  the standard ``translate="no"`` attribute (HTML 5 § 3.2.6.8), which inside a sentence is
  one anchor.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

from .document import Piece, SourceMap
from .sentences import CLOSE, OPEN, VOID, Anchor, Run

# Phrasing content that may sit inside a sentence; every other tag ends a run.
INLINE = frozenset(
    "a abbr acronym b bdi bdo big cite code data del dfn em font i img ins kbd label mark q rp rt ruby "
    "s samp small span strike strong sub sup time tt u var wbr".split()
)
VOID_ELEMENTS = frozenset("area base br col embed hr img input link meta param source track wbr".split())
RAW_CONTENT = frozenset(("script", "style"))  # never translated
PREFORMATTED = frozenset(("pre", "textarea", "listing"))  # newlines there end sentences, as in text
_INCOMPLETE_TAG = re.compile(r"<[a-zA-Z/!?]")  # a tag, end tag, comment or declaration begun
_REFERENCE = re.compile(r"&(?:#[xX][0-9a-fA-F]+|#[0-9]+|[a-zA-Z][a-zA-Z0-9]*);?")


class _Tokenizer(HTMLParser):
    """Records (kind, line, column, tag, data, translate_no) for every token; HTMLParser reports
    positions as (line, column) with lines counted by "\\n"."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)  # references reported on their own, with their spelling
        self.tokens: list[tuple[str, int, int, str, str, bool]] = []

    def _add(self, kind: str, tag: str = "", data: str = "", no: bool = False) -> None:
        line, column = self.getpos()
        self.tokens.append((kind, line, column, tag, data, no))

    def handle_starttag(self, tag, attrs):
        no = any(k == "translate" and (v or "").strip().lower() == "no" for k, v in attrs)
        self._add("start", tag, no=no)

    def handle_startendtag(self, tag, attrs):
        self._add("void", tag)

    def handle_endtag(self, tag):
        self._add("end", tag)

    def handle_data(self, data):
        self._add("data", data=data)

    def handle_entityref(self, name):
        self._add("ref")

    def handle_charref(self, name):
        self._add("ref")

    def handle_comment(self, data):
        self._add("other")

    def handle_decl(self, decl):
        self._add("other")

    def handle_pi(self, data):
        self._add("other")

    def unknown_decl(self, data):
        self._add("other")


def tokens(raw: str) -> list[tuple[str, int, int, str, str, bool]]:
    """(kind, start, end, tag, data, translate_no) in input order; the spans tile the input.

    A tag left open at the end (``"March 3, 2025<p"``, ``"<a href="x``) is what an HTML 5
    tokenizer drops as an eof-in-tag parse error: markup, never text. It is one piece of
    markup, kept as sent; ``HTMLParser.close`` would report it as character data."""
    parser = _Tokenizer()
    parser.feed(raw)
    if _INCOMPLETE_TAG.match(parser.rawdata):  # the unparsed rest, at the parser's position
        parser._add("other")
    else:
        parser.close()
    line_starts = [0] + [m.end() for m in re.finditer("\n", raw)]
    starts = [line_starts[line - 1] + column for _, line, column, *_ in parser.tokens]
    ends = [*starts[1:], len(raw)]
    return [(t[0], s, e, t[3], t[4], t[5]) for t, s, e in zip(parser.tokens, starts, ends) if e > s]


class _RunBuilder:
    def __init__(self, raw: str) -> None:
        self.raw = raw
        self.runs: list[Run] = []
        self._reset()

    def _reset(self) -> None:
        self.parts: list[str] = []
        self.length = 0
        self.pieces: list[Piece] = []
        self.anchors: list[Anchor] = []

    def data(self, start: int, end: int) -> None:
        text = self.raw[start:end]
        self.pieces.append(Piece(self.length, self.length + len(text), start, end))
        self.parts.append(text)
        self.length += len(text)

    def reference(self, start: int, end: int) -> None:
        m = _REFERENCE.match(self.raw, start, end)
        text = html.unescape(m.group()) if m else ""
        if not m or text == m.group():  # not a reference after all: plain characters
            self.data(start, end)
            return
        self.pieces.append(Piece(self.length, self.length + len(text), start, m.end(), reference=True))
        self.parts.append(text)
        self.length += len(text)
        if m.end() < end:
            self.data(m.end(), end)

    def anchor(self, start: int, end: int, kind: str) -> None:
        self.anchors.append(Anchor(self.length, start, end, kind))

    def flush(self, lines: bool) -> None:
        if self.pieces:
            self.runs.append(Run("".join(self.parts), SourceMap(self.pieces), lines, self.anchors))
        self._reset()


def html_runs(raw: str) -> list[Run]:
    """The text runs of ``raw`` (html), in order; what lies outside them is markup, kept as sent."""
    builder = _RunBuilder(raw)
    preformatted = 0
    skipping: tuple[str, int, int] | None = None  # (tag, nesting depth, start) of content not to translate
    for kind, start, end, tag, data, no in tokens(raw):
        if skipping is not None:
            name, depth, skip_start = skipping
            if kind == "start" and tag == name:
                skipping = (name, depth + 1, skip_start)
            elif kind == "end" and tag == name:
                skipping = (name, depth - 1, skip_start) if depth > 1 else None
                if skipping is None and name in INLINE:  # <span translate="no">ACME</span>: one anchor
                    builder.anchor(skip_start, end, VOID)
            continue
        if kind == "data":
            if data.startswith("<") or raw[start : start + len(data)] != data:  # markup left unparsed at the end
                builder.anchor(start, end, VOID)
            else:
                builder.data(start, start + len(data))
                if start + len(data) < end:  # what the parser skipped ("</>"): markup, kept as sent
                    builder.anchor(start + len(data), end, VOID)
        elif kind == "ref":
            builder.reference(start, end)
        elif kind == "other":
            builder.anchor(start, end, VOID)
        elif tag in INLINE:
            void = kind == "void" or tag in VOID_ELEMENTS
            if kind == "start" and no and not void:
                skipping = (tag, 1, start)
            else:
                builder.anchor(start, end, VOID if void else OPEN if kind == "start" else CLOSE)
        else:
            builder.flush(lines=preformatted > 0)
            if tag in PREFORMATTED and kind in ("start", "end"):
                preformatted = max(0, preformatted + (1 if kind == "start" else -1))
            if kind == "start" and (tag in RAW_CONTENT or no) and tag not in VOID_ELEMENTS:
                skipping = (tag, 1, start)
    builder.flush(lines=preformatted > 0)
    return builder.runs
