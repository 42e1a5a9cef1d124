"""The one placement of styled stretches (html and markdown elements, a file's runs): the target
words each covers, and a run none of whose words is linked."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from attnserve.server.documents.alignment import WordAlignment, word_spans
from attnserve.server.documents.placement import covered_ranges, covering
from attnserve.server.files import Unit, place_aligned
from attnserve.server.service.run_alignment import preferences


def test_a_stretch_covers_from_its_first_to_its_last_linked_target_word():
    # "on <b>Friday, January 9, 2026</b> at <i>3:45 PM</i>" -> "am Freitag, 9. Januar 2026 um 15:45 Uhr"
    stretch_of_word = [0, 1, 1, 1, 1, 2, 3, 3]
    links = [(0, 0), (1, 1), (3, 2), (2, 3), (4, 4), (6, 5), (6, 6), (6, 7)]
    ranges = covered_ranges(stretch_of_word, links, 4)
    assert ranges == [(0, 0), (1, 4), None, (5, 7)]  # " at " covers nothing: "um" is linked to 3:45
    assert covering(ranges, 8) == [0, 1, 1, 1, 1, 3, 3, 3]
    # nested ranges: the narrowest stretch holds its words, the wider one the rest
    assert covering([(0, 4), (2, 2)], 6) == [0, 0, 1, 0, 0, None]


@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), max_size=30), st.integers(1, 4))
@settings(max_examples=200, deadline=None)
def test_covering_gives_each_word_one_stretch_whose_range_holds_it(links, stretches):
    stretch_of_word = [i % (stretches + 1) if i % (stretches + 1) < stretches else None for i in range(10)]
    ranges = covered_ranges(stretch_of_word, links, stretches)
    for j, k in enumerate(covering(ranges, 10)):
        holding = [r for r in ranges if r is not None and r[0] <= j <= r[1]]
        if k is None:
            assert not holding
        else:
            assert ranges[k][0] <= j <= ranges[k][1] and ranges[k][1] - ranges[k][0] == min(b - a for a, b in holding)


def run_preferences(translation: str, links: list[tuple[int, int]]) -> list[int | None] | None:
    unit = Unit(("more than ", "1,500", " miles and ", "$1,250.00"), ("", "", ""))
    alignment = WordAlignment(
        unit.text, translation, tuple(links), tuple(word_spans(unit.text)), tuple(word_spans(translation)), np.zeros(0)
    )
    return preferences(unit, translation, [alignment])


def test_a_run_none_of_whose_words_is_linked_takes_the_word_its_place_maps_to_as_an_element_does():
    german = "mehr als 1.500 Meilen und 1.250,00 $"
    wants = run_preferences(german, [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)])
    assert wants == [0, 0, 1, 2, 2, None, 3]  # "$1,250.00" unlinked: the last word, as html's <i>$</i>
    assert place_aligned(Unit(("more than ", "1,500", " miles and ", "$1,250.00"), ("", "", "")), german, wants) == [
        "mehr als ", "1.500 ", "Meilen und 1.250,00 ", "$"
    ]  # fmt: skip
    # where that word is another run's, the run is left empty (its style stays on its element)
    assert run_preferences("mehr als 1.500 Meilen", [(0, 0), (1, 1), (2, 2), (3, 3)]) == [0, 0, 1, 2]
