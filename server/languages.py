"""Languages per request: codes -> the model's own, language-pair routing, and the forced tokens.

A request names ``source_language`` / ``target_language`` in the model's own codes
(``deu_Latn``, ``fra``, ``de``) or as ISO 639-1 (``de``), matched through ``langcodes``'
standard tags (``deu_Latn`` -> ``de``, ``fra`` -> ``fr``); a code that matches several of
the model's (``zh``: ``zho_Hans`` and ``zho_Hant``) must be given exactly. What the
languages add to a job (``attnserve.contract.languages``): a source token before the
source ids, and a forced, hidden first output token (M2M100 / NLLB). A ``target_prefix``
text adds its tokens to the forced prefix, visible in the output (CTranslate2's
``target_prefix``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

import langcodes

from attnserve.contract.languages import LanguageError, plan
from attnserve.contract.manifest import Languages, Manifest
from attnserve.contract.target_text import target_side

from .errors import InvalidRequest, ModelNotFound
from .translation import DecodeOptions


@dataclass(frozen=True)
class LanguageRequest:
    source: str = ""
    target: str = ""
    target_prefix: str = ""

    def __bool__(self) -> bool:
        return bool(self.source or self.target or self.target_prefix)


@lru_cache(maxsize=4096)
def iso_639_1(code: str) -> str:
    """The language subtag of ``code`` in its standard (shortest) form: ``deu_Latn`` -> ``de``."""
    try:
        return langcodes.Language.get(code.replace("_", "-")).language or code.lower()
    except (ValueError, LookupError):  # not a BCP 47 tag: only an exact match can find it
        return code.lower()


def served(manifest: Manifest) -> tuple[list[str], list[str]]:
    """(source codes, target codes) of a translation model; empty lists for one fixed pair."""
    languages = manifest.languages
    return (list(languages.source), list(languages.target)) if languages else ([], [])


def resolve(code: str, codes: list[str], side: str) -> str:
    """``code`` as one of the model's ``codes`` ("" stays ""); InvalidRequest naming them otherwise."""
    if not code or code in codes:
        return code
    wanted = iso_639_1(code)
    matches = [c for c in codes if iso_639_1(c) == wanted]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise InvalidRequest(f"{side} language {code!r} is ambiguous for this model: one of {', '.join(matches)}")
    listed = ", ".join(codes) if codes else "none (this model translates one fixed pair)"
    raise InvalidRequest(f"{side} language {code!r} is not served by this model; its {side} languages: {listed}")


def serves(manifest: Manifest, source: str, target: str) -> bool:
    """Whether the model serves the pair (an empty side matches anything, a fixed-pair model nothing)."""
    sources, targets = served(manifest)
    for code, codes, side in ((source, sources, "source"), (target, targets, "target")):
        if not code:
            continue
        if not codes:
            return False
        try:
            resolve(code, codes, side)
        except InvalidRequest:
            return False
    return True


def route(models: dict, source: str, target: str):
    """The one translation model that serves ``source`` -> ``target`` (an empty model name).

    ``models``: name -> LoadedModel. NOT_FOUND when none does, INVALID_ARGUMENT when
    several do (the request must name one).
    """
    translation = [m for m in models.values() if m.kind == "translation"]
    found = [m for m in translation if serves(m.manifest, source, target)]
    if len(found) == 1:
        return found[0]
    pair = f"{source or '*'} -> {target or '*'}"
    if not found:
        raise ModelNotFound(f"no model serves {pair}; translation models: {', '.join(m.name for m in translation)}")
    raise InvalidRequest(f"several models serve {pair}: {', '.join(m.name for m in found)}; name one in model")


def model_name(models: dict, name: str, request: LanguageRequest) -> str:
    """The model a request goes to: its own name, else the one serving its language pair, else ""
    (the registry then picks the only translation model)."""
    if name or not (request.source or request.target):
        return name
    return route(models, request.source, request.target).name


def apply(manifest: Manifest, tokenizer, options: DecodeOptions, request: LanguageRequest):
    """``options`` with the request's language tokens and target prefix -> (options, source code, target code).

    ``tokenizer``: the model's ``tokenizers.Tokenizer``. Raises InvalidRequest.
    """
    sources, targets = served(manifest)
    source = resolve(request.source, sources, "source") if sources or request.source else ""
    target = resolve(request.target, targets, "target") if targets or request.target else ""
    try:
        chosen = plan(manifest.family, manifest.languages or Languages(), tokenizer.token_to_id, source, target)
    except LanguageError as exc:
        raise InvalidRequest(str(exc)) from None
    prefix = list(chosen.target_prefix)
    if request.target_prefix:
        text = target_side(tokenizer).encode(request.target_prefix, add_special_tokens=False).ids
        special = {manifest.tokenizer.eos_id, manifest.tokenizer.pad_id, manifest.tokenizer.unk_id}
        prefix += [i for i in text if i not in special]
    options = dataclasses.replace(
        options,
        source_prefix_ids=tuple(chosen.source_prefix),
        prefix_ids=tuple(prefix),
        hide_prefix=len(chosen.target_prefix),
    )
    return options, chosen.source, chosen.target
