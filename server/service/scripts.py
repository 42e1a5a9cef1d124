"""Which writing system a text is in, and which languages write it: the first cut of detection.

A short text's script says more than its letters' statistics do: "Привет" is Russian among
English, German and Russian whatever a character-n-gram model thinks of six letters. The
languages whose script matches the text's are the candidates the statistical detector
chooses among (``detection.py``), which also keeps it from answering Chinese for a Latin word
(benchmarks/README.md, "detect").

Scripts are ISO 15924 codes, as ``langcodes`` gives a language's likely script (``ru`` ->
``Cyrl``, ``ja`` -> ``Jpan``). Japanese writes Han and kana, Korean Hangul and Han.
"""

from __future__ import annotations

import functools
import unicodedata
from collections import Counter

import langcodes

# The first word of a letter's Unicode name -> its ISO 15924 script; a script not listed keeps
# its Unicode word (it then matches no language, and every candidate stays in).
UNICODE_SCRIPTS = {
    "LATIN": "Latn",
    "CYRILLIC": "Cyrl",
    "GREEK": "Grek",
    "ARABIC": "Arab",
    "HEBREW": "Hebr",
    "CJK": "Hani",
    "HIRAGANA": "Kana",
    "KATAKANA": "Kana",
    "HALFWIDTH": "Kana",  # HALFWIDTH KATAKANA LETTER ...
    "HANGUL": "Hang",
    "DEVANAGARI": "Deva",
    "BENGALI": "Beng",
    "GURMUKHI": "Guru",
    "GUJARATI": "Gujr",
    "TAMIL": "Taml",
    "TELUGU": "Telu",
    "KANNADA": "Knda",
    "MALAYALAM": "Mlym",
    "SINHALA": "Sinh",
    "THAI": "Thai",
    "LAO": "Laoo",
    "KHMER": "Khmr",
    "MYANMAR": "Mymr",
    "GEORGIAN": "Geor",
    "ARMENIAN": "Armn",
    "ETHIOPIC": "Ethi",
    "TIBETAN": "Tibt",
}
# A language's script -> the scripts of the letters it is written in.
WRITTEN_WITH = {"Jpan": {"Hani", "Kana"}, "Kore": {"Hang", "Hani"}, "Hans": {"Hani"}, "Hant": {"Hani"}}
ONLY_THEIRS = ("Kana", "Hang")  # letters that name their language among those sharing Han


@functools.lru_cache(maxsize=4096)
def letter_script(letter: str) -> str:
    name = unicodedata.name(letter, "")
    word = name.split(" ", 1)[0]
    return UNICODE_SCRIPTS.get(word, word)


@functools.lru_cache(maxsize=1024)
def language_scripts(code: str) -> frozenset[str]:
    """The scripts ``code``'s letters are in (``zh`` -> Hani, ``ja`` -> Hani and Kana); empty when unknown."""
    try:
        script = langcodes.Language.get(code).maximize().script
    except (ValueError, LookupError):
        return frozenset()
    if not script:
        return frozenset()
    return frozenset(WRITTEN_WITH.get(script, {script}))


def text_scripts(text: str) -> Counter[str]:
    """How many of the text's letters each script holds."""
    return Counter(letter_script(ch) for ch in text if ch.isalpha())


def same_script(text: str, codes: list[str]) -> list[str]:
    """The codes whose languages write the text's main script, in order; all of them when the
    text has no letters or no code writes its script. Kana or Hangul anywhere in a text of Han
    characters names Japanese or Korean among the languages that write Han."""
    counts = text_scripts(text)
    if not counts:
        return codes
    for script in ONLY_THEIRS:
        if counts.get(script):
            chosen = [c for c in codes if script in language_scripts(c)]
            if chosen:
                return chosen
    main = counts.most_common(1)[0][0]
    return [c for c in codes if main in language_scripts(c)] or codes
