"""Document n-best from per-segment n-best; streams in document order."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnserve.server.documents.assemble import best_combinations
from attnserve.server.service.document_stream import DocumentEvents
from attnserve.server.translation import StreamEvent


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


def _events(text: str, final: bool = False, token: int = 0) -> StreamEvent:
    return StreamEvent(text, (token,), "eos" if final else None)


def _ordered(document, pushes):
    order, out = DocumentEvents(document), []
    for i, event in pushes:
        out.append(order.push(i, event))
    return out


def test_a_text_stream_gives_the_first_sentence_live_and_later_ones_in_their_turn(splitter):
    doc = splitter.split("  at 9.\n\nin the 1980s. on Monday ")
    out = _ordered(
        doc,
        [
            (1, _events("in den ", token=20)),  # a later sentence first: held back
            (0, _events(" um", token=10)),  # leading whitespace of a translation: dropped
            (2, _events("am Montag", True, 30)),
            (0, _events(" 9. ", token=11)),  # trailing whitespace: held until more text follows
            (0, _events("", True, 12)),  # the end: what was held is dropped
            (1, _events("1980er-Jahren.", True, 21)),
        ],
    )
    assert [[e.delta for e in events] for events in out] == [
        [],
        ["  um"],
        [],
        [" 9."],
        ["", "\n\nin den"],
        [" 1980er-Jahren.", " am Montag "],
    ]
    flat = [e for events in out for e in events]
    assert [e.token_ids for e in flat] == [
        (10,),
        (11,),
        (12,),
        (20,),
        (21,),
        (30,),
    ]  # one event per token, in document order
    assert [e.finish_reason for e in flat] == [None] * 5 + ["eos"]
    assert "".join(e.delta for e in flat) == doc.document.join(["um 9.", "in den 1980er-Jahren.", "am Montag"])


def test_an_html_stream_gives_whole_sentences_rendered(splitter):
    doc = splitter.split("<p>Tom &amp; Jerry</p><p>at 9</p>", "html")
    out = _ordered(
        doc, [(0, _events("Tom", token=1)), (1, _events("um 9", True, 3)), (0, _events(" & Jerry!", True, 2))]
    )
    assert [[(e.delta, e.token_ids) for e in events] for events in out] == [
        [("<p>", (1,))],
        [],
        [("Tom &amp; Jerry!", (2,)), ("</p><p>um 9</p>", (3,))],  # the entity as sent, the model's & escaped
    ]


def test_a_length_finish_anywhere_is_the_documents_finish_reason(splitter):
    doc = splitter.split("at 9. at 10.")
    out = _ordered(doc, [(0, StreamEvent("um 9", (1,), "length")), (1, _events("um 10.", True, 2))])
    assert [e.finish_reason for events in out for e in events] == [None, "length"]


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_any_interleaving_gives_the_document_in_order(splitter, data):
    doc = splitter.split("\n  at 9.  in the 1980s.\n\n\ton Monday\nfor the third time \n")
    n = doc.segments
    tokens = [data.draw(st.lists(st.text(" abc.", max_size=3), min_size=1, max_size=4)) for _ in range(n)]
    queues = [[StreamEvent(t, (100 * i + j,), None) for j, t in enumerate(ts)] for i, ts in enumerate(tokens)]
    for q in queues:
        q[-1] = StreamEvent(q[-1].delta, q[-1].token_ids, "eos")
    order, out, cursor = DocumentEvents(doc), [], [0] * n
    while any(c < len(q) for c, q in zip(cursor, queues)):
        i = data.draw(st.sampled_from([i for i in range(n) if cursor[i] < len(queues[i])]))
        out += order.push(i, queues[i][cursor[i]])
        cursor[i] += 1
    assert "".join(e.delta for e in out) == doc.document.join(["".join(ts).strip() for ts in tokens])
    assert [e.token_ids for e in out] == [e.token_ids for q in queues for e in q]
    assert [e.finish_reason for e in out] == [None] * (len(out) - 1) + ["eos"]
