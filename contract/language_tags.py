"""Language codes read as BCP 47 tags, so a request's code finds a model's own (torch-free: the
server's routing and ``attnserve-export pull --languages`` share it).

A code is read by ``langcodes`` (``deu_Latn`` = ``de-Latn``, ``PT-BR`` = ``pt-BR``), with Argos
Translate's two codes of its own read as LibreTranslate names them: ``pb`` is ``pt-BR`` (Brazilian
Portuguese) and ``zt`` is ``zh-Hant`` (traditional Chinese). Its *standard* spelling drops a
script that is the language's likely one (``deu_Latn`` -> ``de``, ``zho_Hant`` -> ``zh-Hant``,
``pb`` -> ``pt-BR``; ``zh-Hans`` keeps its script, as Chinese is written in two).

Which of a list of codes a code names (:func:`matches`), in order:

1. itself, spelled as in the list;
2. the ones of the same standard tag, in any spelling or case (``PT-BR`` and ``pt-br`` name
   ``pb``; ``ZH-HANT`` names ``zt`` and ``zho_Hant``; ``de`` names ``deu_Latn``);
3. a bare code (``pt``, ``zh``, DeepL's ``PT``) names the codes of its language in its likely
   script (``zh``: ``zho_Hans`` rather than ``zho_Hant``, as a bare ``zh`` is simplified Chinese
   to LibreTranslate and DeepL), else any code of its language (``zt`` alone, ``pb`` alone);
4. a code with a region or script (``pt-BR``, ``pt-PT``, ``en-US``, ``zh-TW``, ``zh-Hans``) names
   the codes of its language that do not contradict it, a plain one (``pt``, ``en``, ``zh``)
   first. A script other than the code's (``zh-Hant`` against a plain ``zh``, whose likely
   script is Hans; ``zh-TW`` is written in Hant) or another region (``pt-PT`` against ``pb``)
   contradicts it: ``zh-Hant`` never reaches simplified Chinese, nor ``pt-PT`` Brazilian.

Several found is ambiguous (the caller names them). A code ``langcodes`` cannot read (a model's
private label) names only itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

import langcodes

# Argos Translate's codes that are not BCP 47, as LibreTranslate's /languages spells them.
ARGOS_CODES = {"pb": "pt-BR", "zt": "zh-Hant"}


@lru_cache(maxsize=4096)
def tag(code: str) -> langcodes.Language | None:
    """``code`` as langcodes reads it (``pb`` -> ``pt-BR``); None when it is no language tag."""
    text = code.strip()
    text = ARGOS_CODES.get(text.lower(), text).replace("_", "-")
    try:
        found = langcodes.Language.get(text)
    except (ValueError, LookupError):
        return None
    return found if found.language else None


@lru_cache(maxsize=4096)
def standard(code: str) -> str | None:
    """The standard spelling of ``code`` (``zho_Hant`` -> ``zh-Hant``, ``pb`` -> ``pt-BR``,
    ``deu_Latn`` -> ``de``); None when it is no language tag."""
    found = tag(code)
    return str(found.simplify_script()) if found is not None else None


def language(code: str) -> str | None:
    """The language subtag of ``code`` (``pb`` -> ``pt``, ``deu_Latn`` -> ``de``); None when it is no tag."""
    found = tag(code)
    return found.language if found is not None else None


def _qualified(found: langcodes.Language) -> bool:
    return bool(found.script or found.territory)


def _agrees(wanted: langcodes.Language, have: langcodes.Language) -> bool:
    """Whether ``have`` contradicts none of ``wanted``'s script (its likely one, for a region) and region."""
    if wanted.maximize().script != have.maximize().script:
        return False
    return not (wanted.territory and have.territory) or wanted.territory == have.territory


def matches(code: str, codes: Iterable[str]) -> list[str]:
    """The ones of ``codes`` that ``code`` names (see the module docstring): none, one, or several
    (ambiguous: the caller names them)."""
    listed = list(dict.fromkeys(codes))
    if code in listed:
        return [code]
    wanted = tag(code)
    if wanted is None:
        return []
    same = [c for c in listed if language(c) == wanted.language]
    exact = [c for c in same if standard(c) == standard(code)]
    if exact:
        return exact
    agreeing = [c for c in same if _agrees(wanted, tag(c))]
    if not _qualified(wanted):  # a bare code: its likely script's variants, else any of its language
        return agreeing or same
    plain = [c for c in agreeing if not _qualified(tag(c).simplify_script())]
    return plain or agreeing
