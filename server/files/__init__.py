"""Files to translate: a file's text units read into one request for the translation
service, and the translations written back with everything else in the file as it was.

``read(filename, data, max_file_bytes, max_chars=...)`` picks the format by the name's extension
and returns an :class:`Extracted` (texts + a writer); a reader counts the characters it reads
for translation as it goes and stops with :class:`TooManyCharacters` past ``max_chars``
(``--max-file-chars``), so a file over it costs the time of reading up to the limit, not all of
it. ``Extracted.write(translations, placement, deadline)`` checks the deadline between
paragraphs. Torch-free and engine-free, as ``server.documents``.

An .xlsx's cell strings and comments are replaced in place (``spreadsheets``), formulas,
numbers and sheet names never read; an XLIFF file's source segments are translated into its
targets (``xliff``), which of them depending on the target language (a file already translated
into it keeps its finished segments), so ``read`` takes the target language; a PDF's translations
are drawn in fonts of its script (``pdf_fonts``: Japanese kanji in Japanese shapes).

A PDF's text blocks are replaced in place (``pdf``, PDFium through pypdfium2): each block's
translation in the page's font where it has the glyphs, fitted to the block's box; images and
every other object kept.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

from .extracted import Characters, Extracted
from .packages import read_docx, read_epub, read_odp, read_odt, read_pptx
from .pdf import read_pdf
from .refusals import FileRefused, TooManyCharacters, UnsupportedFile
from .run_placement import MAX_ALIGNED_RUNS, Placement, Unit, holders, place, place_aligned, run_at, styled_spans
from .spreadsheets import read_xlsx
from .text_files import read_html, read_md, read_srt, read_txt
from .xliff import read_xliff

Reader = Callable[[bytes, int, Characters], Extracted]
READERS: dict[str, Reader] = {
    ".txt": read_txt,
    ".md": read_md,
    ".html": read_html,
    ".htm": read_html,
    ".srt": read_srt,
    ".docx": read_docx,
    ".pptx": read_pptx,
    ".xlsx": read_xlsx,
    ".odt": read_odt,
    ".odp": read_odp,
    ".epub": read_epub,
    ".pdf": read_pdf,
    ".xlf": read_xliff,
    ".xliff": read_xliff,
}
# Readers that take the language translated into (``read``'s ``target_language``): an XLIFF
# file's texts depend on it, a PDF's translations are drawn in its script's fonts (``pdf_fonts``)
BY_TARGET = frozenset({".xlf", ".xliff", ".pdf"})
SUPPORTED = tuple(READERS)
REFUSED = {
    ".doc": " (the binary Word format: save it as .docx)",
    ".ppt": " (the binary PowerPoint format: save it as .pptx)",
    ".xls": " (the binary Excel format: save it as .xlsx)",
}


def extension(filename: str) -> str:
    return os.path.splitext(filename)[1].lower()


def reader(filename: str) -> Reader:
    """The reader for ``filename``'s extension; UnsupportedFile (400) otherwise."""
    ext = extension(filename)
    if ext not in READERS:
        raise UnsupportedFile(filename, SUPPORTED, REFUSED.get(ext, ""))
    return READERS[ext]


def read(
    filename: str,
    data: bytes,
    max_file_bytes: int,
    max_chars: int | None = None,
    target_language: str = "",
    counting: bool = True,
) -> Extracted:
    """The texts of the file and how to write their translations back (see the module docstring);
    ``max_chars``: characters of text read at most (None: no limit); ``target_language``: the
    language translated into, as the request names it ("" : none named, for an XLIFF file the
    language it declares; a PDF's translations are drawn in fonts of its script). ``counting``
    False: read again to write, its characters were counted (an html page's not parsed for them)."""
    if not data:
        raise FileRefused("Invalid request: empty file")
    found, chars = reader(filename), Characters(max_chars, counting)
    if extension(filename) in BY_TARGET:
        extracted = found(data, max_file_bytes, chars, target_language)  # type: ignore[call-arg]
    else:
        extracted = found(data, max_file_bytes, chars)
    return dataclasses.replace(extracted, counted=chars.counted)  # billed as the limit counted them


__all__ = [
    "MAX_ALIGNED_RUNS", "READERS", "SUPPORTED", "Extracted", "FileRefused", "Placement",
    "TooManyCharacters", "Unit", "UnsupportedFile", "holders", "place", "place_aligned", "read", "run_at",
    "styled_spans",
]  # fmt: skip
