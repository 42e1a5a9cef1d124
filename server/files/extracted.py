"""What a file format reader hands the translation service: texts, and how to write their translations back."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from attnserve.contract.deadline import Deadline

from ..documents import TEXT
from ..shared.errors import DeadlineExceeded
from .refusals import FileRefused, TooManyCharacters
from .run_placement import Placement, Unit, place

Check = Callable[[], None]  # raises the deadline's error once it has passed; called between units of work
Writer = Callable[[Sequence[str], Placement, Check], bytes]


def no_check() -> None:
    return None


def checker(deadline: Deadline | None) -> Check:
    """A :data:`Check` for ``deadline`` (None: one that never raises)."""
    if deadline is None:
        return no_check

    def check() -> None:
        if deadline.passed():
            raise DeadlineExceeded(deadline.message)

    return check


class Characters:
    """Characters of text read so far, counted against ``--max-file-chars`` as a reader goes, so a
    file over it is refused where the limit is crossed, not after all of it was read (None: no limit)."""

    def __init__(self, limit: int | None, counting: bool = True) -> None:
        self.limit, self.counted = limit, 0
        self.counting = counting  # False: a file read again to write its translation, counted when first read

    def add(self, count: int) -> None:
        self.counted += count
        if self.limit is not None and self.counted > self.limit:
            raise TooManyCharacters(self.counted, self.limit)

    @property
    def left(self) -> int | None:
        """Characters still allowed (None: no limit)."""
        return None if self.limit is None else self.limit - self.counted


@dataclass(frozen=True)
class Extracted:
    """A file's text, read for translation.

    ``texts``: what the model translates, in file order (paragraphs, subtitle cues, or a whole
    page of html), each with something in it; all go to the service as one request, so their
    sentences are decoded together. ``format``: the service's text format for all of them, one
    a file (``text``; ``html`` for .html, EPUB pages and .srt with styling tags; ``markdown`` for
    .md). ``write(translations, placement)``: the translated file, ``translations[i]`` in place
    of ``texts[i]``, ``placement`` putting a
    paragraph's translation onto its runs (``placement.place``, or ``placement.place_aligned``
    with word alignments). ``units``: for formats with runs, ``texts[i]``'s runs."""

    texts: tuple[str, ...]
    writer: Writer
    format: str = TEXT
    media_type: str = "application/octet-stream"
    units: tuple[Unit, ...] = ()  # the runs of each text, where the format has runs (office files, a PDF's links)
    counted: int | None = None  # characters of text as the reader counted them against --max-file-chars (files.read)

    def __post_init__(self) -> None:
        if not self.texts:
            raise FileRefused("the file has no text to translate")

    @property
    def characters(self) -> int:
        """Characters of text, billed as counted against ``--max-file-chars``: a text sent in the
        html mode is counted without its escapes (an EPUB 2 label's, a styled cue's ``&amp;`` is one
        ``&``), an html page (a .html file, an EPUB page) without its markup, an XLIFF segment
        without its inline tags."""
        return sum(map(len, self.texts)) if self.counted is None else self.counted

    def write(
        self, translations: Sequence[str], placement: Placement = place, deadline: Deadline | None = None
    ) -> bytes:
        """The translated file; ``deadline``'s error once it passes (checked between paragraphs and
        between a package's entries)."""
        if len(translations) != len(self.texts):
            raise ValueError(f"{len(translations)} translations for {len(self.texts)} texts")
        return self.writer(translations, placement, checker(deadline))


def unit_texts(units: Sequence[Unit]) -> tuple[str, ...]:
    return tuple(u.text for u in units)
