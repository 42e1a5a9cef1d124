"""PDFs translated into a right-to-left language, without a model: an English PDF with a stand-in
Arabic or Hebrew translation, read back with PDFium. A reader sees each line right to left from
the box's right edge, Arabic letters joined, a number and an English word inside left to right,
and PDFium's text (what a reader copies or searches) is the translation."""

from __future__ import annotations

import ctypes
import unicodedata
from collections import Counter

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
import pytest

from attnserve.benchmarks.pdfs import Box, build
from attnserve.server import files
from attnserve.server.files.pdf_fonts import UNICODE_FONTS
from tests.support.pdf_pages import drawn_characters, pages

LIMIT = 1 << 20
HAS_FONT = pytest.mark.skipif(not any(__import__("os").path.exists(p) for p in UNICODE_FONTS), reason="no TTF here")
ENGLISH = "The new version of Python came out in March 2025 after a long wait (about a year)."
ARABIC = "صدر الإصدار الجديد من Python في مارس 2025 بعد انتظار طويل (نحو عام)."
HEBREW = "הגרסה החדשה של Python יצאה במרץ 2025 אחרי המתנה ארוכה (כשנה)."
PRESENTATION_FORMS = range(0xFE70, 0xFF00)  # Arabic Presentation Forms-B: each letter's joined forms


def glyph_lines(data: bytes) -> list[list[tuple[str, float]]]:
    """The page's characters in the order PDFium reads them (reading order), with the x of each
    glyph's origin, line by line (PDFium's generated line breaks between)."""
    doc = pdfium.PdfDocument(data)
    page = doc[0]
    textpage = page.get_textpage()
    lines: list[list[tuple[str, float]]] = [[]]
    x, y = ctypes.c_double(), ctypes.c_double()
    for k in range(pdfium_c.FPDFText_CountChars(textpage.raw)):
        ch = chr(pdfium_c.FPDFText_GetUnicode(textpage.raw, k))
        if ch in "\r\n":
            if lines[-1]:
                lines.append([])
            continue
        pdfium_c.FPDFText_GetCharOrigin(textpage.raw, k, x, y)
        lines[-1].append((ch, x.value))
    textpage.close()
    page.close()
    doc.close()
    return lines


def xs_of(lines: list[list[tuple[str, float]]], word: str) -> list[float]:
    """The glyph origins of ``word``'s characters, in reading order."""
    for line in lines:
        text = "".join(ch for ch, _ in line)
        if word in text:
            start = text.index(word)
            return [x for _, x in line[start : start + len(word)]]
    raise AssertionError(f"{word!r} is not on the page")


@HAS_FONT
@pytest.mark.parametrize("translation", [ARABIC, HEBREW], ids=["Arabic", "Hebrew"])
def test_a_translation_into_a_right_to_left_language_reads_right_to_left(translation):
    data, _ = build([[Box(ENGLISH, 56, 100, 250, 12)]])
    out = files.read("a.pdf", data, LIMIT).write([translation])
    # PDFium reads the drawn line back in reading order and maps presentation forms to their
    # letters (a lam-alef ligature to its two letters), as NFKC does: the translation itself
    (page,) = pages(out)
    assert page.text.replace("\r\n", " ") == translation
    lines = glyph_lines(out)
    assert len(lines) == 2 and len(page.texts) == 2  # the first words on the first line
    for line in lines:  # each line's words stand right to left: the first rightmost
        words = "".join(ch for ch, _ in line).split(" ")
        starts = [sum(len(w) + 1 for w in words[:i]) for i in range(len(words))]
        spans = [[x for _, x in line[start : start + len(w)]] for start, w in zip(starts, words)]
        assert all(min(a) > max(b) for a, b in zip(spans, spans[1:])), words
    first = translation.split()[0]
    assert xs_of(lines, first) == sorted(xs_of(lines, first), reverse=True)  # right to left
    for word in ("2025", "Python"):  # left to right inside
        xs = xs_of(lines, word)
        assert xs == sorted(xs) and len(set(xs)) == len(xs), word
    # every line right-aligned at the right edge of the source's block
    source_right = max(t.bounds[2] for t in pages(data)[0].texts)
    assert all(abs(t.bounds[2] - source_right) <= 1.0 for t in page.texts), (source_right, page.texts)


@HAS_FONT
def test_arabic_letters_are_drawn_joined():
    data, _ = build([[Box(ENGLISH, 56, 100, 250, 12)]])
    drawn = drawn_characters(files.read("a.pdf", data, LIMIT).write([ARABIC]))
    letters = [ch for ch in "".join(drawn) if unicodedata.bidirectional(ch) == "AL"]
    assert letters and all(ord(ch) in PRESENTATION_FORMS for ch in letters)  # none left unshaped
    # the line's right end is the first word, صدر: sad initial, dal final, reh alone (dal does
    # not join to its left), drawn left to right
    assert drawn[0].endswith("\ufead\ufeaa\ufebb")
    assert "\ufef9" in drawn[0]  # lam with alef with hamza below (الإصدار): one ligature glyph
    # the drawn characters are the translation's, in their forms
    assert Counter(unicodedata.normalize("NFKC", "".join(drawn).replace(" ", ""))) == Counter(ARABIC.replace(" ", ""))


@HAS_FONT
def test_hebrew_letters_are_drawn_as_they_are():
    data, _ = build([[Box(ENGLISH, 56, 100, 250, 12)]])
    drawn = drawn_characters(files.read("a.pdf", data, LIMIT).write([HEBREW]))
    assert Counter("".join(drawn).replace(" ", "")) == Counter(HEBREW.replace(" ", ""))
    assert drawn[0].endswith("השדחה הסרגה")  # the first words, rightmost
