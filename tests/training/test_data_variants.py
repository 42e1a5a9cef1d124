"""Everyday spellings of the translator's English, and the digit images people make: what
the robustness sets are built from."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

pytest.importorskip("babel")

from attnserve.models.training.data_translation import Pair, generate_pairs  # noqa: E402
from attnserve.models.training.data_variants import (  # noqa: E402
    applicable,
    held_out_hyphen_variants,
    held_out_variants,
    mix_variants,
    variant,
)


def _canonical(text: str) -> str:
    """The spelling a variant may change, taken out: case, spaces, a.m./p.m., a trailing mark."""
    text = re.sub(r"\s+", "", text.lower())
    return re.sub(r"([ap])\.?m\.?", r"\1m", text).rstrip(".!?")


@pytest.fixture(scope="module")
def held_out():
    return generate_pairs(2000, seed=1)


def test_a_variant_changes_the_spelling_never_the_meaning(held_out):
    variants = held_out_variants(held_out)
    originals = {p.source: p for p in held_out}
    assert len(variants) >= 0.99 * len(held_out)
    kinds = {k for v in variants for k in v.template.split("+")[1:]}
    assert kinds == {"case", "spacing", "ampm", "punctuation"}
    by_spelling: dict[tuple[str, str], list[Pair]] = {}
    for p in held_out:
        by_spelling.setdefault((p.template, _canonical(p.source)), []).append(p)
    for v in variants:
        bases = by_spelling.get((v.template.split("+")[0], _canonical(v.source)), [])
        assert bases and all(b.source != v.source and b.source in originals for b in bases), v
        assert any(v.target in (b.target, b.target + v.source[-1]) for b in bases), (v, bases)


def test_the_issues_spellings_are_among_the_variants():
    pair = Pair("Monday, March 3, 2025 at 3:45 PM", "Montag, 3. März 2025 um 15:45 Uhr", "datetime")
    rng = random.Random(0)
    seen = {variant(pair, rng).source for _ in range(400)}
    for spelling in (
        "monday, march 3, 2025 at 3:45 pm",
        "MONDAY, MARCH 3, 2025 AT 3:45 PM",
        "Monday, March 3, 2025 at 3:45 p.m.",
        "Monday,March 3, 2025 at 3:45 PM",
    ):
        assert spelling in seen


def test_hyphen_variants_write_dashes_and_number_words_as_people_type_them(held_out):
    """The hyphen kind: "4:45 AM – 2:24 PM" -> "4:45 AM - 2:24 PM" / "4:45 AM-2:24 PM", "eighty-two"
    -> "eighty two"; the German stays. Its held-out set holds only such pairs, and the first
    held-out variant set (case, spacing, am/pm, punctuation) has none of them."""
    rng = random.Random(0)
    interval = Pair("9:00 AM – 5:30 PM", "09:00–17:30 Uhr", "interval")
    assert {variant(interval, rng, ["hyphen"]).source for _ in range(50)} == {"9:00 AM - 5:30 PM", "9:00 AM-5:30 PM"}
    words = Pair("Three Hundred Forty-Two kilometers", "dreihundertzweiundvierzig Kilometer", "quantity")
    assert variant(words, rng, ["hyphen"]).source == "Three Hundred Forty Two kilometers"
    assert "hyphen" not in applicable(Pair("-5°C", "-5 °C", "quantity"))  # a minus sign is not a dash
    hyphens = held_out_hyphen_variants(held_out)
    assert len(hyphens) > 100 and {v.template.split("+")[1:] == ["hyphen"] for v in hyphens} == {True}
    assert all("–" not in v.source and v.target in {p.target for p in held_out} for v in hyphens)
    assert not any("hyphen" in v.template for v in held_out_variants(held_out))


def test_held_out_variants_stay_out_of_training(held_out):
    variants = held_out_variants(held_out)
    exclude = frozenset(v.source for v in variants)
    train = generate_pairs(5000, seed=0, exclude={p.source for p in held_out}, distinct=False)
    mixed = mix_variants(train, 1.0, seed=0, exclude=exclude)
    assert not exclude & {p.source for p in mixed}
    assert sum(a.source != b.source for a, b in zip(train, mixed)) > 0.85 * len(train)  # the rest: no change applies
    assert mix_variants(train, 0.5, seed=3, exclude=exclude) == mix_variants(train, 0.5, seed=3, exclude=exclude)


def test_the_digit_robustness_set_is_fixed_and_covers_both_polarities():
    from attnserve.models.training.digit_images import robustness_set

    first, again = robustness_set(), robustness_set()
    assert [d for _, d, _ in first] == [d for _, d, _ in again]
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for (a, _, _), (b, _, _) in zip(first[:50], again[:50]))
    kinds = {k for _, _, k in first}
    assert {"pen/dark-on-light", "pen/light-on-dark", "font/dark-on-light", "font/light-on-dark"} <= kinds
    assert {d for _, d, _ in first} == set(range(10))
    for img, _, kind in first[:: len(first) // 20]:
        border = np.concatenate([np.asarray(img)[0], np.asarray(img)[-1]])
        assert (np.median(border) >= 128) == kind.endswith("dark-on-light")
