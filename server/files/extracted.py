"""What a file format reader hands the translation service: texts, and how to write their translations back."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..documents import TEXT
from .errors import FileRefused
from .placement import Placement, Unit, place

Writer = Callable[[Sequence[str], Placement], bytes]


@dataclass(frozen=True)
class Extracted:
    """A file's text, read for translation.

    ``texts``: what the model translates, in file order (paragraphs, subtitle cues, or a whole
    page of html), each with something in it; all go to the service as one request, so their
    sentences are decoded together. ``format``: the service's text format for all of them
    (``text``, or ``html`` for .html and EPUB pages). ``write(translations, placement)``: the
    translated file, ``translations[i]`` in place of ``texts[i]``, ``placement`` putting a
    paragraph's translation onto its runs (``placement.place``, or ``placement.place_aligned``
    with word alignments). ``units``: for formats with runs, ``texts[i]``'s runs."""

    texts: tuple[str, ...]
    writer: Writer
    format: str = TEXT
    media_type: str = "application/octet-stream"
    units: tuple[Unit, ...] = ()  # the runs of each text, where the format has runs (office files)

    def __post_init__(self) -> None:
        if not self.texts:
            raise FileRefused("the file has no text to translate")

    @property
    def characters(self) -> int:
        return sum(map(len, self.texts))

    def write(self, translations: Sequence[str], placement: Placement = place) -> bytes:
        if len(translations) != len(self.texts):
            raise ValueError(f"{len(translations)} translations for {len(self.texts)} texts")
        return self.writer(translations, placement)


def unit_texts(units: Sequence[Unit]) -> tuple[str, ...]:
    return tuple(u.text for u in units)
