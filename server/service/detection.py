"""Which served language a text is in (``source_language: auto``, LibreTranslate's ``/detect``).

lingua (the ``detect`` extra: ``lingua-language-detector``), restricted to the served
languages it knows; without it, ``auto`` resolves to the only source language the target is
reached from, if there is one (:meth:`TranslationService.detect_source`).
"""

from __future__ import annotations

import logging
from typing import Any

from ..config import ConfigError
from .requests import Detection

log = logging.getLogger(__name__)


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
