"""A request's languages on one model: codes -> the model's own, and the tokens they force.

A request names ``source_language`` / ``target_language`` in the model's own codes
(``deu_Latn``, ``fra``, ``de``) or as ISO 639-1 (``de``), matched through ``langcodes``'
standard tags (``deu_Latn`` -> ``de``, ``fra`` -> ``fr``); a code that matches several of
the model's (``zh``: ``zho_Hans`` and ``zho_Hant``) must be given exactly. What the
languages add to a job (``attnserve.contract.languages``): a source token before the
source ids, and a forced, hidden first output token (M2M100 / NLLB). A ``target_prefix``
text adds its tokens to the forced prefix, visible in the output (CTranslate2's
``target_prefix``). Which model a request goes to is ``routing``'s.
"""

from __future__ import annotations

import dataclasses
import re
from functools import lru_cache
from typing import Any

import langcodes

from attnserve.contract.languages import LanguageError, plan
from attnserve.contract.manifest import Languages
from attnserve.contract.target_text import target_side

from ..shared.errors import InvalidRequest, echo
from ..translation import DecodeOptions

_PAIR_SUFFIX = re.compile(r"-([a-z]{2,3})-([a-z]{2,3})$")


@lru_cache(maxsize=4096)
def iso_639_1(code: str) -> str:
    """The language subtag of ``code`` in its standard (shortest) form: ``deu_Latn`` -> ``de``."""
    try:
        return langcodes.Language.get(code.replace("_", "-")).language or code.lower()
    except (ValueError, LookupError):  # not a BCP 47 tag: only an exact match can find it
        return code.lower()


def own_codes(model: Any) -> tuple[list[str], list[str]]:
    """(source codes, target codes) of a loaded translation model in its own spelling: the ones
    its model.json declares, else the pair its name ends with (``opus-mt-en-de``), else none."""
    declared = model.manifest.languages  # attnserve.contract.manifest.Languages, or None
    if declared is not None:
        return list(declared.source), list(declared.target)
    pair = _PAIR_SUFFIX.search(model.name)
    return ([pair[1]], [pair[2]]) if pair else ([], [])


def resolve(code: str, codes: list[str], side: str) -> str:
    """``code`` as one of the model's ``codes`` ("" stays ""); InvalidRequest naming them otherwise."""
    if not code or code in codes:
        return code
    wanted = iso_639_1(code)
    matches = [c for c in codes if iso_639_1(c) == wanted]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise InvalidRequest(f"{side} language {echo(code)} is ambiguous for this model: one of {', '.join(matches)}")
    listed = ", ".join(codes) if codes else "none (this model translates one fixed pair)"
    raise InvalidRequest(f"{side} language {echo(code)} is not served by this model; its {side} languages: {listed}")


def apply(
    model: Any, options: DecodeOptions, source: str, target: str, target_prefix: str
) -> tuple[DecodeOptions, str, str]:
    """``options`` with the languages' tokens and the target prefix -> (options, source code, target code).

    ``model``: a LoadedModel of kind translation. Raises InvalidRequest.
    """
    manifest, tokenizer = model.manifest, model.engine.tokenizer
    sources, targets = own_codes(model)
    source = resolve(source, sources, "source") if sources or source else ""
    target = resolve(target, targets, "target") if targets or target else ""
    try:
        chosen = plan(manifest.family, manifest.languages or Languages(), tokenizer.token_to_id, source, target)
    except LanguageError as exc:
        raise InvalidRequest(str(exc)) from None
    prefix = list(chosen.target_prefix)
    if target_prefix:
        text = target_side(tokenizer).encode(target_prefix, add_special_tokens=False).ids
        special = {manifest.tokenizer.eos_id, manifest.tokenizer.pad_id, manifest.tokenizer.unk_id}
        prefix += [i for i in text if i not in special]
    options = dataclasses.replace(
        options,
        source_prefix_ids=tuple(chosen.source_prefix),
        prefix_ids=tuple(prefix),
        hide_prefix=len(chosen.target_prefix),
    )
    return options, chosen.source, chosen.target


def segmenter_language(code: str | None) -> str:
    """A model's or request's language code -> the sentence splitter's (sentencex's ISO 639-1:
    ``de`` of ``de``, ``de-AT``, ``deu``, ``deu_Latn``); sentencex reads a code it has no rules
    for with its default (English-like) rules. No code: "en"."""
    return iso_639_1(code) if code else "en"
