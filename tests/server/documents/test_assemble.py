"""Document n-best from per-segment n-best; streams in document order."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnserve.server.documents.assemble import DocumentStream, best_combinations


def test_the_best_document_is_every_segments_best_then_the_next_best_swaps():
    scores = [[-0.1, -0.5, -2.0], [-0.2, -0.3]]
    assert best_combinations(scores, 4) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert best_combinations([[-1.0]], 3) == [(0,)]  # no more combinations than exist
    assert best_combinations([[-3.0, -1.0]], 2) == [(1,), (0,)]  # hypotheses need not come sorted


@settings(max_examples=200, deadline=None)
@given(
    scores=st.lists(st.lists(st.floats(-20, 0, allow_nan=False), min_size=1, max_size=4), min_size=1, max_size=4),
    k=st.integers(1, 8),
)
def test_best_combinations_are_the_top_sums_of_the_whole_product(scores, k):
    got = best_combinations(scores, k)
    every = sorted(
        itertools.product(*[range(len(s)) for s in scores]), key=lambda c: -sum(s[j] for s, j in zip(scores, c))
    )
    total = [sum(s[j] for s, j in zip(scores, c)) for c in got]
    assert len(got) == min(k, len(every)) == len(set(got))
    assert all(a >= b - 1e-9 for a, b in zip(total, total[1:]))  # best first (sums in another order differ by ulps)
    assert total == pytest.approx([sum(s[j] for s, j in zip(scores, c)) for c in every[: len(got)]])


def _stream_in_order(document, translations, events):
    stream, out = DocumentStream(document), []
    for kind, i, piece in events:
        out.append(stream.push(i, piece) if kind == "push" else stream.finish(i, translations[i]))
    assert stream.done
    return out


def test_a_text_stream_gives_the_first_segment_live_and_later_ones_in_their_turn(splitter):
    doc = splitter.split("  at 9.\n\nin the 1980s. on Monday ").document
    translations = ["um 9.", "in den 1980er-Jahren.", "am Montag"]
    events = [
        ("push", 1, "in den "),  # a later segment first: held back
        ("push", 0, "um "),
        ("finish", 2, None),
        ("push", 0, "9."),
        ("finish", 0, None),
        ("push", 1, "1980er-Jahren."),
        ("finish", 1, None),
    ]
    out = _stream_in_order(doc, translations, events)
    assert out == ["  ", "um ", "", "9.", "\n\nin den ", "1980er-Jahren.", " am Montag "]
    assert "".join(out) == doc.join(translations)


def test_an_html_stream_gives_whole_segments_rendered(splitter):
    doc = splitter.split("<p>Tom &amp; Jerry</p><p>at 9</p>", "html").document
    out = _stream_in_order(
        doc, ["Tom & Jerry!", "um 9"], [("push", 0, "Tom"), ("finish", 1, None), ("finish", 0, None)]
    )
    assert out == ["<p>", "", "Tom &amp; Jerry!</p><p>um 9</p>"]


def test_a_document_without_segments_streams_its_text_at_once(splitter):
    doc = splitter.split("  ***  ").document
    stream = DocumentStream(doc)
    assert not stream.done
    assert stream.start() == "  ***  "
    assert stream.done and stream.start() == ""
