"""Where a translation model's language tokens go (torch-free: the export and the server share it).

``model.json``'s ``family`` says how a model selects its languages, ``languages.tokens``
which token each code is:

- ``m2m_100`` (M2M100, NLLB): the source language's token opens the source
  (``__en__ ... </s>``, ``eng_Latn ... </s>``) and the target language's token is forced
  as the first output token, then hidden from the text (transformers' ``forced_bos_token_id``);
- ``marian`` with ``>>xx<<`` tokens (multilingual opus-mt): the target's token opens the source;
- ``argos`` with a token (an Argos Translate package's ``target_prefix``): the target language's
  token is forced first in the output and hidden from the text; the source has none;
- anything else: one fixed pair, no tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .manifest import Languages

TokenId = Callable[[str], "int | None"]  # the tokenizer's token_to_id


class LanguageError(ValueError):
    """A language the model does not serve; the message names the ones it does."""


@dataclass(frozen=True)
class LanguagePlan:
    """What one request's languages add to the ids: before the source, and forced first in the output."""

    source_prefix: tuple[int, ...] = ()
    target_prefix: tuple[int, ...] = ()  # forced, hidden from the returned text
    source: str = ""  # the resolved codes ("" where the model has none)
    target: str = ""


def plan(family: str, languages: Languages | None, token_id: TokenId, source: str, target: str) -> LanguagePlan:
    """The ids for resolved ``source`` / ``target`` codes ("" = the model's default, if any)."""
    if languages is None:
        return LanguagePlan(source=source, target=target)
    source = source or languages.default_source or ""
    target = target or languages.default_target or (languages.target[0] if len(languages.target) == 1 else "")
    if not languages.tokens:  # one fixed pair
        return LanguagePlan(source=source, target=target)

    def ids(code: str, side: str) -> tuple[int, ...]:
        if not code:
            return ()
        token = languages.tokens.get(code)
        found = None if token is None else token_id(token)
        if found is None:
            served = languages.source if side == "source" else languages.target
            raise LanguageError(f"{side} language {code!r} is not served by this model: one of {', '.join(served)}")
        return (found,)

    if family == "m2m_100":
        if not source:
            raise LanguageError(f"this model needs a source language: one of {', '.join(languages.source)}")
        if not target:
            raise LanguageError(f"this model needs a target language: one of {', '.join(languages.target)}")
        return LanguagePlan(ids(source, "source"), ids(target, "target"), source, target)
    if family == "argos":
        if not target:
            raise LanguageError(f"this model needs a target language: one of {', '.join(languages.target)}")
        return LanguagePlan((), ids(target, "target"), source, target)
    if family == "marian":
        if not target:
            raise LanguageError(f"this model needs a target language: one of {', '.join(languages.target)}")
        return LanguagePlan(ids(target, "target"), (), source, target)
    return LanguagePlan(source=source, target=target)
