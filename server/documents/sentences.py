"""Runs of plain text and the sentences in them.

A run is text between hard boundaries: the whole input for ``format=text``, the text between
two block-level tags for html. Its sentences come from sentencex (Wikimedia's rule-based
segmenter: ~300 languages, no dependencies, compiled, so a 10,000-character document
segments in well under a millisecond; pysbd, tried on the same inputs, dropped characters
of 2% of random strings and was ~1,500x slower). Newlines end sentences in text, and in
html only inside ``<pre>``; elsewhere in html they are spaces, as a browser shows them.
"""

from __future__ import annotations

import bisect
import logging
import re
from dataclasses import dataclass, field

import sentencex

from ..shared import stopping
from .document import SourceMap

log = logging.getLogger(__name__)

# Line breaks as str.splitlines() knows them; "\r\n" is one break.
LINE_BREAK = re.compile(r"\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
_BREAKS_TO_SPACES = str.maketrans({ch: " " for ch in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"})
# sentencex 1.0.32 panics (a Rust slice at a byte offset) on a capital, a non-ASCII space and a
# period ("Z\u00a0."); seen as ASCII spaces, 80,000 random strings in four languages pass. The
# pieces it returns are only measured, so any one-for-one replacement keeps the offsets right.
_SEGMENTER_SPACES = str.maketrans({c: " " for c in range(0x80, 0x3001) if chr(c).isspace()})

OPEN, CLOSE, VOID = "open", "close", "void"


@dataclass(frozen=True)
class Anchor:
    """Inline markup at a position of the plain text (html): a tag or a comment."""

    position: int  # plain offset: the markup sits before plain[position]
    raw_start: int
    raw_end: int
    kind: str  # OPEN, CLOSE or VOID (void elements, comments)
    name: str = ""  # what pairs an opening anchor with its closing one ("": html's tag name)


@dataclass
class Run:
    plain: str
    map: SourceMap
    lines: bool = True  # newlines end sentences
    anchors: list[Anchor] = field(default_factory=list)  # in position order

    def __post_init__(self) -> None:
        self._positions = [a.position for a in self.anchors]

    def anchors_inside(self, start: int, end: int) -> list[Anchor]:
        """The anchors strictly between plain offsets ``start`` and ``end``, by bisection: a
        document of thousands of inline tags must not cost segments x anchors."""
        lo = bisect.bisect_right(self._positions, start)
        return self.anchors[lo : bisect.bisect_left(self._positions, end, lo)]


def translatable(text: str) -> bool:
    """Whether a piece has anything to translate: a letter or a digit. Punctuation, symbols and
    markup alone ("***", "•", ",") stay as they are, as separators."""
    return any(ch.isalnum() for ch in text)


def trim(plain: str, start: int, end: int) -> tuple[int, int]:
    """``(start, end)`` without the whitespace at either end."""
    while start < end and plain[start].isspace():
        start += 1
    while end > start and plain[end - 1].isspace():
        end -= 1
    return start, end


def _lines(plain: str) -> list[tuple[int, int]]:
    spans, start = [], 0
    for m in LINE_BREAK.finditer(plain):
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(plain)))
    return spans


def sentence_spans(plain: str, language: str, lines: bool) -> list[tuple[int, int]]:
    """Sentences of ``plain`` as (start, end) offsets, trimmed of whitespace, only translatable ones."""
    chunks = _lines(plain) if lines else [(0, len(plain))]
    spans = []
    for start, end in chunks:
        stopping.check()  # a text of many lines: its request's client may have gone meanwhile
        text = plain[start:end] if lines else plain.translate(_BREAKS_TO_SPACES)
        if not translatable(text):
            continue
        pieces = _segment(language, text.translate(_SEGMENTER_SPACES))
        offset = start
        for piece in pieces:
            s, e = trim(plain, offset, offset + len(piece))
            offset += len(piece)
            if translatable(plain[s:e]):
                spans.append((s, e))
    return spans


def _segment(language: str, text: str) -> list[str]:
    """sentencex's sentences of ``text``, which add up to it; the text whole if they do not."""
    try:
        pieces = list(sentencex.segment(language, text))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # a Rust panic arrives as pyo3's PanicException, a BaseException
        log.warning("sentencex failed on a %d-character line; keeping it as one sentence", len(text), exc_info=True)
        return [text]
    if "".join(pieces) != text:  # never seen; the document must still come back whole
        log.warning("sentencex did not return its input in pieces; keeping a %d-character line whole", len(text))
        return [text]
    return pieces


def in_word(plain: str, position: int) -> bool:
    return 0 < position < len(plain) and plain[position - 1].isalnum() and plain[position].isalnum()


def cut_at_markup(run: Run, spans: list[tuple[int, int]], only: set[int] | None = None) -> list[tuple[int, int]]:
    """Cut sentences at the inline markup inside them where it stands between words, so the
    markup stays exactly where it was and each piece is translated on its own; markup inside
    a word (``H<sub>2</sub>O``) cannot be placed in a translation and stays inside its piece
    (its tags are moved to the piece's ends when it is rendered, see ``Segment``). ``only``:
    cut at these plain offsets only (markup placed by alignment is not cut at)."""
    if not run.anchors:
        return spans
    positions = {a.position for a in run.anchors} if only is None else only
    cuts = sorted({p for p in positions if not in_word(run.plain, p)})
    out = []
    for start, end in spans:
        inside = cuts[bisect.bisect_right(cuts, start) : bisect.bisect_left(cuts, end)]
        edges = [start, *inside, end]
        for s, e in zip(edges, edges[1:]):
            s, e = trim(run.plain, s, e)
            if s > start:  # "</a>, at 9": the comma after the markup stays with it, as it was
                while s < e and run.plain[s] in ",;:":
                    s += 1
                s, e = trim(run.plain, s, e)
            if translatable(run.plain[s:e]):
                out.append((s, e))
    return out
