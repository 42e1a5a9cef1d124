"""English -> German pairs for numbers, dates, times and quantities, from real linguistic data.

Every German (and English) form comes from a package, not from hand-made tables:

- CLDR through ``babel``: date and time formats and skeletons of ``en``, ``en_GB`` and
  ``de`` (month and weekday names inside them), date and time intervals, unit patterns
  with plural rules, decimal / percent / currency formats, currency names, territory
  names and time-zone exemplar cities;
- ``num2words``: cardinals, ordinals and years in ``en`` and ``de``.

Only the short frames around them ("at ... " -> "um ... Uhr", "more than" -> "mehr
als") are written here. The generator is a pure function of its seed:
:func:`generate_pairs` (and so :func:`make_splits`) gives the same list for the same
seed on every run.

Mapping is a function of the source: whenever two English styles print the same
text (CLDR's long and medium date of May, the short and long unit name of "days"),
the German of the first style in a fixed order wins, so no source has two targets.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from babel import Locale, dates, numbers
from num2words import num2words

from .data_quantities import t_duration, t_money, t_quantity
from .data_values import (
    DE,
    DE_LOCALE,
    EN,
    GB,
    clean,
    first_wins,
    number_pair,
    number_words,
    pick,
    random_date,
    random_decimal,
    random_time,
)

TERRITORIES = (
    "DE AT CH US GB FR IT ES PT NL BE DK SE NO FI PL CZ HU GR TR JP CN IN BR MX CA AU IE IS RU UA EG ZA AR CL KR"
).split()
TIMEZONES = (
    "Europe/Berlin Europe/Vienna Europe/Zurich Europe/Brussels Europe/Prague Europe/Copenhagen Europe/Rome "
    "Europe/Athens Europe/Lisbon Europe/Moscow Europe/Warsaw Europe/Paris Europe/London Europe/Madrid "
    "Europe/Amsterdam Europe/Stockholm Europe/Oslo Europe/Helsinki Europe/Budapest Europe/Bucharest "
    "Europe/Belgrade Europe/Istanbul Europe/Kiev Africa/Cairo Africa/Algiers Asia/Tokyo Asia/Tehran "
    "Asia/Baghdad Asia/Singapore Asia/Hong_Kong Asia/Calcutta America/New_York America/Chicago "
    "America/Havana America/Mexico_City America/Sao_Paulo America/Bogota Atlantic/Reykjavik Australia/Sydney"
).split()
DATE_STYLES = ("full", "long", "medium", "short")  # order decides collisions (see the module docstring)
DATE_SKELETONS = ("MMMMd", "MMMd", "yMMMd", "MMMEd", "yMEd", "Md", "MEd")  # all name a day
MONTH_SKELETONS = ("yMMMM", "yMMM", "yQQQQ")


@dataclass(frozen=True)
class Pair:
    source: str  # English
    target: str  # German
    template: str  # name of the template that made it


# ---------------------------------------------------------------- dates and times


def date_forms(day: dt.date, with_gb: bool = True) -> dict[str, str]:
    """Every CLDR style and skeleton of ``day``, English -> German."""
    cands = [(dates.format_date(day, s, locale=EN), dates.format_date(day, s, locale=DE)) for s in DATE_STYLES]
    if with_gb:  # British order ("3 March 2025"); short / numeric ones clash with US month/day order
        cands += [(dates.format_date(day, s, locale=GB), dates.format_date(day, s, locale=DE)) for s in DATE_STYLES[:3]]
    cands += [
        (dates.format_skeleton(s, day, locale=EN), dates.format_skeleton(s, day, locale=DE)) for s in DATE_SKELETONS
    ]
    return first_wins(cands)


def month_forms(day: dt.date) -> dict[str, str]:
    """'March 2025', 'Mar 2025', '1st quarter 2025' -> German."""
    return first_wins(
        [(dates.format_skeleton(s, day, locale=EN), dates.format_skeleton(s, day, locale=DE)) for s in MONTH_SKELETONS]
    )


def time_forms(t: dt.time) -> dict[str, str]:
    cands = [(dates.format_time(t, s, locale=EN), dates.format_time(t, s, locale=DE)) for s in ("short", "medium")]
    cands += [(dates.format_time(t, s, locale=GB), dates.format_time(t, s, locale=DE)) for s in ("short", "medium")]
    return first_wins(cands)


def _month_day(rng: random.Random) -> tuple[int, str, str, str, str]:
    day = random_date(rng)
    month_en = dates.get_month_names("wide", locale=EN)[day.month]
    month_de = dates.get_month_names("wide", locale=DE)[day.month]
    return day.day, month_en, month_de, num2words(day.day, lang=EN, to="ordinal_num"), f"{day.day}."


def t_date(rng: random.Random) -> tuple[str, str]:
    if rng.random() < 0.15:
        en, de = pick(rng, month_forms(random_date(rng)))
        in_month = not en[0].isdigit()  # "in March 2025" -> "im März 2025"; quarters stay bare
        return rng.choice([(en, de), (f"in {en}", f"im {de}")]) if in_month else (en, de)
    en, de = pick(rng, date_forms(random_date(rng)))
    frame = rng.random()
    if frame < 0.55 or (frame >= 0.85 and (de.endswith(".") or "/" in en)):
        return en, de
    if frame < 0.85:
        return f"on {en}", f"am {de}"
    return f"{en}.", f"{de}."


def t_day_of_month(rng: random.Random) -> tuple[str, str]:
    _, month_en, month_de, nth, nth_de = _month_day(rng)
    frames = [
        (f"the {nth} of {month_en}", f"der {nth_de} {month_de}"),
        (f"on the {nth} of {month_en}", f"am {nth_de} {month_de}"),
        (f"{month_en} {nth}", f"{nth_de} {month_de}"),
        (f"on {month_en} {nth}", f"am {nth_de} {month_de}"),
        (f"since the {nth} of {month_en}", f"seit dem {nth_de} {month_de}"),
        (f"until the {nth} of {month_en}", f"bis zum {nth_de} {month_de}"),
        (f"from the {nth} of {month_en}", f"ab dem {nth_de} {month_de}"),
    ]
    year = rng.randrange(1900, 2100)
    in_month = [
        (f"in {month_en}", f"im {month_de}"),
        (f"at the beginning of {month_en}", f"Anfang {month_de}"),
        (f"at the end of {month_en}", f"Ende {month_de}"),
    ]
    if rng.random() < 0.3:  # with a year more often than not, so these frames are not 36 fixed strings
        en, de = rng.choice(in_month)
        return (f"{en} {year}", f"{de} {year}") if rng.random() < 0.8 else (en, de)
    return rng.choice(frames)


def t_weekday(rng: random.Random) -> tuple[str, str]:
    i = rng.randrange(7)
    en, de = dates.get_day_names("wide", locale=EN)[i], dates.get_day_names("wide", locale=DE)[i]
    frames = [
        (f"on {en}", f"am {de}"),
        (f"every {en}", f"jeden {de}"),
        (f"next {en}", f"nächsten {de}"),
        (f"last {en}", f"letzten {de}"),
        (f"on {en} morning", f"am {de}morgen"),
        (f"on {en} evening", f"am {de}abend"),
    ]
    en, de = rng.choice(frames)
    if rng.random() < 0.7:  # a time keeps these frames from being a handful of fixed strings
        t = random_time(rng)
        if en.endswith(("morning", "evening")):
            t = t.replace(hour=rng.randrange(5, 12) if en.endswith("morning") else rng.randrange(17, 23))
        t_en, t_de = pick(rng, time_forms(t))
        return f"{en} at {t_en}", f"{de} um {t_de} Uhr"
    return en, de


def t_time(rng: random.Random) -> tuple[str, str]:
    t_en, t_de = pick(rng, time_forms(random_time(rng, seconds=rng.random() < 0.3)))
    frames = [
        (t_en, t_de),
        (f"at {t_en}", f"um {t_de} Uhr"),
        (f"It is {t_en}.", f"Es ist {t_de} Uhr."),
        (f"before {t_en}", f"vor {t_de} Uhr"),
        (f"after {t_en}", f"nach {t_de} Uhr"),
    ]
    return rng.choice(frames)


def t_interval(rng: random.Random) -> tuple[str, str]:
    if rng.random() < 0.4:  # times: "9:00 AM – 5:30 PM" -> "09:00–17:30 Uhr"
        start = random_time(rng)
        end_minutes = min(start.hour * 60 + start.minute + rng.randrange(15, 600), 23 * 60 + 59)
        end = dt.time(end_minutes // 60, end_minutes % 60)
        return (
            clean(dates.format_interval(start, end, "hm", locale=EN)),
            clean(dates.format_interval(start, end, "Hm", locale=DE)),
        )
    start = random_date(rng)
    end = start + dt.timedelta(days=rng.choice((rng.randrange(1, 28), rng.randrange(1, 400))))
    skeleton = rng.choice(("yMMMd", "yMMMEd", "MMMd", "yMMMM"))
    en = dates.format_interval(start, end, skeleton, locale=EN)
    de = dates.format_interval(start, end, skeleton, locale=DE)
    return clean(en), clean(de)


def t_datetime(rng: random.Random) -> tuple[str, str]:
    d_en, d_de = pick(rng, date_forms(random_date(rng), with_gb=False))
    t_en, t_de = pick(rng, time_forms(random_time(rng)))
    return f"{d_en} at {t_en}", f"{d_de} um {t_de} Uhr"


def t_dateline(rng: random.Random) -> tuple[str, str]:
    """'Vienna, March 3, 2025' -> 'Wien, 3. März 2025' (CLDR exemplar cities and territories)."""
    if rng.random() < 0.5:
        zone = rng.choice(TIMEZONES)
        place_en = dates.get_timezone_location(zone, locale=EN, return_city=True)
        place_de = dates.get_timezone_location(zone, locale=DE, return_city=True)
    else:
        code = rng.choice(TERRITORIES)
        place_en, place_de = Locale.parse(EN).territories[code], DE_LOCALE.territories[code]
    day = random_date(rng)
    style = rng.choice(("full", "long"))
    en = dates.format_date(day, style, locale=rng.choice((EN, GB)))
    return clean(f"{place_en}, {en}"), clean(f"{place_de}, {dates.format_date(day, style, locale=DE)}")


# ---------------------------------------------------------------- numbers


def t_cardinal(rng: random.Random) -> tuple[str, str]:
    if rng.random() < 0.6:
        n = rng.choice((rng.randrange(0, 100), rng.randrange(100, 10000), rng.randrange(10000, 1000000)))
        return number_words(n, EN, american=rng.random() < 0.5), number_words(n, DE)
    en, de = number_pair(rng, random_decimal(rng))
    if rng.random() < 0.2:
        return f"-{en}", f"-{de}"
    return en, de


def t_percent(rng: random.Random) -> tuple[str, str]:
    value = Decimal(rng.choice((rng.randrange(0, 101) * 10, rng.randrange(0, 1001)))) / 1000  # 0..100 %, one decimal
    en = numbers.format_percent(value, locale=EN, decimal_quantization=False)
    return clean(en), clean(numbers.format_percent(value, locale=DE, decimal_quantization=False))


def t_ordinal(rng: random.Random) -> tuple[str, str]:
    n = rng.choice((rng.randrange(1, 32), rng.randrange(1, 200)))
    word_en = number_words(n, EN, to="ordinal", american=rng.random() < 0.5)
    word_de = number_words(n, DE, to="ordinal")
    num_en = num2words(n, lang=EN, to="ordinal_num")
    c = rng.randrange(1, 22)
    century_en = num2words(c, lang=EN, to="ordinal_num")
    frames = [
        (word_en, word_de),
        (f"the {word_en} time", f"das {word_de} Mal"),
        (f"for the {word_en} time", f"zum {word_de}n Mal"),  # dative, weak ending: "zum dritten Mal"
        (f"the {num_en} floor", f"der {n}. Stock"),
        (f"on the {num_en} floor", f"im {n}. Stock"),
        (f"{num_en} place", f"{n}. Platz"),
        (f"in {num_en} place", f"auf dem {n}. Platz"),
        (f"the {century_en} century", f"das {c}. Jahrhundert"),
        (f"in the {century_en} century", f"im {c}. Jahrhundert"),
    ]
    return rng.choice(frames)


def t_year(rng: random.Random) -> tuple[str, str]:
    year = rng.randrange(1100, 2100)
    decade = rng.randrange(110, 210) * 10
    frames = [
        (str(year), str(year)),
        (f"in {year}", f"im Jahr {year}"),
        (num2words(year, lang=EN, to="year"), num2words(year, lang=DE, to="year")),
        (f"in the year {num2words(year, lang=EN, to='year')}", f"im Jahr {num2words(year, lang=DE, to='year')}"),
        (f"in the {decade}s", f"in den {decade}er-Jahren"),
        (f"the {decade}s", f"die {decade}er-Jahre"),
    ]
    return rng.choice(frames)


# name -> (template, weight); weights tilt towards the richer templates
TEMPLATES: dict[str, tuple[Callable[[random.Random], tuple[str, str]], float]] = {
    "date": (t_date, 3.0),
    "day_of_month": (t_day_of_month, 1.0),
    "weekday": (t_weekday, 1.0),
    "time": (t_time, 1.5),
    "interval": (t_interval, 1.0),
    "datetime": (t_datetime, 1.0),
    "dateline": (t_dateline, 1.0),
    "cardinal": (t_cardinal, 2.0),
    "percent": (t_percent, 0.5),
    "ordinal": (t_ordinal, 1.0),
    "year": (t_year, 1.0),
    "quantity": (t_quantity, 3.0),
    "duration": (t_duration, 1.0),
    "money": (t_money, 1.5),
}


def generate_pairs(
    n: int, seed: int, exclude: set[str] | frozenset[str] = frozenset(), distinct: bool = True
) -> list[Pair]:
    """``n`` pairs, none with a source in ``exclude``; a pure function of the arguments.

    ``distinct=True`` (the held-out set) makes every source distinct. ``distinct=False`` (the
    training set) draws independently from the same template mix, repeats included: with
    distinct sources, templates whose space is small (decades, centuries, floors, ordinal and
    small cardinal words: a few hundred sources each) run dry and fill only a fraction of
    their weight, while the held-out set, 2,000 draws, still holds them at full weight.
    Seeded at 200k distinct sources, "ordinal" filled 0.8% of the training pairs against its
    4.9% of the held-out pairs, and the translator missed 45% of those.
    """
    rng = random.Random(seed)
    names = list(TEMPLATES)
    weights = [TEMPLATES[k][1] for k in names]
    seen: set[str] = set()
    out: list[Pair] = []
    misses = 0
    while len(out) < n:
        name = rng.choices(names, weights)[0]
        source, target = TEMPLATES[name][0](rng)
        if source in exclude or (distinct and source in seen):
            misses += 1
            if misses > 20 * n + 1000:  # the templates cannot make that many distinct sources
                raise RuntimeError(f"only {len(out)} distinct pairs after {misses} repeats (asked for {n})")
            continue
        seen.add(source)
        out.append(Pair(source, target, name))
    return out


def make_splits(train_size: int = 200_000, test_size: int = 2_000, seed: int = 0) -> tuple[list[Pair], list[Pair]]:
    """(train, test): the held-out test set (distinct sources) is drawn first; the training
    pairs are independent draws from the same template mix, and none has a test source."""
    test = generate_pairs(test_size, seed=seed * 2 + 1)
    train = generate_pairs(train_size, seed=seed * 2, exclude={p.source for p in test}, distinct=False)
    return train, test
