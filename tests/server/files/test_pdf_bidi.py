"""A line's order on the page and in reading, both ways (server/files/pdf_bidi.py): the visual
orders below are the Unicode bidi algorithm's (python-bidi's reference implementation gives the
same), and reading them back gives the line as typed."""

from __future__ import annotations

import pytest

from attnserve.server.files.pdf_bidi import logical, visual

CASES = [  # (reading order, paragraph right to left, order on the page left to right)
    ("שלום (עולם) 2025", True, "2025 (םלוע) םולש"),  # brackets mirrored, the number left to right
    ("גרסה 3.12 של Python יצאה", True, "האצי Python לש 3.12 הסרג"),
    ('אבג: "Python 3" דהו!', True, '!והד "Python 3" :גבא'),  # a number after a Latin word is its text
    ("Windows 11 על מחשב", True, "בשחמ לע Windows 11"),
    ('מחיר: 1,500 ש"ח - 5%', True, '5% - ח"ש 1,500 :ריחמ'),  # separators and signs keep with the number
    ("مرحبا بالعالم، عام 2025.", True, ".2025 ماع ،ملاعلاب ابحرم"),
    ("ABC (אבג) def", False, "ABC (גבא) def"),
    # a pair of brackets takes one direction (the algorithm's rule N0): an English word's
    # brackets, after it and around English, keep with it; where they were read apart, the line
    # read from the page and a translation drawn on it each had them broken: "(abc (def"
    ("שלום abc (def) עולם", True, "םלוע abc (def) םולש"),
    ("גרסה Python (3.12) יצאה", True, "האצי Python (3.12) הסרג"),
    ("abc def (שלום) עולם", False, "abc def (םולש) םלוע"),
    ("שלום (abc) עולם", True, "םלוע (abc) םולש"),  # in Hebrew, around English: mirrored
    ("שלום (abc (def) ghi) עולם", True, "םלוע (abc (def) ghi) םולש"),
    ("Hello 2025 world", False, "Hello 2025 world"),
]


@pytest.mark.parametrize(("typed", "rtl", "drawn"), CASES)
def test_a_line_is_drawn_in_the_bidi_algorithms_order_and_read_back_as_typed(typed, rtl, drawn):
    assert visual(typed, rtl) == drawn
    assert logical(drawn, rtl) == typed
