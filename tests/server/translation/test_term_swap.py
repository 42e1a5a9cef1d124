"""Terms written through surrogates: the spans that paid them swapped for the targets, in a
finished hypothesis and token by token in a stream, with the guarantee kept on any model."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from attnserve.server.translation.jobs import CollectSink, Job, StreamSink
from attnserve.server.translation.options import DecodeOptions
from attnserve.server.translation.term_swap import TermSwap, separable, swap
from attnserve.server.translation.terms import Constraint, constraints_cost
from tests.support.toy_decoder import EOS, A, B, C, D, E, F, G, beam, greedy, model, occurrences, random_model, term


def surrogate(spaced, target, initial=None, target_initial=None, name="t"):
    """A term written as ``spaced`` (``initial`` at the start) whose target is ``target``."""
    t = term(*spaced, initial=initial, name=name)
    targets = (tuple(target), tuple(target_initial if target_initial is not None else target))
    return dataclasses.replace(t, surrogate="s", target_tokens=targets)


def test_the_span_that_paid_gets_the_target_and_the_rest_stays():
    cs = (Constraint(surrogate((D, E), (F, G, A))),)
    # one occurrence owed: the second D E is the model's, not the term's
    assert swap(cs, [A, D, E, B, D, E, EOS]) == [A, F, G, A, B, D, E, EOS]


def test_the_start_of_output_form_gets_the_targets_start_of_output_form():
    cs = (Constraint(surrogate((G, D), (G, F), initial=(D,), target_initial=(F,))),)  # G: a lone space marker
    assert swap(cs, [D, A, EOS]) == [F, A, EOS]
    assert swap(cs, [A, G, D, EOS]) == [A, G, F, EOS]


def test_a_forced_prefix_is_left_as_it_is():
    cs = (Constraint(surrogate((D,), (F,))),)
    assert swap(cs, [D, D, EOS], skip=1) == [D, F, EOS]


def test_terms_written_as_their_targets_are_not_touched():
    cs = (Constraint(term(D, E)),)
    tokens = [A, D, E, EOS]
    assert swap(cs, tokens) is tokens


def test_a_stream_holds_a_surrogate_until_it_is_swapped_or_broken_off():
    s = TermSwap((Constraint(surrogate((D, E), (F,))),))
    assert [s.push(t) for t in (A, D, B, D, E, C)] == [[A], [], [D, B], [], [F], [C]]
    s = TermSwap((Constraint(surrogate((D, E), (F,))),))
    assert (s.push(A), s.push(D), s.flush()) == ([A], [], [D])  # ended inside it: as written


def test_the_stream_sink_passes_on_targets_only():
    posts: list[object] = []
    outbox = type("Outbox", (), {"post": lambda self, loop, callback, item: posts.append(item)})()
    cs = (Constraint(surrogate((D, E), (F, G))),)
    queue = asyncio.Queue()
    sink = StreamSink(outbox, None, queue, 0.0, hidden=1, swap=TermSwap(cs, skip=1))  # type: ignore[arg-type]
    for token, finish in ((C, None), (A, None), (D, None), (E, None), (B, None), (EOS, "eos")):
        sink.token(None, token, finish)  # type: ignore[arg-type]
    # C: the hidden prefix; the last post has the ids fed (the aligner reads them)
    assert posts == [([A], None), ([F, G], None), ([B], None), ([EOS], "eos", (A, D, E, B, EOS))]


def test_terms_whose_spans_could_overlap_are_not_separable():
    def cs(*terms):
        return tuple(Constraint(t) for t in terms)

    assert separable(cs(surrogate((D, E), (F,)), term(A, B)))
    assert separable(cs(term(D, E), term(E, F)))  # no surrogate: nothing to swap
    assert not separable(cs(surrogate((D, E), (F,)), term(E, F)))  # an end begins another
    assert not separable(cs(surrogate((D,), (F,)), term(C, D, E)))  # inside another
    assert separable(cs(surrogate((D, E, D), (F,))))  # owed once: the first D E D pays it
    assert not separable((Constraint(surrogate((D, E, D), (F,)), count=2),))  # owed twice: D E D E D
    assert not separable(cs(surrogate((D,), (F,), name="a"), surrogate((D,), (G,), name="b")))  # one span, two terms


def test_the_output_keeps_within_max_new_tokens():
    cs = (Constraint(surrogate((D,), (E, F, G))),)  # the output gains two tokens where D is swapped
    assert constraints_cost(cs) == 3
    job = Job([A], DecodeOptions(constraints=cs), 6, EOS, CollectSink())
    greedy(job.search, model([A, B, C, A, B, C, A]))
    (out,) = job.result()
    assert occurrences(out.tokens, (E, F, G)) == 1 and D not in out.tokens and len(out.tokens) <= 6


streams = st.lists(st.sampled_from([A, B, C, D, E, F, G]), max_size=16).map(lambda t: [*t, EOS])
sequences = st.lists(st.integers(A, G), min_size=1, max_size=3).map(tuple)
surrogate_terms = st.lists(st.tuples(sequences, sequences, st.integers(1, 2)), min_size=1, max_size=3)


def constraints_of(terms) -> tuple[Constraint, ...]:
    return tuple(Constraint(surrogate(w, t, name=str(i)), n) for i, (w, t, n) in enumerate(terms))


@settings(max_examples=200, deadline=None)
@given(terms=surrogate_terms, tokens=streams)
def test_a_stream_never_shows_a_surrogate_and_ends_as_the_hypothesis(terms, tokens):
    cs = constraints_of(terms)
    assume(separable(cs))
    final = swap(cs, tokens)
    s, shown = TermSwap(cs), []
    for token in tokens:
        shown += s.push(token)
        assert final[: len(shown)] == shown  # never taken back: a swapped surrogate never went out
    assert shown + s.flush() == final


@settings(max_examples=100, deadline=None)
@given(terms=surrogate_terms, slack=st.integers(0, 6), seed=st.integers(0, 10_000), k=st.sampled_from([0, 1, 2, 4]))
def test_every_target_is_in_the_output_within_max_new_tokens_whatever_the_model(terms, slack, seed, k):
    """Greedy (k 1), sampling (k 0) and beam search (every hypothesis of k)."""
    cs = constraints_of(terms)
    assume(separable(cs))
    max_new = constraints_cost(cs) + slack
    sampled = dict(temperature=1.0, seed=seed) if k == 0 else {}
    k = max(k, 1)
    options = DecodeOptions(beam_size=k, num_hypotheses=k, constraints=cs, **sampled)
    job = Job([A], options, max_new, EOS, CollectSink())
    (greedy if k == 1 else beam)(job.search, random_model(seed))
    outputs = [h.tokens for h in job.result()]
    assert outputs
    owed = Counter()
    for c in cs:
        owed[c.term.target_tokens[0]] += c.count
    for tokens in outputs:
        assert len(tokens) <= max_new and EOS not in tokens[:-1]
        for target, n in owed.items():
            assert occurrences(tokens, target) >= n, (terms, tokens)
