"""DeepL's language codes as its clients read them: a detected source language's code, and the
codes and names ``GET /v2/languages`` lists (``deepl_routes``)."""

from __future__ import annotations

from ...service.routing import language_name
from ...service.stored_glossaries import language
from ...shared.errors import InvalidRequest

# The targets DeepL lists for a plain model of these languages (``routing`` sends EN-US and EN-GB to
# an ``en``, PT-PT and PT-BR to a ``pt``, ZH-HANS to a ``zh``), and DeepL's names of its variants.
VARIANTS = {"en": ("EN-GB", "EN-US"), "pt": ("PT-BR", "PT-PT"), "zh": ("ZH", "ZH-HANS")}
VARIANT_NAMES = {
    "EN-GB": "English (British)",
    "EN-US": "English (American)",
    "PT-BR": "Portuguese (Brazilian)",
    "PT-PT": "Portuguese (European)",
    "ZH": "Chinese (simplified)",
    "ZH-HANS": "Chinese (simplified)",
    "ZH-HANT": "Chinese (traditional)",
}


def upper(code: str) -> str:
    """A language's DeepL code (``PT`` for ``pt`` and ``pt-BR``), else the code in capitals."""
    try:
        return language(code, "source").upper()
    except InvalidRequest:
        return code.upper()


def sources(codes: set[str]) -> list[tuple[str, str]]:
    """DeepL's source codes name a language only (``PT`` for ``pt`` and ``pt-BR``)."""
    return [(upper(code), language_name(upper(code).lower())) for code in codes]


def targets(codes: set[str]) -> list[tuple[str, str]]:
    """A variant's own code (``PT-BR``, ``ZH-HANT``); DeepL's variants of a plain ``en``, ``pt``, ``zh``."""
    found = []
    for code in codes:
        plain = upper(code)
        variants = VARIANTS.get(plain.lower(), (plain,)) if plain.lower() == code.lower() else (code.upper(),)
        found += [(v, VARIANT_NAMES.get(v) or language_name(code)) for v in variants]
    return found
