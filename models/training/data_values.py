"""The building blocks of the English -> German pairs (:mod:`.data_translation`): random
values (dates, times, counts, decimals), their forms in both languages, and the spaces CLDR
prints that users do not type."""

from __future__ import annotations

import datetime as dt
import random

from babel import Locale, numbers
from num2words import num2words

# Spaces CLDR puts between a time and "PM", around interval dashes and in "1.234,50 €":
# users type plain spaces, so both sides use plain spaces. Soft hyphens are dropped.
_SPACES = str.maketrans({"\u202f": " ", "\u00a0": " ", "\u2009": " ", "\u00ad": None})

EN, GB, DE = "en", "en_GB", "de"
DE_LOCALE = Locale.parse(DE)


def clean(text: str) -> str:
    return text.translate(_SPACES)


def first_wins(candidates: list[tuple[str, str]]) -> dict[str, str]:
    """English -> German over several styles of one value; an English text shown by two
    styles keeps the German of the first."""
    out: dict[str, str] = {}
    for en, de in candidates:
        out.setdefault(clean(en), clean(de))
    return out


def pick(rng: random.Random, forms: dict[str, str]) -> tuple[str, str]:
    en = rng.choice(list(forms))
    return en, forms[en]


# ---------------------------------------------------------------- values


def random_date(rng: random.Random) -> dt.date:
    return dt.date(1900, 1, 1) + dt.timedelta(days=rng.randrange(200 * 365))


def random_time(rng: random.Random, seconds: bool = False) -> dt.time:
    minute = rng.choice((0, 15, 30, 45)) if rng.random() < 0.3 else rng.randrange(60)
    return dt.time(rng.randrange(24), minute, rng.randrange(60) if seconds else 0)


def number_words(n: int, lang: str, to: str = "cardinal", american: bool = False) -> str:
    text = num2words(n, lang=lang, to=to)
    if american:  # "three hundred and forty-two" -> "three hundred forty-two"
        text = text.replace(",", "").replace(" and ", " ")
    return text


def random_count(rng: random.Random) -> int:
    """A count for number words, 2..9999; German '...eins' before a noun would need
    gender ('hundertein Kilometer', 'hunderteine Meile'), so n % 100 == 1 is avoided."""
    n = rng.choice((rng.randrange(2, 20), rng.randrange(2, 100), rng.randrange(2, 1000), rng.randrange(2, 10000)))
    return n + 1 if n % 100 == 1 else n


def random_decimal(rng: random.Random) -> float | int:
    kind = rng.random()
    if kind < 0.5:
        return rng.choice((rng.randrange(1, 100), rng.randrange(1, 10000), rng.randrange(1, 10**7)))
    return round(rng.uniform(0, 10 ** rng.randrange(1, 5)), rng.choice((1, 2)))


def number_pair(rng: random.Random, value: float | int) -> tuple[str, str]:
    return numbers.format_decimal(value, locale=EN), numbers.format_decimal(value, locale=DE)
