"""A document split for translation: segments (what the model translates) between separators
(what comes back exactly as sent).

``Document.join(translations)`` puts a translation in place of every segment and keeps every
separator: newlines, blank lines, indentation, leading and trailing whitespace, the spaces
between sentences and, for html, the markup between text runs. A segment whose translation is
its own text comes back as its exact source, so ``doc.join([s.text for s in doc.segments])``
is the input, character for character (the property tests/server/documents checks).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from . import structure
from .alignment import WordAlignment
from .placement import InlineElement, place_markup, wrap_whole

_HTML_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


@dataclass(frozen=True)
class Segment:
    """One sentence (or a piece of one) of the input."""

    source: str  # the exact span of the input it stands for (html: with its entities and inline tags)
    text: str  # what the model translates: entities decoded, markup left out; not normalised yet
    before: str = ""  # html: tags inside a word of the sentence, moved before its translation
    after: str = ""  # html: their closing tags, moved after it
    references: tuple[tuple[str, str], ...] = ()  # html: (character, the entity that spelled it)
    html: bool = False
    # Inline markup inside the sentence, placed in the translation by word alignment;
    # without an alignment, or with more than placement.MAX_PLACED_ELEMENTS of it, its opening markup goes
    # before the translation, its closing after.
    inline: tuple[InlineElement, ...] = ()
    markdown: bool = False
    # html and markdown: the line breaks inside the sentence, (offset in ``text``, as spelled in the
    # input with the next line's indentation or quote markers), put back into its translation
    breaks: tuple[tuple[int, str], ...] = ()
    begins_line: bool = False  # markdown: only indentation and container markers before it on its line

    @property
    def rendered_whole(self) -> bool:
        """Whether its translation must be rendered whole (escapes, references, moved markup, line
        breaks), so a stream sends it with its last token rather than delta by delta."""
        markup = self.html or self.markdown
        return markup or bool(self.before or self.after or self.references or self.inline or self.breaks)

    def render(self, translation: str, alignment: WordAlignment | None = None) -> str:
        """The translation in the sentence's place; html and markdown (and a text's sentence over
        lines) keep their structure whatever it says (``structure``): its newlines are spaces, the
        sentence's own line breaks go back in, and one with nothing to show (no letter or digit) or
        too few words for the lines leaves the sentence as sent."""
        if translation == self.text:
            return self.source
        if not (self.html or self.markdown or self.breaks):
            return self._placed(translation, alignment)
        translation = structure.one_line(translation)
        places = structure.break_places(len(self.text), [at for at, _ in self.breaks], translation)
        if places is None and not (self.html or self.markdown):  # a text's sentence: on one line, then
            return self._placed(translation, alignment)
        if not structure.shows_something(translation) or places is None:
            return self.source
        rendered = self._placed(structure.mark_breaks(translation, places), alignment)
        rendered = structure.restore_breaks(rendered, [spelled for _, spelled in self.breaks], self.markdown)
        return structure.escape_line_start(rendered) if self.begins_line else rendered  # "- " is no list item

    def _placed(self, translation: str, alignment: WordAlignment | None) -> str:
        if not self.inline:
            return self.before + self._escape(translation) + self.after
        if alignment is None:
            return wrap_whole(translation, self.inline, self._escape)
        a = alignment
        spans = (a.links, a.source_spans, a.target_spans)
        return place_markup(translation, self.inline, *spans, escape=self._escape, source=self.text)

    def _escape(self, text: str) -> str:
        """html: ``&<>`` escaped; markdown: its specials escaped (``structure.escape_markdown``);
        html and markdown: characters the source spelled as a reference or a backslash escape
        spelled the same way (``\\*`` stays ``\\*``, not emphasis)."""
        spelled = dict(self.references)
        spelled.pop(structure.BREAK, None)  # a line break's place, never the source's character
        if self.markdown:
            return structure.escape_markdown(text, spelled)
        if not self.html:
            return "".join(spelled.get(ch, ch) for ch in text) if spelled else text
        return "".join(spelled.get(ch) or _HTML_ESCAPES.get(ch, ch) for ch in text)


@dataclass(frozen=True)
class Document:
    separators: tuple[str, ...]  # len(segments) + 1, kept exactly as sent
    segments: tuple[Segment, ...]

    def __post_init__(self) -> None:
        assert len(self.separators) == len(self.segments) + 1, "one more separator than segments"

    def join(self, translations: Sequence[str], alignments: Sequence[WordAlignment | None] | None = None) -> str:
        """The document with ``translations[i]`` in place of segment i (its inline markup placed
        by ``alignments[i]`` where given)."""
        if len(translations) != len(self.segments):
            raise ValueError(f"{len(translations)} translations for {len(self.segments)} segments")
        aligned = alignments if alignments is not None else [None] * len(translations)
        out = [self.separators[0]]
        for segment, translation, alignment, separator in zip(
            self.segments, translations, aligned, self.separators[1:]
        ):
            out += (segment.render(translation, alignment), separator)
        return "".join(out)

    @property
    def source(self) -> str:
        """The input, rebuilt from separators and segment sources."""
        return self.join([s.text for s in self.segments])


@dataclass(frozen=True)
class Piece:
    """A stretch of plain text and the stretch of the input it was read from."""

    plain_start: int
    plain_end: int
    raw_start: int
    raw_end: int
    reference: bool = False  # an html character reference: one or two characters for a longer spelling


class SourceMap:
    """Offsets in a run's plain text -> offsets in the input.

    Text is its own plain text (one piece, offsets shifted); html text runs are pieces of
    character data, each character where it was, and character references, whose
    characters stand for the whole reference."""

    def __init__(self, pieces: Sequence[Piece]) -> None:
        self.pieces = list(pieces)
        self._starts = [p.plain_start for p in self.pieces]

    @classmethod
    def identity(cls, raw_start: int, length: int) -> SourceMap:
        return cls([Piece(0, length, raw_start, raw_start + length)])

    def _piece(self, p: int) -> Piece:
        return self.pieces[max(0, bisect.bisect_right(self._starts, p) - 1)]

    def start(self, p: int) -> int:
        """Where plain character ``p`` begins in the input."""
        piece = self._piece(p)
        if piece.reference or p >= piece.plain_end:
            return piece.raw_start if p < piece.plain_end else piece.raw_end
        return piece.raw_start + (p - piece.plain_start)

    def end(self, p: int) -> int:
        """Where plain character ``p - 1`` ends in the input."""
        piece = self._piece(p - 1)
        if piece.reference:
            return piece.raw_end
        return piece.raw_start + (p - piece.plain_start)

    def splits_reference(self, p: int) -> bool:
        """Whether ``p`` falls between the characters of one reference (a cut there would split it)."""
        piece = self._piece(p)
        return piece.reference and piece.plain_start < p < piece.plain_end

    def references(self, start: int, end: int, plain: str, raw: str) -> tuple[tuple[str, str], ...]:
        """(character, its spelling in the input) for the references inside plain[start:end]."""
        out: dict[str, str] = {}
        i = max(0, bisect.bisect_right(self._starts, start) - 1)
        for j in range(i, len(self.pieces)):  # by index: a slice would copy every later piece each call
            piece = self.pieces[j]
            if piece.plain_start >= end:
                break
            if piece.reference and piece.plain_end - piece.plain_start == 1 and piece.plain_start >= start:
                out.setdefault(plain[piece.plain_start], raw[piece.raw_start : piece.raw_end])
        return tuple(out.items())
