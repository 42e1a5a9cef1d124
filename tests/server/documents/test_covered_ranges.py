"""The one placement of styled stretches (html and markdown elements, a file's runs): the target
words each covers, and where an element whose other tag lies outside its sentence goes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from attnserve.server.documents.alignment import word_spans
from attnserve.server.documents.placement import InlineElement, covered_ranges, covering, place_markup

SOURCE = "more than 1,500 miles and $1,250.00"
GERMAN = "mehr als 1.500 Meilen"  # the bundled translator leaves "and $1,250.00" out
LINKS = [(0, 0), (1, 1), (2, 2), (3, 3)]


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


def test_an_unlinked_element_whose_closing_tag_follows_the_sentence_wraps_nothing():
    spans = (word_spans(SOURCE), word_spans(GERMAN))
    # "... and <i>$1,250.00</i>": the sentence holds "<i>", its "</i>" follows the sentence
    tail = InlineElement(26, 35, "<i>", "")
    assert place_markup(GERMAN, [tail], LINKS, *spans, source=SOURCE) == GERMAN + "<i>"  # not "<i>Meilen"
    head = InlineElement(0, 4, "", "</b>")  # "<b>more</b> than ...": "<b>" before the sentence
    assert place_markup(GERMAN, [head], [(1, 1)], *spans, source=SOURCE) == "</b>" + GERMAN
    inside = InlineElement(22, 25, "<i>", "</i>")  # "<i>and</i>": where its place maps
    assert place_markup(GERMAN, [inside], LINKS, *spans, source=SOURCE) == "mehr als 1.500 <i></i>Meilen"
