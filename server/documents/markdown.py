"""``format=markdown``: the text runs of a CommonMark document (tables too), with
everything else kept exactly as sent.

markdown-it-py (the CommonMark reference parser's Python port) finds the blocks; only the
text of paragraphs, headings and table cells is translated, so list markers (and a task list
item's box, ``- [ ]``), heading markers, block quote markers, table rules, fenced and
indented code, and html blocks come back byte for byte. Inside a block's inline content,
markdown-it's inline tokens are laid back on the input: text is text (a backslash escape or
an entity is one character that keeps its spelling), emphasis and strikethrough delimiters
and a link's ``[`` are opening anchors, their closing delimiters and a link's ``](target
"title")`` closing anchors (so the link target is never translated), and code spans, images,
autolinks and inline html are void anchors: kept as sent. The anchors are what the splitter
cuts at or places by alignment, as for html (``sentences.Anchor``).

A block whose inline content cannot be laid back on its lines (never seen; a parser corner)
is kept as sent, untranslated, rather than guessed at.
"""

from __future__ import annotations

import html
import logging
import re

from markdown_it import MarkdownIt
from markdown_it.token import Token

from .document import Piece, SourceMap
from .sentences import CLOSE, OPEN, VOID, Anchor, Run

log = logging.getLogger(__name__)

_PARSER = MarkdownIt("commonmark").enable("table").enable("strikethrough")
_ENTITY = re.compile(r"&(?:#[xX][0-9a-fA-F]+|#[0-9]+|[a-zA-Z][a-zA-Z0-9]*);")
_DELIMITED = {"em", "strong", "s"}
_TASK = re.compile(r"\[[ xX]\](?=[ \t])")


class _Unplaced(ValueError):
    """An inline token that does not match the input where it should be."""


def _line_starts(raw: str) -> list[int]:
    starts = [0]
    for i, ch in enumerate(raw):
        if ch == "\n":
            starts.append(i + 1)
    return starts


class _Inline:
    """One block's inline content laid on the input: content offset -> input offset."""

    def __init__(self, raw: str, content: str, token: Token, starts: list[int], cursors: dict[int, int]) -> None:
        self.content, self.offsets = content, []
        line = token.map[0] if token.map else 0
        for k, text in enumerate(content.split("\n")):
            row = line + k
            if row >= len(starts):
                raise _Unplaced(f"line {row} past the input")
            end = starts[row + 1] - 1 if row + 1 < len(starts) else len(raw)
            at = raw.find(text, starts[row] + cursors.get(row, 0), end)
            if at < 0:
                raise _Unplaced(f"{text!r} not on line {row}")
            cursors[row] = at + len(text) - starts[row]
            self.offsets.extend(range(at, at + len(text)))
            self.offsets.append(at + len(text))  # the newline (or the end)

    def raw(self, c: int) -> int:
        return self.offsets[c]


class _Builder:
    def __init__(self, inline: _Inline) -> None:
        self.inline, self.content = inline, inline.content
        self.parts: list[str] = []
        self.pieces: list[Piece] = []
        self.anchors: list[Anchor] = []
        self.length = 0
        self.c = 0  # content cursor

    def text(self, start: int, end: int, plain: str | None = None) -> None:
        plain = self.content[start:end] if plain is None else plain
        raw_start, raw_end = self.inline.raw(start), self.inline.raw(end - 1) + 1
        reference = plain != self.content[start:end]
        self.pieces.append(Piece(self.length, self.length + len(plain), raw_start, raw_end, reference))
        self.parts.append(plain)
        self.length += len(plain)

    def anchor(self, start: int, end: int, kind: str, name: str = "") -> None:
        if end <= start:
            raise _Unplaced(f"empty markup at {start}")
        self.anchors.append(Anchor(self.length, self.inline.raw(start), self.inline.raw(end - 1) + 1, kind, name))

    def expect(self, markup: str) -> int:
        if not self.content.startswith(markup, self.c):
            raise _Unplaced(f"{markup!r} expected at {self.c}")
        return self.c + len(markup)

    def run_text(self, text: str) -> None:
        """Text as markdown-it decoded it: characters as written, or escapes and entities."""
        for ch in text:
            c, content = self.c, self.content
            if (m := _ENTITY.match(content, c)) and html.unescape(m.group()).startswith(ch) and m.group() != ch:
                self.text(c, m.end(), html.unescape(m.group()))
                self.c = m.end()
            elif c < len(content) and content[c] == ch:
                self.text(c, c + 1)
                self.c += 1
            elif content.startswith("\\", c) and content[c + 1 : c + 2] == ch:
                self.text(c, c + 2, ch)
                self.c += 2
            elif not ch.strip() and c < len(content) and not content[c].strip():
                self.text(c, c + 1)
                self.c += 1
            else:
                raise _Unplaced(f"{ch!r} not at {c}")

    def balanced(self, start: int, opening: str, closing: str) -> int:
        """The offset after the bracket that closes the one at ``start``."""
        depth, c = 0, start
        while c < len(self.content):
            ch = self.content[c]
            if ch == "\\":
                c += 2
                continue
            depth += ch == opening
            depth -= ch == closing
            c += 1
            if depth == 0:
                return c
        raise _Unplaced(f"unbalanced {opening} at {start}")

    def link_end(self, c: int) -> int:
        """After ``]`` at ``c``: its ``(target "title")``, ``[label]`` or nothing."""
        c += 1
        if self.content.startswith("(", c):
            return self.balanced(c, "(", ")")
        if self.content.startswith("[", c):
            return self.balanced(c, "[", "]")
        return c


def _children(builder: _Builder, children: list[Token]) -> None:
    skip_to_close = False
    for child in children:
        kind, c = child.type, builder.c
        if skip_to_close:  # an autolink's text: inside its void anchor
            skip_to_close = kind != "link_close"
            continue
        if kind == "text":
            builder.run_text(child.content)
        elif kind in ("softbreak", "hardbreak"):
            newline = builder.content.find("\n", c)
            if newline < 0:
                raise _Unplaced("line break without a newline")
            if newline > c:  # a hard break's backslash or trailing spaces: kept as sent
                builder.anchor(c, newline, VOID)
            builder.text(newline, newline + 1)
            builder.c = newline + 1
        elif kind == "code_inline":
            end = builder.content.find(child.markup, builder.expect(child.markup) + len(child.content))
            if end < 0:
                raise _Unplaced("code span not closed")
            builder.anchor(c, end + len(child.markup), VOID)
            builder.c = end + len(child.markup)
        elif kind in ("html_inline", "image") or (kind == "link_open" and child.markup == "autolink"):
            end = builder.expect(child.content) if kind == "html_inline" else None
            if kind == "image":
                end = builder.link_end(builder.balanced(c + 1, "[", "]") - 1)
            elif kind == "link_open":
                end = builder.balanced(c, "<", ">")
                skip_to_close = True
            builder.anchor(c, end, VOID)
            builder.c = end
        elif kind.endswith("_open") and kind[:-5] in _DELIMITED:
            builder.c = builder.expect(child.markup)
            builder.anchor(c, builder.c, OPEN, child.markup)
        elif kind.endswith("_close") and kind[:-6] in _DELIMITED:
            builder.c = builder.expect(child.markup)
            builder.anchor(c, builder.c, CLOSE, child.markup)
        elif kind == "link_open":
            builder.c = builder.expect("[")
            builder.anchor(c, builder.c, OPEN, "link")
        elif kind == "link_close":
            builder.expect("]")
            builder.c = builder.link_end(c)
            builder.anchor(c, builder.c, CLOSE, "link")
        else:
            raise _Unplaced(f"inline token {kind}")


def _task_box(builder: _Builder, children: list[Token]) -> list[Token]:
    """A task list item's box (GitHub's ``- [ ] to do``, ``- [x] done``) left out of the item's
    text, kept as sent: translated as text, its brackets would come back escaped (``\\[ \\]``), a
    literal "[ ]" where a checkbox was. ``children``: the item's first paragraph's tokens."""
    box = _TASK.match(builder.content)
    if box is None or not children or children[0].type != "text" or not children[0].content.startswith(box.group()):
        return children
    builder.c = box.end()
    return [children[0].copy(content=children[0].content[box.end() :]), *children[1:]]


def markdown_runs(raw: str) -> list[Run]:
    """The text runs of ``raw`` (markdown), one per paragraph, heading or table cell, in order."""
    starts, cursors, runs = _line_starts(raw), {}, []
    tokens = _PARSER.parse(raw)
    for n, token in enumerate(tokens):
        if token.type != "inline" or not token.children:
            continue
        try:
            builder = _Builder(_Inline(raw, token.content, token, starts, cursors))
            children = token.children
            if n >= 2 and (tokens[n - 2].type, tokens[n - 1].type) == ("list_item_open", "paragraph_open"):
                children = _task_box(builder, children)
            _children(builder, children)
        except (_Unplaced, IndexError) as exc:
            log.info("markdown: a block kept untranslated (%s)", exc)
            continue
        if builder.pieces:
            runs.append(Run("".join(builder.parts), SourceMap(builder.pieces), False, builder.anchors))
    return runs
