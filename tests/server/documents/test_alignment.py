"""Word alignments from subword attention, and inline markup placed by them (issue 34), with
given attention and alignments: no model."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnserve.server.documents import DocumentSplitter
from attnserve.server.documents.alignment import (
    WordAlignment,
    align_words,
    word_attention,
    word_of_offsets,
    word_of_prefixes,
    word_spans,
)
from attnserve.server.documents.placement import InlineElement, place_markup
from attnserve.server.files.run_placement import Unit, styled_spans
from tests.support.bounded import within


def _alignment(source: str, target: str, links: str) -> WordAlignment:
    pairs = tuple((int(i), int(j)) for i, j in (link.split("-") for link in links.split()))
    spans = word_spans(source), word_spans(target)
    return WordAlignment(source, target, pairs, tuple(spans[0]), tuple(spans[1]), np.zeros((0, 0)))


def test_tokens_map_to_the_whitespace_words_they_fall_in():
    text = "monday, march 3"
    # "monday" "," " march" " 3" and an end token without characters
    assert word_of_offsets(text, [(0, 6), (6, 7), (7, 13), (13, 15), (0, 0)]) == [0, 0, 1, 2, None]
    # byte-level pieces decoded prefix by prefix: "Mon" "tag" "," " 3" "." and the end token
    assert word_of_prefixes(["Mon", "Montag", "Montag,", "Montag, 3", "Montag, 3.", "Montag, 3."]) == [
        0,
        0,
        0,
        1,
        1,
        None,
    ]


def test_source_subwords_sum_target_subwords_average_and_specials_drop():
    # target tokens: t0, t1 (word 0), t2 (word 1); source tokens: s0, s1 (word 0), s2 (word 1), eos
    attention = np.array(
        [
            [0.2, 0.2, 0.1, 0.5],  # t0: the end token holds half
            [0.1, 0.1, 0.6, 0.2],
            [0.3, 0.3, 0.35, 0.05],  # word 1: 0.6 on source word 0 split over two pieces
        ],
        dtype=np.float32,
    )
    words = word_attention(attention, [0, 0, 1, None], [0, 0, 1], (2, 2))
    np.testing.assert_allclose(words.sum(axis=1), [1.0, 1.0], rtol=1e-6)
    # word 0: mean of (0.4, 0.1) and (0.2, 0.6) renormalised without the end token
    np.testing.assert_allclose(words[0], [0.3 / 0.65, 0.35 / 0.65], rtol=1e-5)
    # summing the pieces makes source word 0 (0.6) win over word 1 (0.35); its best piece (0.3) would lose
    links = align_words("a b", "x y", attention, [0, 0, 1, None], [0, 0, 1]).links
    assert links == ((1, 0), (0, 1))


@pytest.mark.parametrize(
    ("source", "elements", "expected"),
    [
        # issue 34's examples: the tags move with the words they wrap
        ("Monday, March 3, 2025", [InlineElement(8, 13, "<i>", "</i>")], "Montag, 3. <i>März</i> 2025"),
        ("Monday, March 3, 2025", [InlineElement(8, 15, "<b>", "</b>")], "Montag, <b>3. März</b> 2025"),
        # nested: the wider opens first and closes last
        (
            "Monday, March 3, 2025",
            [InlineElement(8, 15, "<b>", "</b>"), InlineElement(8, 13, "<i>", "</i>")],
            "Montag, <b>3. <i>März</i></b> 2025",
        ),
        # void markup before the target word of the source word it preceded
        ("Monday, March 3, 2025", [InlineElement(17, 17, "<br>")], "Montag, 3. März <br>2025"),
    ],
)
def test_markup_follows_the_aligned_words(source, elements, expected):
    a = _alignment(source, "Montag, 3. März 2025", "0-0 2-1 1-2 3-3")
    got = place_markup(a.target, elements, a.links, a.source_spans, a.target_spans, source=source)
    assert got == expected


def test_punctuation_outside_the_element_stays_outside():
    source = "on Friday, January 10"
    a = _alignment(source, "am Freitag, 10. Januar", "0-0 1-1 2-3 3-2")
    link = [InlineElement(3, 9, '<a href="x">', "</a>")]  # "<a>Friday</a>,"
    assert place_markup(a.target, link, *a_spans(a), source=source) == 'am <a href="x">Freitag</a>, 10. Januar'
    wider = [InlineElement(3, 10, "<a>", "</a>")]  # "<a>Friday,</a>"
    assert place_markup(a.target, wider, *a_spans(a), source=source) == "am <a>Freitag,</a> 10. Januar"


def a_spans(a: WordAlignment):
    return a.links, a.source_spans, a.target_spans


def test_html_sentences_keep_inline_tags_whole_and_join_by_alignment(splitter: DocumentSplitter):
    html = "<p>Monday, <i>March</i> 3, 2025</p><p>Monday, <b>March 3</b>, 2025</p>"
    prepared = splitter.split(html, "html", place_inline=True)
    assert [s.text for s in prepared.document.segments] == ["Monday, March 3, 2025"] * 2  # not cut at the tags
    target = "Montag, 3. März 2025"
    aligned = [_alignment("Monday, March 3, 2025", target, "0-0 2-1 1-2 3-3")] * 2
    joined = prepared.document.join([target, target], aligned)
    assert joined == "<p>Montag, 3. <i>März</i> 2025</p><p>Montag, <b>3. März</b> 2025</p>"
    # without an alignment (never given by the service; a safety net) no tag is lost
    assert (
        prepared.document.join([target, target])
        == "<p><i>Montag, 3. März 2025</i></p><p><b>Montag, 3. März 2025</b></p>"
    )
    # the same document cut at its tags, as before issue 34
    cut = splitter.split(html, "html")
    assert [s.text for s in cut.document.segments] == ["Monday,", "March", "3, 2025", "Monday,", "March 3", "2025"]


def test_html_in_the_translation_is_escaped_around_placed_tags(splitter: DocumentSplitter):
    prepared = splitter.split("<p>at <b>3:45</b> PM &amp; later</p>", "html", place_inline=True)
    (segment,) = prepared.document.segments
    target = "um <15:45> Uhr & später"
    a = _alignment(segment.text, target, "0-0 1-1 2-2 3-3 4-4")
    assert prepared.document.join([target], [a]) == "<p>um <b>&lt;15:45&gt;</b> Uhr &amp; später</p>"


def test_elements_set_off_by_punctuation_at_a_sentence_edge_are_phrases_of_their_own(splitter: DocumentSplitter):
    def texts(html: str) -> list[str]:
        return [s.text for s in splitter.split(html, "html", place_inline=True).document.segments]

    # a small phrase model translates these best one at a time, as before issue 34
    assert texts("<li>Monday, March 3, 2025: <b>9:00 AM–5:30 PM</b></li>") == [
        "Monday, March 3, 2025:",
        "9:00 AM–5:30 PM",
    ]
    assert texts('<li><b>Friday, January 9, 2026</b>, <a href="#late">at 3:45 PM</a></li>') == [
        "Friday, January 9, 2026",
        "at 3:45 PM",
    ]
    # part of a phrase, or inside the sentence: kept whole, placed by alignment
    assert texts("<p>more than <b>1,500 miles</b></p>") == ["more than 1,500 miles"]
    assert texts("<p>Monday, <b>March 3</b>, 2025</p>") == ["Monday, March 3, 2025"]


_PIECES = [
    "Monday, ",
    "March ",
    "3, ",
    "2025",
    ". ",
    "<b>",
    "</b>",
    "<i>",
    "</i>",
    "<a href='x'>",
    "</a>",
    "<br>",
    "<!-- c -->",
    "&amp; ",
    "H<sub>2</sub>O ",
    "<p>",
    "</p>",
    "<span translate=no>x</span> ",
    "at 3:45 PM",
]
_MD_PIECES = [
    "Monday, ",
    "*March* ",
    "**3**, ",
    "2025",
    "\n",
    "\n\n",
    "# ",
    "- ",
    "> ",
    "`code` ",
    "[at](u) ",
    "![i](p) ",
    "\\* ",
    "&amp; ",
    "| a | b |\n|---|---|\n",
    "```\nx\n```\n",
    "<b>",
    "</b>",
    "_x_ ",
]


def _translate_all(prepared, seed: int) -> str:
    """Every segment "translated" to its words reversed, with some alignment (links to random
    source words, target words left out): joining must never fail nor lose markup."""
    import random

    rng = random.Random(seed)
    texts, aligned = [], []
    for segment in prepared.document.segments:
        target = " ".join(reversed(segment.text.split()))
        source_spans, target_spans = word_spans(segment.text), word_spans(target)
        links = tuple(
            (rng.randrange(len(source_spans)), j)
            for j in range(len(target_spans))
            if source_spans and rng.random() < 0.8
        )
        texts.append(target)
        aligned.append(
            WordAlignment(segment.text, target, links, tuple(source_spans), tuple(target_spans), np.zeros(0))
        )
    return prepared.document.join(texts, aligned)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(st.sampled_from(_PIECES), max_size=40), seed=st.integers(0, 1000))
def test_html_placed_by_any_alignment_keeps_every_tag(pieces, seed, splitter):
    html = "".join(pieces)
    prepared = splitter.split(html, "html", place_inline=True)
    assert prepared.document.join([s.text for s in prepared.document.segments]) == html  # untouched: the input
    tags = re.compile(r"<[^>]*>")
    translated = _translate_all(prepared, seed)
    assert Counter(tags.findall(translated)) == Counter(tags.findall(html))
    if _well_formed(html):  # and it nests as the input did
        assert _well_formed(translated), translated


def _well_formed(html: str) -> bool:
    stack = []
    for closing, name in re.findall(r"<(/?)(b|i|a|sub)\b[^>]*>", html):
        if not closing:
            stack.append(name)
        elif not stack or stack.pop() != name:
            return False
    return not stack


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(st.sampled_from(_MD_PIECES), max_size=40), seed=st.integers(0, 1000))
def test_markdown_placed_by_any_alignment_round_trips_and_never_fails(pieces, seed, splitter):
    text = "".join(pieces)
    for place_inline in (True, False):
        prepared = splitter.split(text, "markdown", place_inline=place_inline)
        assert prepared.document.join([s.text for s in prepared.document.segments]) == text
        _translate_all(prepared, seed)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(alphabet=st.sampled_from(list("ab 12,.*_`[]()<>!#>|-\\&;\n\t")), max_size=80))
def test_any_markdown_comes_back_as_sent_when_untouched(text, splitter):
    prepared = splitter.split(text, "markdown", place_inline=True)
    assert prepared.document.join([s.text for s in prepared.document.segments]) == text
    _translate_all(prepared, len(text))  # and any translation and alignment joins


def test_markup_stays_well_formed_when_aligned_words_cross():
    source = "Monday March 3"
    a = _alignment(source, "x y z", "0-0 0-1 1-1 1-2")  # "Monday" -> x y, "March" -> y z: they cross
    crossing = [InlineElement(0, 6, "<b>", "</b>"), InlineElement(7, 12, "<i>", "</i>")]
    assert place_markup(a.target, crossing, *a_spans(a), source=source) == "<b>x y</b> <i>z</i>"
    nested = [InlineElement(0, 14, "<b>", "</b>"), InlineElement(7, 12, "<i>", "</i>")]  # <b>Monday <i>March</i> 3</b>
    b = _alignment(source, "x y z", "0-1 1-0 2-2")  # "March" lands before the start of "Monday"'s words
    assert place_markup(b.target, nested, *a_spans(b), source=source) == "<b><i>x</i> y z</b>"


def test_a_sentence_of_6000_inline_elements_keeps_them_all_in_bounded_time(splitter: DocumentSplitter):
    # placing markup by alignment compares each element with every one placed before it: 4,000
    # empty <b></b> in one sentence took 20 s; above MAX_PLACED_ELEMENTS they go around the
    # translation as without an alignment. Asked of a child limited to 10 CPU seconds.
    html = "<p>Monday " + "<b></b>" * 6_000 + " March 3</p>"
    prepared = splitter.split(html, "html", place_inline=True)
    (segment,) = prepared.document.segments
    target = "Montag 3. März"
    aligned = [_alignment(segment.text, target, "0-0 1-2 2-1")]
    kind, joined = within(prepared.document.join, [target], aligned, cpu_seconds=10)
    assert kind == "ok" and joined.count("<b>") == joined.count("</b>") == 6_000  # every tag, well formed
    assert re.sub("</?b>", "", joined) == "<p>Montag 3. März</p>"


@pytest.mark.parametrize(
    "runs",
    [
        [("Monday, March 3, 2025: ", ""), ("9:00 AM–5:30 PM", "b")],
        [("Friday, January 9, 2026", "b"), (", ", ""), ("at 3:45 PM", "a")],
        [("On Friday", "b"), (", we met.", "")],
        [("more than ", ""), ("1,500 miles", "b")],
        [("Monday, ", ""), ("March 3", "b"), (", 2025", "")],
        [("Monday,", "b"), (" March 3", ""), (", 2025. ", ""), ("Vienna", "i"), (", 12 October 1999", "")],
    ],
)
def test_a_file_paragraphs_styled_stretches_segment_it_as_html_elements_do(splitter: DocumentSplitter, runs):
    html = "".join(f"<{s}>{t}</{s}>" if s else t for t, s in runs)
    text = "".join(t for t, _ in runs)
    unit = Unit(tuple(t for t, _ in runs), ("",) * (len(runs) - 1), tuple(s for _, s in runs))
    (as_file,) = splitter.split_many([text], "text", styled=[styled_spans(unit)])
    as_html = splitter.split(f"<p>{html}</p>", "html", place_inline=True)
    assert [s.text for s in as_file.document.segments] == [s.text for s in as_html.document.segments]
    assert as_file.document.join([s.text for s in as_file.document.segments]) == text  # nothing lost
