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

:class:`MarkupRules` widen this for a request (DeepL's ``tag_handling`` options): elements
never translated (``ignore_tags``), tags that always or never end a run, and XML, whose tags
mean nothing to html: their names are case-sensitive, and a tag outside ``INLINE`` ends a run
only where the outline puts it (``outline_detection``): ``<par>A.</par><par>B.</par>`` is two
runs, while ``Press <key>Enter</key> to go on``, a tag inside running text, is one sentence.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import NamedTuple

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
# A tag's name as written (the tokenizer reports it lowercased), as HTMLParser reads one.
_WRITTEN_NAME = re.compile(r"</?\s*([a-zA-Z][^\t\n\r\f />\x00]*)")
# A name a rule may list: XML's Name, begun by a letter, as the tokenizer needs to see a tag at all.
TAG_NAME = re.compile(r"[A-Za-z][\w.:-]*\Z")


@dataclass(frozen=True)
class MarkupRules:
    """How :func:`html_runs` reads a request's tags beyond html's own meaning of them.

    ``xml``: names match as written (XML's are case-sensitive; html's match in any case), and
    a tag outside ``INLINE`` ends a run only where the outline puts it: it does unless an
    element around it holds running text of its own (text directly in it, or in its ``INLINE``
    and non-splitting elements), so structure (``<doc><par>``) splits and a tag inside a
    sentence does not. ``outline_detection`` False: only ``splitting_tags`` end runs (DeepL's
    rule). ``ignore_tags``: these elements' content is never translated and comes back as
    sent (inside a sentence, the element is one anchor). ``splitting_tags`` always end a run,
    ``non_splitting_tags`` never do, in html as in xml. DeepL's ``split_sentences``, for every
    format: ``lines`` False, a newline ends no sentence of a text either (its breaks go back into
    the translation, as html's do); ``sentences`` False, a run is one sentence, split nowhere."""

    xml: bool = False
    ignore_tags: frozenset[str] = frozenset()
    splitting_tags: frozenset[str] = frozenset()
    non_splitting_tags: frozenset[str] = frozenset()
    outline_detection: bool = True
    lines: bool = True
    sentences: bool = True

    def fold(self, name: str) -> str:
        return name if self.xml else name.lower()


HTML_RULES = MarkupRules()


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

    def anchor(self, start: int, end: int, kind: str, name: str = "") -> None:
        self.anchors.append(Anchor(self.length, start, end, kind, name))

    def flush(self, lines: bool) -> None:
        if self.pieces:
            self.runs.append(Run("".join(self.parts), SourceMap(self.pieces), lines, self.anchors))
        self._reset()


class _Item(NamedTuple):
    """A token as the runs see it: text (``data``, ``ref``), markup kept as an anchor
    (``other``), a tag, or an element not translated (``skipped``: its whole span)."""

    kind: str  # data, ref, other, start, end, void, skipped
    start: int
    end: int
    name: str = ""  # tags: as the rules match it (xml: as written)
    tag: str = ""  # tags: the tokenizer's lowercased name, for html's own meaning of it
    element: int = 0  # tags: the element it opens or closes (an index into _Outline's lists)
    data: str = ""
    closed: bool = True  # skipped: whether its end tag came


class _Outline:
    """The elements of a fragment, read once in order: which of them hold running text, and
    the items the runs are built from (``skipped`` ones resolved: what is not translated)."""

    def __init__(self, raw: str, rules: MarkupRules) -> None:
        self.raw, self.rules = raw, rules
        self.inline = frozenset(INLINE | {rules.fold(n) for n in rules.non_splitting_tags}) - {
            rules.fold(n) for n in rules.splitting_tags
        }
        self.ignored = frozenset(rules.fold(n) for n in rules.ignore_tags)
        self.parents, self.texts, self.names = [-1], [False], [""]  # element 0: the fragment itself
        self.stack = [0]  # the open elements, outermost first
        self.holders = [0]  # per open element: the innermost one around it, itself included, not inline
        self.open: dict[str, list[int]] = {}  # name -> its open elements' places in the stack
        self.outlined = rules.xml and rules.outline_detection  # else no element is asked about
        self.items: list[_Item] = []
        self._read()

    def _name(self, start: int, tag: str) -> str:
        if not self.rules.xml:
            return tag
        m = _WRITTEN_NAME.match(self.raw, start)
        return m.group(1) if m and m.group(1).lower() == tag else tag

    def _element(self, name: str, push: bool) -> int:
        if not self.outlined:
            return 0
        self.parents.append(self.stack[-1])
        self.texts.append(False)
        self.names.append(name)
        element = len(self.names) - 1
        if push:
            self.open.setdefault(name, []).append(len(self.stack))
            self.holders.append(self.holders[-1] if name in self.inline else element)
            self.stack.append(element)
        return element

    def _text(self) -> None:
        """Running text, held by the innermost open element that is not inline."""
        self.texts[self.holders[-1]] = True

    def _close(self, name: str) -> int:
        """The open element ``name`` closes (those opened inside it and left open close with it),
        or a new one for an end tag nothing opened. Each element is opened and closed once: a
        fragment of 9,000 unclosed ``<b>`` costs no scans of the stack."""
        places = self.open.get(name)
        if not self.outlined or not places:
            return self._element(name, push=False)
        k = places[-1]
        element = self.stack[k]
        for e in self.stack[k:]:  # the latest of their names: the ends of their lists
            self.open[self.names[e]].pop()
        del self.stack[k:], self.holders[k:]
        return element

    def _read(self) -> None:
        skipping: tuple[str, int, int, int] | None = None  # (name, nesting depth, start, element)
        for kind, start, end, tag, data, no in tokens(self.raw):
            name = self._name(start, tag) if kind in ("start", "end", "void") else ""
            if skipping is not None:
                skip, depth, skip_start, element = skipping
                if kind in ("start", "end") and name == skip:
                    depth += 1 if kind == "start" else -1
                    skipping = (skip, depth, skip_start, element) if depth else None
                    if not depth:
                        self.items.append(_Item("skipped", skip_start, end, skip, tag, element))
                continue
            void = tag in VOID_ELEMENTS and not self.rules.xml  # xml: only <x/> is empty (<link> may hold text)
            if kind == "start" and (no or tag in RAW_CONTENT or name in self.ignored) and not void:
                skipping = (name, 1, start, self._element(name, push=False))
                continue
            element = 0
            if kind == "start":
                element = self._element(name, push=not void)
            elif kind == "void":
                element = self._element(name, push=False)
            elif kind == "end":
                element = self._close(name)
            elif self.outlined and ((kind == "data" and data.strip() and not data.startswith("<")) or kind == "ref"):
                self._text()
            self.items.append(_Item(kind, start, end, name, tag, element, data))
        if skipping is not None:
            skip, _, skip_start, element = skipping
            self.items.append(_Item("skipped", skip_start, len(self.raw), skip, "", element, closed=False))

    def in_running_text(self) -> list[bool]:
        """Per element: whether an element around it holds running text (parents come first)."""
        inside = [False] * len(self.names)
        for e in range(1, len(self.names)):
            parent = self.parents[e]
            inside[e] = self.texts[parent] or inside[parent]
        return inside


def html_runs(raw: str, rules: MarkupRules = HTML_RULES) -> list[Run]:
    """The text runs of ``raw`` (html, or xml by ``rules``), in order; what lies outside them is
    markup, kept as sent."""
    outline = _Outline(raw, rules)
    splitting = {rules.fold(n) for n in rules.splitting_tags}
    inside = outline.in_running_text() if rules.xml and rules.outline_detection else None

    def splits(item: _Item) -> bool:
        if item.name in splitting or item.name in outline.inline:
            return item.name in splitting
        if not rules.xml:
            return True
        return inside is not None and not inside[item.element]

    builder = _RunBuilder(raw)
    preformatted = 0
    for item in outline.items:
        kind, start, end = item.kind, item.start, item.end
        if kind == "data":
            _data(builder, raw, item)
        elif kind == "ref":
            builder.reference(start, end)
        elif kind == "other":
            builder.anchor(start, end, VOID)
        elif kind == "skipped" and item.closed and not splits(item):  # <span translate="no">ACME</span>
            builder.anchor(start, end, VOID)
        elif kind != "skipped" and not splits(item):
            void = kind == "void" or (not rules.xml and item.tag in VOID_ELEMENTS)
            anchor = VOID if void else OPEN if kind == "start" else CLOSE
            builder.anchor(start, end, anchor, item.name if rules.xml and not void else "")
        else:
            builder.flush(lines=preformatted > 0)
            if item.tag in PREFORMATTED and kind in ("start", "end"):
                preformatted = max(0, preformatted + (1 if kind == "start" else -1))
    builder.flush(lines=preformatted > 0)
    return builder.runs


def _data(builder: _RunBuilder, raw: str, item: _Item) -> None:
    start, end, data = item.start, item.end, item.data
    if data.startswith("<") or raw[start : start + len(data)] != data:  # markup left unparsed at the end
        builder.anchor(start, end, VOID)
    else:
        builder.data(start, start + len(data))
        if start + len(data) < end:  # what the parser skipped ("</>"): markup, kept as sent
            builder.anchor(start + len(data), end, VOID)
