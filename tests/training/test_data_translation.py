"""The English -> German generator: deterministic, aligned, and its held-out split is really held out."""

from __future__ import annotations

import collections
import datetime
import random
import re

import pytest

pytest.importorskip("babel")
pytest.importorskip("num2words")

from babel import dates  # noqa: E402

from attnserve.contract.target_text import target_side  # noqa: E402
from attnserve.models.training.data_translation import TEMPLATES, generate_pairs, make_splits  # noqa: E402
from attnserve.models.training.tokenizer import SPECIALS, normalize_source, train_tokenizer  # noqa: E402

MONTHS = [
    (dates.get_month_names("wide", locale="en")[m], dates.get_month_names("wide", locale="de")[m]) for m in range(1, 13)
]
DAYS = [(dates.get_day_names("wide", locale="en")[d], dates.get_day_names("wide", locale="de")[d]) for d in range(7)]


@pytest.fixture(scope="module")
def pairs():
    return generate_pairs(4000, seed=7)


def test_same_seed_same_pairs_other_seed_other_pairs(pairs):
    assert generate_pairs(4000, seed=7) == pairs
    assert generate_pairs(300, seed=8) != pairs[:300]


def test_every_template_is_used_and_no_pair_is_empty_or_badly_spaced(pairs):
    assert {p.template for p in pairs} == set(TEMPLATES)
    for p in pairs:
        for text in (p.source, p.target):
            assert text and text == text.strip() and "  " not in text, p
            assert not re.search("[\u00a0\u202f\u2009\u00ad]", text), p  # CLDR's special spaces are normalised


def test_pairs_are_aligned(pairs):
    """A month or weekday named in the English is named in the German; years are copied."""
    for p in pairs:
        for en, de in MONTHS + DAYS:
            if re.search(rf"\b{en}\b", p.source):
                assert de in p.target, p
        if p.template in ("date", "dateline", "datetime", "interval"):
            for year in re.findall(r"\b(1[1-9]\d\d|20\d\d)\b", p.source):
                assert year in p.target, p


def test_each_source_has_exactly_one_target():
    rng = random.Random(0)
    targets = collections.defaultdict(set)
    for _ in range(15000):
        source, target = TEMPLATES[rng.choice(list(TEMPLATES))][0](rng)
        targets[source].add(target)
    assert not {s: t for s, t in targets.items() if len(t) > 1}


def test_known_examples_are_correct_german():
    from attnserve.models.training import data_quantities as q
    from attnserve.models.training import data_translation as d
    from attnserve.models.training.data_values import number_words

    forms = d.date_forms(datetime.date(2025, 3, 3))
    assert forms["Monday, March 3, 2025"] == "Montag, 3. März 2025"
    assert forms["3/3/25"] == "03.03.25"
    assert d.date_forms(datetime.date(2025, 5, 3))["May 3, 2025"] == "3. Mai 2025"  # long, not medium "03.05.2025"
    assert q.unit_pattern("length-kilometer", "de", "long", 342).format(number_words(342, "de")) == (
        "dreihundertzweiundvierzig Kilometer"
    )
    assert number_words(342, "en", american=True) == "three hundred forty-two"


def test_held_out_sources_never_appear_in_training():
    train, test = make_splits(train_size=3000, test_size=400, seed=3)
    assert len(train) == 3000 and len(test) == 400
    assert len({p.source for p in test}) == 400
    assert not {p.source for p in train} & {p.source for p in test}
    assert make_splits(train_size=3000, test_size=400, seed=3) == (train, test)


def test_the_held_out_set_is_the_distinct_draw_of_its_own_seed():
    """Rebalancing the training draw leaves the held-out set as it was defined."""
    _, test = make_splits(train_size=100, test_size=300, seed=0)
    assert test == generate_pairs(300, seed=1)


def test_training_draws_keep_the_template_mix_of_the_held_out_set():
    """Small-space templates (ordinals, decades) fill their weight in training too, by repeats."""
    train = generate_pairs(20000, seed=5, distinct=False)
    counts = collections.Counter(p.template for p in train)
    total = sum(weight for _, weight in TEMPLATES.values())
    for name, (_, weight) in TEMPLATES.items():
        assert counts[name] / len(train) == pytest.approx(weight / total, rel=0.15), name
    assert len({p.source for p in train}) < len(train)  # repeats are allowed


def test_tokenizer_round_trips_and_adds_eos(pairs):
    """Sources round-trip as the model reads them (lower case), German targets exactly."""
    tok = train_tokenizer((t for p in pairs for t in (normalize_source(p.source), p.target)), vocab_size=600)
    target = target_side(tok)
    assert [tok.token_to_id(s) for s in SPECIALS] == [0, 1, 2, 3]
    for p in pairs[:500]:
        for side, text, back in ((tok, p.source, normalize_source(p.source)), (target, p.target, p.target)):
            ids = side.encode(text).ids
            assert ids[-1] == 2 and 3 not in ids
            assert tok.decode(ids, skip_special_tokens=True) == back
    german = "Größe: 3,5 °C, Straße, Österreich"
    assert tok.decode(target.encode(german).ids, skip_special_tokens=True) == german
