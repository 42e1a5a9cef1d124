"""Glossary terms in the search: the term tracker, greedy (GuidedSearch) and beam search
(dynamic beam allocation) on a toy model whose preferences are known."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnserve.server.translation.constrained_beam import ConstrainedBeamSearch
from attnserve.server.translation.constraints import GuidedSearch, TermTracker
from attnserve.server.translation.options import DecodeOptions
from attnserve.server.translation.search import Argmax, BeamSearch
from attnserve.server.translation.searches import make_search
from attnserve.server.translation.terms import Constraint
from tests.support.toy_decoder import (
    BOS,
    EOS,
    PAD,
    A,
    B,
    C,
    D,
    E,
    F,
    G,
    beam,
    greedy,
    model,
    occurrences,
    random_model,
    term,
)


def contains(tokens: list[int], seq: tuple[int, ...], times: int = 1) -> bool:
    found = sum(tuple(tokens[i : i + len(seq)]) == seq for i in range(len(tokens) - len(seq) + 1))
    return found >= times


# ------------------------------------------------------------------ the tracker


def test_a_multi_token_term_is_met_once_its_last_token_is_written():
    t = TermTracker((Constraint(term(D, E)),))
    assert t.need() == 2
    t1 = t.advance(D)
    assert (t1.need(), t1.met) == (1, False)
    assert t1.forcing(at_start=False) == E
    assert t1.advance(E).met
    assert t1.advance(A).need() == 2  # broken off: begun again from the start
    assert t.need() == 2  # states are values: the parent is unchanged


def test_repeated_occurrences_are_owed_one_each():
    t = TermTracker((Constraint(term(D, E), count=2),))
    assert t.need() == 4
    t = t.advance(D).advance(E)
    assert (t.met, t.need()) == (False, 2)
    assert t.advance(D).advance(E).met


def test_overlapping_terms_are_both_paid_by_a_shared_token():
    t = TermTracker((Constraint(term(D, E, name="de")), Constraint(term(E, F, name="ef"))))
    assert t.advance(D).advance(E).advance(F).met  # E ends one and begins the other


def test_the_start_of_output_form_counts_and_is_forced_only_at_the_start():
    t = TermTracker((Constraint(term(G, D, E, initial=(D, E))),))  # G: a lone space marker
    assert t.forcing(at_start=True) == D and t.forcing(at_start=False) == G
    assert t.advance(D).advance(E).met and t.advance(G).advance(D).advance(E).met


# ---------------------------------------------------------------------- greedy


def guided(constraints, max_new=12, prefix=()):
    return GuidedSearch(Argmax(), EOS, max_new, tuple(constraints), tuple(prefix))


def test_greedy_writes_a_term_the_model_does_not_propose_before_ending():
    out = greedy(guided([Constraint(term(D, E))]), model([A, B, C]))
    assert out == [A, B, C, D, E, EOS]  # the end token waited for the term


def test_greedy_finishes_a_term_the_model_begins_by_itself():
    out = greedy(guided([Constraint(term(A, D))]), model([A, B, C]))
    assert out[:2] == [A, D] and contains(out, (A, D)) and out[-1] == EOS


def test_greedy_writes_the_term_in_place_of_the_models_own_word_for_it():
    # B is the model's word for the term (a cue): the term D E goes there, the rest follows
    out = greedy(guided([Constraint(term(D, E, cues={B}))]), model([A, B, C]))
    assert out == [A, D, E, EOS]  # the toy model counts positions: after 3 tokens it ends


def test_greedy_unchanged_when_the_model_writes_the_term_itself():
    want = model([A, B, C])
    assert greedy(guided([Constraint(term(B, C))]), want) == [A, B, C, EOS]


def test_greedy_begins_a_term_when_the_tokens_left_would_not_fit_it():
    out = greedy(guided([Constraint(term(D, E, F))], max_new=4), model([A, B, C, A, B]))
    assert out == [A, D, E, F]  # three tokens for the term, so it starts at the second


def test_greedy_repeated_and_several_terms_all_written():
    cs = [Constraint(term(D, E), count=2), Constraint(term(F, name="f"))]
    out = greedy(guided(cs, max_new=16), model([A, B]))
    assert contains(out, (D, E), times=2) and F in out and out[-1] == EOS


def test_greedy_constraints_come_after_a_forced_prefix():
    out = greedy(guided([Constraint(term(D))], prefix=(C,)), model([A, B]))
    assert out[0] == C and D in out and out[-1] == EOS


# ------------------------------------------------------------------ beam search


def constrained_beam(constraints, k=3, max_new=12, n=3):
    return ConstrainedBeamSearch(k, max_new, 1.0, n, EOS, tuple(constraints))


@pytest.mark.parametrize("k", [2, 4])
def test_beam_every_hypothesis_contains_every_term(k):
    cs = [Constraint(term(D, E)), Constraint(term(F, name="f"), count=2)]
    hyps = beam(constrained_beam(cs, k=k, n=k), model([A, B, C]))
    assert hyps
    for tokens in hyps:
        assert contains(tokens, (D, E)) and tokens.count(F) >= 2


def test_beam_equals_plain_beam_search_when_the_model_writes_the_term():
    want = model([A, B, C])
    plain = beam(BeamSearch(3, 12, 1.0, 1, EOS), want)
    assert beam(constrained_beam([Constraint(term(B, C))], n=1), want) == plain == [[A, B, C, EOS]]


def test_beam_places_a_term_where_the_model_scores_it_best():
    # The model would write A B C; in place of B it accepts D nearly as well (a synonym), and
    # it does not like to end after a D at the end: the term D goes in place of B.
    def want(prefix: list[int]) -> np.ndarray:
        x = model([A, B, C])(prefix)
        if len(prefix) == 1:
            x[D] = -0.5
        if prefix == [A, B, C, D]:
            x[EOS] = -5.0
        if prefix == [A, D]:
            x[:] = -4.0
            x[[PAD, BOS]] = -np.inf
            x[C] = 0.0
        return x

    assert beam(constrained_beam([Constraint(term(D))], n=1), want) == [[A, D, C, EOS]]


def test_beam_writes_the_term_in_place_of_the_models_own_word_for_it():
    assert beam(constrained_beam([Constraint(term(D, cues={B}))], n=1), model([A, B, C])) == [[A, D, C, EOS]]


def test_beam_puts_a_term_the_model_never_proposes_at_the_end():
    assert beam(constrained_beam([Constraint(term(D, E))], n=1), model([A, B, C])) == [[A, B, C, D, E, EOS]]


def test_beam_fits_the_terms_within_max_new_tokens():
    hyps = beam(constrained_beam([Constraint(term(D, E, F))], max_new=4), model([A, B, C, A, B]))
    assert hyps and all(contains(t, (D, E, F)) and len(t) <= 4 for t in hyps)


def test_make_search_picks_the_constrained_searches_only_for_rows_with_terms():
    terms = (Constraint(term(D)),)
    assert type(make_search(DecodeOptions(), 8, EOS)).__name__ == "SingleSearch"
    assert isinstance(make_search(DecodeOptions(constraints=terms), 8, EOS), GuidedSearch)
    assert type(make_search(DecodeOptions(beam_size=2), 8, EOS)) is BeamSearch
    assert isinstance(make_search(DecodeOptions(beam_size=2, constraints=terms), 8, EOS), ConstrainedBeamSearch)


# ------------------------------------------------------- the guarantee, on any model


terms_strategy = st.lists(
    st.tuples(st.lists(st.integers(A, G), min_size=1, max_size=3), st.integers(1, 2)), min_size=1, max_size=3
)


@settings(max_examples=100, deadline=None)
@given(terms=terms_strategy, slack=st.integers(0, 6), seed=st.integers(0, 10_000), k=st.sampled_from([1, 2, 4]))
def test_every_term_is_written_within_max_new_tokens_whatever_the_model(terms, slack, seed, k):
    cs = tuple(Constraint(term(*seq, name=str(i)), n) for i, (seq, n) in enumerate(terms))
    max_new = sum(len(seq) * n for seq, n in terms) + slack
    want = random_model(seed)
    if k == 1:
        outputs = [greedy(guided(cs, max_new=max_new), want)]
    else:
        outputs = beam(constrained_beam(cs, k=k, max_new=max_new, n=k), want)
    assert outputs
    for tokens in outputs:
        assert len(tokens) <= max_new
        body = tokens[:-1] if tokens[-1] == EOS else tokens
        assert EOS not in body
        for seq, n in terms:  # (the service merges equal targets; here one occurrence pays equal ones)
            assert occurrences(tokens, tuple(seq)) >= n, (terms, tokens)
