"""The one placement of styled stretches (html and markdown elements, a file's runs): the target
words each covers."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from attnserve.server.documents.placement import covered_ranges, covering


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
