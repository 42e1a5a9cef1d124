"""What a file worker (``files.sandbox``) runs: a file read into its texts, and written back.

A parsed file (lxml trees, the writer holding them) does not pickle, so the two jobs are
independent: :func:`read_text` parses the file and returns what the translation service
needs (:class:`FileText`); :func:`write_file` parses the same bytes again and writes the
translations into them. Reading twice costs one more parse of the file, in a worker
(``benchmarks.files`` measures it: docs/operations.md); in exchange a worker is busy only
while it parses or writes, never while the engine decodes, so ``--file-workers`` bounds the
processes and not the files in flight.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import read
from .run_placement import MAX_ALIGNED_RUNS, Unit, place, place_aligned

# For each styled paragraph (by its text): the run each word of its translation prefers, or None
Preferred = dict[str, list[int | None] | None]


@dataclass(frozen=True)
class FileText:
    """A file's texts for the translation service (``files.Extracted`` without its writer)."""

    texts: tuple[str, ...]
    format: str
    media_type: str
    units: tuple[Unit, ...] = ()
    characters: int = 0  # of text: billed, and checked against --max-file-chars (``Extracted.characters``)


def read_text(
    filename: str, content: bytes, max_file_bytes: int, max_chars: int | None = None, target_language: str = ""
) -> FileText:
    """The file's texts; reading stops past ``max_chars`` characters of text (``TooManyCharacters``);
    ``target_language``: the request's (an XLIFF file's texts depend on it: ``files.read``)."""
    extracted = read(filename, content, max_file_bytes, max_chars, target_language)
    return FileText(extracted.texts, extracted.format, extracted.media_type, extracted.units, extracted.characters)


def write_file(
    filename: str,
    content: bytes,
    max_file_bytes: int,
    translations: Sequence[str],
    preferred: Preferred | None,
    max_runs: int = MAX_ALIGNED_RUNS,
    target_language: str = "",
) -> bytes:
    """The file with ``translations`` in place of its texts; a styled paragraph's words on the
    runs ``preferred`` names (``placement.place_aligned``, up to ``max_runs`` runs with words), else by
    proportion (``placement.place``). ``target_language``: the one the file was read for (``read_text``)."""
    extracted = read(filename, content, max_file_bytes, target_language=target_language, counting=False)
    if preferred is None:
        return extracted.write(translations, place)

    def placement(unit: Unit, translation: str) -> list[str]:
        return place_aligned(unit, translation, preferred.get(unit.text), max_runs)

    return extracted.write(translations, placement)
