"""A request's languages on one model: codes -> the model's own, and the tokens they force.

A request names ``source_language`` / ``target_language`` in the model's own codes
(``deu_Latn``, ``fra``, ``de``, Argos' ``pb``) or in any spelling of the same language tag
(``de``, ``PT-BR``, ``zh-Hant``), matched by ``attnserve.contract.language_tags`` (Argos' ``pb``
is ``pt-BR``, ``zt`` is ``zh-Hant``): ``pt-BR`` prefers ``pb`` to a plain ``pt``, ``EN-US``
reaches ``en``, a bare ``zh`` reaches ``zho_Hans`` (or ``zt`` where it is the only Chinese),
and ``zh-Hant`` never reaches a simplified ``zh``; a code that matches several of the model's
equally must be given exactly. What the languages add to a job
(``attnserve.contract.languages``): a source token before the source ids, and a forced, hidden
first output token (M2M100 / NLLB). A ``target_prefix`` text adds its tokens to the forced
prefix, visible in the output (CTranslate2's ``target_prefix``). Which model a request goes to
is ``routing``'s.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from attnserve.contract.language_tags import language, matches
from attnserve.contract.languages import LanguageError, plan
from attnserve.contract.manifest import Languages
from attnserve.contract.target_text import target_side

from ..shared.errors import InvalidRequest, echo
from ..translation import DecodeOptions

_PAIR_SUFFIX = re.compile(r"-([a-z]{2,3})-([a-z]{2,3})$")


def iso_639_1(code: str) -> str:
    """The language subtag of ``code`` in its standard (shortest) form: ``deu_Latn`` -> ``de``, ``pb`` -> ``pt``."""
    return language(code) or code.lower()  # not a BCP 47 tag: only an exact match can find it


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
    found = matches(code, codes)
    if len(found) == 1:
        return found[0]
    if found:
        raise InvalidRequest(f"{side} language {echo(code)} is ambiguous for this model: one of {', '.join(found)}")
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
