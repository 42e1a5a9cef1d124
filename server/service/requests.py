"""The canonical requests every door builds, and the checked form the engines trust.

A door decodes its wire format into a :class:`TranslationRequest` or a
:class:`ClassificationRequest` (types only: strings are strings, numbers numbers, decoding
options a ``DecodeOptions``) and hands it to its service. The translation service checks it
once into a :class:`ValidTranslation` (TGI's ``validate(GenerateRequest) ->
ValidGenerateRequest``): the model it goes to, its languages in the model's own codes, its
options carrying the language tokens and checked against the engine's limits. Nothing below
the service checks them again.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from attnserve.contract.deadline import Deadline

from ..documents import HTML_RULES, TEXT, MarkupRules
from ..documents.alignment import WordAlignment
from ..images.classifier import ImageInput
from ..runtime.registry import LoadedModel
from ..shared.calls import Call
from ..shared.errors import InferenceFailed
from ..translation import DecodeOptions, StreamEvent, TranslationResult
from .glossary import CompiledGlossary
from .quality import TextQuality
from .translation_cache import TranslationCache

AUTO = "auto"  # a source language to detect (LibreTranslate's ``source: auto``; any door may send it)
MODEL_VERSION = "1"  # one version per model name; a hot reload replaces it in place (KServe's model_version)


@dataclass(frozen=True)
class TranslationRequest:
    """One translation request, whichever door it came through.

    ``caller``: the tracked call it belongs to (its request id and door: the metrics' method
    label); the service books the work on it. ``model`` "" lets the language pair (or the only
    translation model) choose. Languages are the model's codes, ISO 639-1, or ``auto`` for the
    source; ``target_prefix`` is text forced at the start of every translation; ``alignments``
    asks for the word alignments of each sentence's best translation (:class:`Translated`).
    """

    caller: Call
    texts: tuple[str, ...]
    model: str = ""
    version: str = ""  # KServe's model version: "" or the one served
    format: str = TEXT
    # how format html reads its tags: xml, elements not translated, tags that split or not
    # (``documents.markup.MarkupRules``; DeepL's tag handling options)
    markup: MarkupRules = HTML_RULES
    source_language: str = ""
    target_language: str = ""
    target_prefix: str = ""
    options: DecodeOptions = field(default_factory=DecodeOptions)
    deadline: Deadline | None = None
    # (source term, target term) pairs the translation must honour; target "" keeps the term
    # (do not translate). They extend the server's default glossary (``service/glossary.py``).
    glossary: tuple[tuple[str, str], ...] = ()
    # a stored glossary of the caller's key (``stored_glossaries.py``), which the service reads
    # into ``stored_glossary``: terms under the request's own, over the server's defaults
    glossary_id: str = ""
    stored_glossary: tuple[tuple[str, str], ...] = ()
    alignments: bool = False  # word alignments of every sentence's best translation
    quality: bool = False  # a quality score per text and sentence (``quality.py``)
    # n > 0: every text's translation and then n alternatives that read differently, decoded with
    # a beam of n + 1, and again wider for a text whose beam held fewer (``alternatives.py``;
    # ``TranslationService.translate``, not a stream)
    distinct_alternatives: int = 0
    # its characters count in its caller's monthly usage (``usage.py``); False: texts of a request
    # already counted, asked again (its distinct alternatives, decoded with a wider beam)
    billed: bool = True


@dataclass(frozen=True)
class Detection:
    """A detected source language (a served code) and how sure the detector is, 0..100."""

    language: str
    confidence: float


@dataclass(frozen=True)
class ValidTranslation:
    """A request checked once: what the documents and the engine trust (see the module docstring)."""

    request: TranslationRequest
    model: LoadedModel
    options: DecodeOptions  # the request's, with the language tokens and the forced prefix
    max_new_tokens: int  # per sentence: the options' or the model's limit
    source_language: str  # the model's codes ("" where the model has none)
    target_language: str
    sentences_per_call: int  # of one engine call (documents.py): the server's --max-texts-per-request
    detected: Detection | None = None  # when the source language was ``auto``
    glossary: CompiledGlossary | None = None  # the request's terms with the server's, tokenised
    cache: TranslationCache | None = None  # the server's sentence translations (translation_cache.py)


@dataclass(frozen=True)
class Translated:
    """The answer to a :class:`TranslationRequest`: one result per text (document), in order."""

    model: str
    results: list[TranslationResult]
    source_language: str
    target_language: str
    detected: tuple[Detection, ...] = ()  # per text, when the source language was ``auto`` (service/mixed.py)
    alignments: list[list[WordAlignment]] | None = None  # per text, per sentence: when the request asked
    pivot: str = ""  # the language the texts went through (two models: service/pivot.py); "" = direct
    # per text: when the request asked or the server has --min-quality (service/quality.py)
    quality: list[TextQuality] | None = None


Event = StreamEvent | Translated  # a request's events: a stream's token events, then its reply


async def drained(events: AsyncIterator[Event]) -> Translated:
    """The reply at the end of a request's events (``TranslationService.events``), the events
    before it read and dropped, as TGI's ``generate`` drains ``generate_stream``."""
    async with contextlib.aclosing(events):
        async for event in events:
            if isinstance(event, Translated):
                return event
    raise InferenceFailed("the translation ended without its reply")


@dataclass(frozen=True)
class ClassificationRequest:
    """Images to classify; ``top_k`` 0 takes the server's default."""

    caller: Call
    images: tuple[ImageInput, ...]
    model: str = ""
    version: str = ""
    top_k: int = 0
    deadline: Deadline | None = None
