"""The languages of the served translation models, and which model serves a language pair.

A model names its languages in ``model.json``: ``"languages": {"source": [...], "target":
[...]}`` (parsed by ``attnserve.contract.manifest``), listed here by their ISO 639-1 codes
where that is unambiguous (NLLB's ``deu_Latn`` is ``de``), else by the model's own. A
model that declares none but is named ``<anything>-<src>-<tgt>`` with two- or three-letter
codes (``translator-en-de``, ``opus-mt-en-de``) translates ``src`` -> ``tgt``; one with
neither is served on every other route but takes no part in language routing. A pair
served by several models goes to the first by name.

Language detection (``source: auto``, ``/detect``) uses lingua (the ``detect`` extra:
``lingua-language-detector``) restricted to the served languages it knows; without it,
``auto`` resolves to the only source language the target is reached from, if there is one.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from attnserve.contract.kinds import TRANSLATION

from ...config import ConfigError
from ...languages import iso_639_1

log = logging.getLogger(__name__)

_PAIR_SUFFIX = re.compile(r"-([a-z]{2,3})-([a-z]{2,3})$")
# English names of common ISO 639-1 codes (LibreTranslate's /languages gives each a name).
NAMES = {
    "ar": "Arabic", "az": "Azerbaijani", "bg": "Bulgarian", "bn": "Bengali", "ca": "Catalan", "cs": "Czech",
    "da": "Danish", "de": "German", "el": "Greek", "en": "English", "eo": "Esperanto", "es": "Spanish",
    "et": "Estonian", "eu": "Basque", "fa": "Persian", "fi": "Finnish", "fr": "French", "ga": "Irish",
    "gl": "Galician", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian", "it": "Italian",
    "ja": "Japanese", "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian", "ms": "Malay", "nb": "Norwegian",
    "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sk": "Slovak",
    "sl": "Slovenian", "sq": "Albanian", "sv": "Swedish", "th": "Thai", "tl": "Tagalog", "tr": "Turkish",
    "uk": "Ukrainian", "ur": "Urdu", "vi": "Vietnamese", "zh": "Chinese",
}  # fmt: skip


def language_name(code: str) -> str:
    """``de`` -> ``German``; a model's own code by its language: ``zho_Hant`` -> ``Chinese (zho_Hant)``."""
    if code.lower() in NAMES:
        return NAMES[code.lower()]
    iso = iso_639_1(code)
    return f"{NAMES[iso]} ({code})" if iso in NAMES else code


@dataclass(frozen=True)
class ModelLanguages:
    model: str
    sources: tuple[str, ...]
    targets: tuple[str, ...]


def declared_languages(model: Any) -> ModelLanguages:
    """What a loaded translation model translates from and to (both empty when it does not say)."""
    declared = model.manifest.languages  # attnserve.contract.manifest.Languages, or None
    if declared is not None:
        sources, targets = _codes(declared.source), _codes(declared.target)
        if sources and targets:
            return ModelLanguages(model.name, sources, targets)
    pair = _PAIR_SUFFIX.search(model.name)
    if pair:
        return ModelLanguages(model.name, (pair[1],), (pair[2],))
    return ModelLanguages(model.name, (), ())


def _codes(values: list[str]) -> tuple[str, ...]:
    """The public codes of a model's own: ISO 639-1 where it names one of them only (``deu_Latn``
    -> ``de``; ``zho_Hans`` and ``zho_Hant`` stay as they are). The server maps them back
    (``attnserve.server.languages.resolve``)."""
    own = list(dict.fromkeys(v for v in values if v))
    isos = [iso_639_1(code) for code in own]
    return tuple(iso if isos.count(iso) == 1 else code for code, iso in zip(own, isos, strict=True))


class LanguageTable:
    """Every served translation model's languages; rebuilt when the set of models changes."""

    def __init__(self, models: list[ModelLanguages]) -> None:
        self.models = sorted((m for m in models if m.sources and m.targets), key=lambda m: m.model)
        self.pairs: dict[tuple[str, str], str] = {}
        for m in self.models:
            for s in m.sources:
                for t in m.targets:
                    if s != t:
                        self.pairs.setdefault((s, t), m.model)
        self.codes = sorted({c for m in self.models for c in (*m.sources, *m.targets)})
        self.sources = sorted({s for s, _ in self.pairs})

    def targets_of(self, source: str) -> list[str]:
        return sorted(t for s, t in self.pairs if s == source)

    def sources_to(self, target: str) -> list[str]:
        return sorted(s for s, t in self.pairs if t == target)

    def model_for(self, source: str, target: str) -> str | None:
        return self.pairs.get((source, target))


class ServedLanguages:
    """The language table of a registry, cached per set of loaded model versions."""

    def __init__(self, registry: Any) -> None:
        self.registry = registry
        self._key: tuple = ()
        self._table = LanguageTable([])

    @property
    def table(self) -> LanguageTable:
        models = [m for m in self.registry.models.values() if m.kind == TRANSLATION]
        key = tuple(sorted((m.name, m.fingerprint) for m in models))
        if key != self._key:
            self._table, self._key = LanguageTable([declared_languages(m) for m in models]), key
        return self._table


@dataclass(frozen=True)
class Detection:
    language: str
    confidence: float  # 0..100, as LibreTranslate reports it


class Detector:
    """lingua, restricted to the given codes (the ones it knows); ``detect`` -> best first."""

    def __init__(self) -> None:
        import lingua  # the 'detect' extra

        self._lingua = lingua
        self._built: dict[tuple[str, ...], Any] = {}

    def _known(self, codes: list[str]) -> dict[str, Any]:
        known = {}
        for code in codes:
            try:
                iso = self._lingua.IsoCode639_1.from_str(code.lower())
            except ValueError:
                continue
            known[code] = self._lingua.Language.from_iso_code_639_1(iso)
        return known

    def detect(self, text: str, codes: list[str]) -> list[Detection]:
        known = self._known(codes)
        if len(known) < 2:  # lingua compares two or more languages; one is the answer itself
            return [Detection(code, 100.0) for code in known]
        key = tuple(sorted(known))
        detector = self._built.get(key)
        if detector is None:
            detector = self._lingua.LanguageDetectorBuilder.from_languages(*known.values()).build()
            self._built[key] = detector
        by_language = {language: code for code, language in known.items()}
        values = detector.compute_language_confidence_values(text)
        return [Detection(by_language[v.language], round(100 * v.value, 2)) for v in values if v.value > 0]


def make_detector(choice: str) -> Detector | None:
    """``auto``: lingua when installed; ``lingua``: lingua or ConfigError; ``off``: none."""
    if choice == "off":
        return None
    try:
        return Detector()
    except ImportError:
        if choice == "lingua":
            raise ConfigError(
                "language_detection lingua: lingua is not installed (pip install 'attnserve[detect]')"
            ) from None
        log.info("language detection off: lingua is not installed (pip install 'attnserve[detect]')")
        return None
