"""Quantities, durations and money, English -> German: CLDR unit patterns with their plural
rules, currency names and formats (through ``babel``), numbers as digits or words."""

from __future__ import annotations

import random

from babel import Locale, numbers, units

from .data_values import DE, EN, clean, first_wins, number_words, pick, random_count, random_decimal

# CLDR unit keys whose long names are ordinary words in both languages.
UNITS = (
    "length-kilometer length-meter length-centimeter length-millimeter length-mile length-foot length-inch "
    "length-yard mass-kilogram mass-gram mass-pound mass-ounce mass-tonne volume-liter volume-milliliter "
    "volume-gallon duration-hour duration-minute duration-second duration-day duration-week duration-month "
    "duration-year temperature-celsius temperature-fahrenheit speed-kilometer-per-hour speed-mile-per-hour "
    "area-square-meter area-square-kilometer area-hectare digital-megabyte digital-gigabyte digital-terabyte "
    "energy-kilowatt-hour energy-calorie power-watt power-kilowatt electric-volt electric-ampere frequency-hertz "
    "length-light-year volume-cubic-meter concentr-percent"
).split()
CURRENCIES = "EUR USD GBP JPY CHF CAD AUD CNY INR SEK NOK DKK PLN CZK MXN BRL TRY ZAR KRW HUF".split()
# Currencies whose German plural name needs no adjective ending ("42 Schweizer Franken" is
# right, CLDR's standalone "Britische Pfund" would need "britische" inside a phrase).
NAMED_CURRENCIES = ("EUR", "USD", "CHF")


def unit_pattern(unit: str, locale: str, length: str, count: float | int) -> str:
    loc = Locale.parse(locale)
    patterns = loc._data["unit_patterns"][unit][length]
    return patterns.get(loc.plural_form(count), patterns["other"])


def quantity(rng: random.Random, unit: str) -> tuple[str, str]:
    """One quantity of ``unit``: digits (long or short unit name) or number words."""
    if rng.random() < 0.4:
        n = random_count(rng)
        american = rng.random() < 0.5
        en = unit_pattern(unit, EN, "long", n).format(number_words(n, EN, american=american))
        return clean(en), clean(unit_pattern(unit, DE, "long", n).format(number_words(n, DE)))
    value = random_decimal(rng) if rng.random() < 0.8 else 1
    if unit.startswith("temperature") and rng.random() < 0.3:
        value = -value
    en_long = units.format_unit(value, unit, length="long", locale=EN)
    de_long = units.format_unit(value, unit, length="long", locale=DE)
    forms = first_wins(
        [
            (en_long, de_long),
            (units.format_unit(value, unit, "short", locale=EN), units.format_unit(value, unit, "short", locale=DE)),
        ]
    )
    return pick(rng, forms)


def t_quantity(rng: random.Random) -> tuple[str, str]:
    en, de = quantity(rng, rng.choice(UNITS))
    frames = [
        (en, de),
        (f"about {en}", f"etwa {de}"),
        (f"more than {en}", f"mehr als {de}"),
        (f"less than {en}", f"weniger als {de}"),
        (f"exactly {en}", f"genau {de}"),
        (f"almost {en}", f"fast {de}"),
    ]
    return rng.choice(frames)


SMALLER_PER_BIGGER = {
    "duration-minute": 60,
    "duration-second": 60,
    "duration-hour": 24,
    "duration-month": 12,
    "duration-day": 7,
}


def t_duration(rng: random.Random) -> tuple[str, str]:
    big, small = rng.choice(
        (
            ("duration-hour", "duration-minute"),
            ("duration-minute", "duration-second"),
            ("duration-day", "duration-hour"),
            ("duration-year", "duration-month"),
            ("duration-week", "duration-day"),
        )
    )
    a = rng.randrange(2, 100)
    b = rng.randrange(2, SMALLER_PER_BIGGER[small])
    if rng.random() < 0.5:
        en = f"{unit_pattern(big, EN, 'long', a).format(a)} and {unit_pattern(small, EN, 'long', b).format(b)}"
        de = f"{unit_pattern(big, DE, 'long', a).format(a)} und {unit_pattern(small, DE, 'long', b).format(b)}"
    else:
        american = rng.random() < 0.5
        en = (
            f"{unit_pattern(big, EN, 'long', a).format(number_words(a, EN, american=american))} and "
            f"{unit_pattern(small, EN, 'long', b).format(number_words(b, EN, american=american))}"
        )
        de = (
            f"{unit_pattern(big, DE, 'long', a).format(number_words(a, DE))} und "
            f"{unit_pattern(small, DE, 'long', b).format(number_words(b, DE))}"
        )
    return clean(en), clean(de)


def t_money(rng: random.Random) -> tuple[str, str]:
    if rng.random() < 0.4:
        code = rng.choice(NAMED_CURRENCIES)
        if rng.random() < 0.5:
            n = random_count(rng)
            american = rng.random() < 0.5
            en = f"{number_words(n, EN, american=american)} {numbers.get_currency_name(code, n, locale=EN)}"
            de = f"{number_words(n, DE)} {numbers.get_currency_name(code, n, locale=DE)}"
        else:
            n = rng.choice((rng.randrange(1, 100), rng.randrange(1, 100000)))
            en = f"{numbers.format_decimal(n, locale=EN)} {numbers.get_currency_name(code, n, locale=EN)}"
            de = f"{numbers.format_decimal(n, locale=DE)} {numbers.get_currency_name(code, n, locale=DE)}"
    else:
        code = rng.choice(CURRENCIES)
        amount = rng.choice((rng.randrange(1, 1000), round(rng.uniform(0, 10 ** rng.randrange(1, 7)), 2)))
        en = numbers.format_currency(amount, code, locale=EN)
        de = numbers.format_currency(amount, code, locale=DE)
    en, de = clean(en), clean(de)
    frames = [(en, de), (f"It costs {en}.", f"Es kostet {de}."), (f"for {en}", f"für {de}")]
    return rng.choice(frames)
