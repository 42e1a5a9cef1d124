"""Everyday spellings of the generator's English: how people type a date, a time or an amount.

The generator (:mod:`.data_translation`) prints English the way CLDR does: `Monday, March 3,
2025`, `at 3:45 PM`. People type `monday, march 3, 2025`, `at 3:45 pm`, `3:45 p.m.`,
`Monday,March 3`, `AT 3:45 PM!`. A variant changes only how the English is written, never
what it says, so the German stays the reference (a trailing `!` or `?` is carried over):

- ``case``: all lower, Title (every word's first letter), all UPPER;
- ``spacing``: a run of 2-3 spaces where there was one, or no space after a comma;
- ``ampm``: `AM`/`PM` as `am`, `a.m.`, `A.M.`, `a.m`, `AM`, with or without the space before;
- ``punctuation``: a trailing `.`, `!` or `?` on a text that has none;
- ``hyphen``: an ASCII hyphen for CLDR's en dash in intervals (`9:00 AM - 5:30 PM`, `Mar 3-7,
  2025`), or number words without their hyphen (`forty two`, `twenty first`).

:func:`variant` applies one or two of them, drawn from its own ``random.Random``, so the
generator's stream (and with it the 2,000 held-out pairs) is unchanged. Spacing is also
normalised on the server (the documents' job); the model still learns it, since a text
may reach it through a path that does not normalise.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence

from .data_translation import Pair

KINDS = ("ampm", "hyphen", "case", "spacing", "punctuation")  # the order they are applied in
# The first held-out variant set's kinds (its pairs stay the same when kinds are added).
HELD_OUT_KINDS = ("ampm", "case", "spacing", "punctuation")
_NUMBER_HYPHEN = re.compile(r"\b(twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)-(?=[a-z])", re.IGNORECASE)
_AMPM = re.compile(r" ?\b([AP])M\b")
_AMPM_SPELLINGS = (
    ("{}m", str.lower),
    ("{}.m.", str.lower),
    ("{}.M.", str.upper),
    ("{}.m", str.lower),
    ("{}M", str.upper),
)
_TRAILING = (".", "!", "?")


def _case(rng: random.Random, en: str, de: str) -> tuple[str, str]:
    style = rng.choice(("lower", "title", "upper"))
    if style == "lower":
        return en.lower(), de
    if style == "upper":
        return en.upper(), de
    # str.title() would write "3Rd" and "Forty-Two": only each word's first letter
    return " ".join(w[:1].upper() + w[1:] for w in en.split(" ")), de


def _spacing(rng: random.Random, en: str, de: str) -> tuple[str, str]:
    if ", " in en and rng.random() < 0.5:
        return en.replace(", ", ",", 1 if rng.random() < 0.5 else -1), de
    spaces = [m.start() for m in re.finditer(" ", en)]
    if not spaces:
        return en, de
    at = rng.choice(spaces)
    return en[:at] + " " * rng.choice((2, 3)) + en[at + 1 :], de


def _ampm(rng: random.Random, en: str, de: str) -> tuple[str, str]:
    spelling, letter_case = rng.choice(_AMPM_SPELLINGS)
    space = "" if rng.random() < 0.3 else " "

    def replace(m: re.Match) -> str:  # "PM" -> "p.m.", " pm", "PM"
        return space + spelling.format(letter_case(m.group(1)))

    return _AMPM.sub(replace, en), de


def _punctuation(rng: random.Random, en: str, de: str) -> tuple[str, str]:
    if en.endswith((".", "!", "?", ":", ";", ",")):
        return en, de
    mark = rng.choice(_TRAILING)
    if mark == "." and de.endswith("."):  # "3. Okt." ends the sentence with its own period
        return en + mark, de
    return en + mark, de + mark


def _hyphen(rng: random.Random, en: str, de: str) -> tuple[str, str]:
    ways = (["dash"] if "–" in en else []) + (["words"] if _NUMBER_HYPHEN.search(en) else [])
    if rng.choice(ways) == "dash":  # "4:45 AM – 2:24 PM" -> "4:45 AM - 2:24 PM" or "...AM-2:24..."
        return en.replace(" – ", rng.choice((" - ", "-"))).replace("–", "-"), de
    return _NUMBER_HYPHEN.sub(r"\1 ", en), de  # "eighty-two" -> "eighty two"


_APPLY = {"case": _case, "spacing": _spacing, "ampm": _ampm, "punctuation": _punctuation, "hyphen": _hyphen}


def applicable(pair: Pair) -> list[str]:
    """The kinds that change ``pair``'s English."""
    kinds = ["case", "spacing", "punctuation"]
    if "–" in pair.source or _NUMBER_HYPHEN.search(pair.source):
        kinds.insert(0, "hyphen")
    if _AMPM.search(pair.source):
        kinds.insert(0, "ampm")
    if pair.source.endswith((".", "!", "?", ":", ";", ",")):
        kinds.remove("punctuation")
    return kinds


def variant(pair: Pair, rng: random.Random, kinds: Sequence[str] | None = None) -> Pair:
    """``pair`` with one or two variant kinds applied (``kinds``: the candidates, default all
    that apply); ``template`` names them, e.g. ``"time+case+ampm"``. Returns a pair whose
    English differs from the original's (or the original when none applies)."""
    candidates = [k for k in applicable(pair) if kinds is None or k in kinds]
    if not candidates:
        return pair
    chosen = rng.sample(candidates, 2 if len(candidates) > 1 and rng.random() < 0.3 else 1)
    if "ampm" in candidates and "ampm" not in chosen and rng.random() < 0.5:  # few texts have a time: favour it
        chosen[0] = "ampm"
    chosen = [k for k in KINDS if k in chosen]  # ampm before case: "PM" -> "p.m." -> "P.M." in upper case
    en, de = pair.source, pair.target
    for kind in chosen:
        en, de = _APPLY[kind](rng, en, de)
    if en == pair.source:
        return pair
    return Pair(en, de, "+".join([pair.template, *chosen]))


def variant_pairs(pairs: Sequence[Pair], seed: int, tries: int = 5, kinds: Sequence[str] | None = None) -> list[Pair]:
    """The pairs in a variant spelling (of ``kinds``, default all), each re-drawn until its
    English changes (a held-out variant set: the held-out pairs, re-spelt); those that no draw
    changes are left out."""
    rng = random.Random(seed)
    out = []
    for p in pairs:
        for _ in range(tries):
            v = variant(p, rng, kinds)
            if v is not p:
                out.append(v)
                break
    return out


def held_out_variants(test: Sequence[Pair], data_seed: int = 0) -> list[Pair]:
    """The held-out variant set of a recipe: its held-out pairs (``make_splits``' test split),
    re-spelt in case, spacing, am/pm and trailing punctuation (``HELD_OUT_KINDS``)."""
    return variant_pairs(test, seed=data_seed * 2 + 101, kinds=HELD_OUT_KINDS)


def held_out_hyphen_variants(test: Sequence[Pair], data_seed: int = 0) -> list[Pair]:
    """The held-out pairs with an en dash or a hyphenated number word, written with an ASCII
    hyphen or without the hyphen (``hyphen`` only)."""
    return variant_pairs(test, seed=data_seed * 2 + 103, kinds=("hyphen",))


def mix_variants(
    pairs: Sequence[Pair],
    rate: float,
    seed: int,
    exclude: frozenset[str] | set[str],
    kinds: Sequence[str] | None = None,
    key: Callable[[str], str] = str,
) -> list[Pair]:
    """Training pairs where a fraction ``rate`` is re-spelt (``kinds``: the variant kinds to draw
    from, default all); a variant whose ``key(English)`` is in ``exclude`` (the held-out sources,
    keyed the same way) keeps its original spelling."""
    rng = random.Random(seed)
    out = []
    for p in pairs:
        if rng.random() < rate:
            v = variant(p, rng, kinds)
            p = p if key(v.source) in exclude else v
        out.append(p)
    return out
