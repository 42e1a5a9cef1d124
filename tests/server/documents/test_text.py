"""format=text: lines, sentences and the separators between them come back exactly."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnserve.server.documents import Document, MarkupRules


def _marked(doc: Document) -> str:
    """The document with every segment translated as <<segment>>, to see where translations land."""
    return doc.join([f"<<{s.text}>>" for s in doc.segments])


def test_lines_are_translated_one_by_one_not_merged(splitter):
    # Issue 14: these two lines came back as one merged, wrong date.
    doc = splitter.split("Monday, March 3, 2025\nFriday, January 9, 2026").document
    assert _marked(doc) == "<<Monday, March 3, 2025>>\n<<Friday, January 9, 2026>>"


def test_two_sentences_on_one_line_keep_the_space_between_them(splitter):
    doc = splitter.split("Monday, March 3, 2025. Friday, January 9, 2026.").document
    assert _marked(doc) == "<<Monday, March 3, 2025.>> <<Friday, January 9, 2026.>>"
    doc = splitter.split("It costs €1,234.50.   The meeting is at 3:45 PM.").document
    assert _marked(doc) == "<<It costs €1,234.50.>>   <<The meeting is at 3:45 PM.>>"


def test_blank_lines_indentation_and_outer_whitespace_are_kept(splitter):
    text = "\n  at 3:45 PM\n\n\n\tin the 1980s.  \r\n    more than 1,500 miles\n\n"
    doc = splitter.split(text).document
    assert _marked(doc) == "\n  <<at 3:45 PM>>\n\n\n\t<<in the 1980s.>>  \r\n    <<more than 1,500 miles>>\n\n"


def test_extra_spaces_inside_a_sentence_are_collapsed_for_the_model_only(splitter):
    # Issue 14: "  Monday,   March  3,  2025  " came back as nonsense.
    prepared = splitter.split("  Monday,   March  3,\t 2025  ")
    assert prepared.sources == ("Monday, March 3, 2025",)
    assert prepared.document.separators == ("  ", "  ")
    assert prepared.document.join(["X"]) == "  X  "


def test_lines_without_letters_or_digits_are_kept_not_translated(splitter):
    doc = splitter.split("* * *\nin the 1980s\n---\n•").document
    assert _marked(doc) == "* * *\n<<in the 1980s>>\n---\n•"


def test_every_segment_comes_with_its_token_ids(splitter, tokenizer):
    prepared = splitter.split("Monday, March 3, 2025. at 3:45 PM")
    assert prepared.segments == 2
    assert [list(ids) for ids in prepared.ids] == [tokenizer.encode(s).ids for s in prepared.sources]


def test_a_translation_count_that_does_not_match_is_refused(splitter):
    doc = splitter.split("at 3:45 PM. in the 1980s.").document
    with pytest.raises(ValueError, match="1 translations for 2 segments"):
        doc.join(["x"])


# Any string, and strings built from the pieces documents are made of.
_PIECES = [*"ab Z9.,;:!?\n\r\t\u00a0\u2028-–€ﬁ", "  ", "\r\n", "Mr. ", "3.5", "e.g. ", "words and more words "]
_TEXTS = st.one_of(st.text(max_size=200), st.lists(st.sampled_from(_PIECES), max_size=80).map("".join))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_TEXTS)
def test_join_of_the_untouched_segments_is_the_input(text, splitter, tight):
    for s in (splitter, tight):
        prepared = s.split(text)
        assert prepared.document.join([seg.text for seg in prepared.document.segments]) == text
        for separator in prepared.document.separators[1:-1]:
            assert separator == "" or not any(ch.isalnum() for ch in separator)
        assert all(len(ids) <= s.budget.max_tokens for ids in prepared.ids)


def test_non_ascii_spaces_before_a_period_do_not_crash_the_segmenter(splitter):
    # sentencex 1.0.32 panics on "Z\u00a0." given as is (see sentences._SEGMENTER_SPACES).
    text = "Meeting Z\u00a0. At 9\u2009. In the 1980s\u3000."
    doc = splitter.split(text).document
    assert doc.join([s.text for s in doc.segments]) == text
    assert len(doc.segments) >= 1


def test_a_sentence_over_lines_is_one_with_lines_off_and_its_break_goes_back(splitter):
    """DeepL's split_sentences=nonewlines: a newline ends no sentence; the break is put back at
    the translation's space nearest its place, or, with no space for it, the sentence is on one line."""
    lines_off = MarkupRules(lines=False)
    prepared = splitter.split("Monday, March 3,\n  2025. at 3:45 PM\n", markup=lines_off)
    assert prepared.sources == ("Monday, March 3, 2025.", "at 3:45 PM")
    assert (
        prepared.document.join(["Montag, 3. März 2025.", "um 15:45 Uhr"]) == "Montag, 3. März\n  2025. um 15:45 Uhr\n"
    )
    wrapped = splitter.split("Thank\nyou", markup=lines_off).document
    assert wrapped.join(["Danke"]) == "Danke"  # not the source, untranslated
    whole = splitter.split("Monday, March 3, 2025. at 3:45 PM\n", markup=MarkupRules(lines=False, sentences=False))
    assert whole.sources == ("Monday, March 3, 2025. at 3:45 PM",)
    assert whole.document.join(["Montag, 3. März 2025. um 15:45 Uhr"]) == "Montag, 3. März 2025. um 15:45 Uhr\n"
