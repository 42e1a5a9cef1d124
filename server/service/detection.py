"""Which served language a text is in (``source_language: auto``, LibreTranslate's ``/detect``).

Two detectors, each restricted to the languages the caller names (the served ones), which is
what makes one- to three-word inputs work (benchmarks/README.md, "detect"):

- ``langid`` (the default, in the base install): the text's script first (``scripts.py``:
  Cyrillic among Latin languages is Russian whatever its letters), then py3langid, langid.py's
  naive Bayes over byte n-grams (Lui & Baldwin 2012), its model (4.5 MB) inside the wheel;
- ``lingua`` (the ``detect`` extra, ``lingua-language-detector``, 96 MB): more accurate on
  short Latin-script texts, larger and slower to load.

``detect`` -> every candidate with its confidence (0..100), best first; all at 0 where nothing in
the text tells them apart ("Hi", "ok" to langid). With ``langid``, a text
the whole model is sure is in a language not served (Italian on an en/de/fr server) keeps the
served languages' ranking at confidences lowered by that share: low, as LibreTranslate answers;
``lingua`` is lowered by py3langid's whole model the same way.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, Protocol

import langcodes

from attnserve.contract import language_tags

from ..shared.config import ConfigError
from .requests import Detection
from .scripts import same_script

log = logging.getLogger(__name__)

RESTRICTED_SETS = 64  # identifiers restricted to a set of languages, kept (each holds its columns of the model)
LABEL_ALIASES = {"nb": "no"}  # a served code whose language py3langid labels otherwise
FOREIGN = 0.5  # the unrestricted model's share for one unserved language that lowers the served ones'
KIN = 20  # CLDR's distance from a label to a served language in its script: a variety of it (yue, zh-Hant)


class Detector(Protocol):
    name: str

    def detect(self, text: str, codes: list[str]) -> list[Detection]:
        """The languages of ``codes`` the text may be in, best first, confidences 0..100."""
        ...


class LangidDetector:
    """The text's script, then py3langid among the candidates of that script.

    The model loads on first use (~2 s: it is xz-compressed in the wheel), on the work pool,
    once; an identifier restricted to a set of languages is a view of its columns, kept.
    """

    name = "langid"

    def __init__(self) -> None:
        from py3langid import langid  # a base dependency

        self._langid = langid
        self._lock = threading.Lock()
        self._full: Any = None
        self._known: frozenset[str] = frozenset()
        self._restricted: OrderedDict[tuple[str, ...], Any] = OrderedDict()

    def _model(self) -> Any:
        with self._lock:
            if self._full is None:
                self._full = self._langid.LanguageIdentifier.from_model_file(self._langid.MODEL_FILE, norm_probs=True)
                self._known = frozenset(self._full.labels)
            return self._full

    def _identifier(self, labels: tuple[str, ...]) -> Any:
        full = self._model()
        with self._lock:
            identifier = self._restricted.get(labels)
            if identifier is None:
                identifier = copy.copy(full)  # shares the model's arrays; set_languages rebinds its own
                identifier.set_languages(list(labels))
                self._restricted[labels] = identifier
                if len(self._restricted) > RESTRICTED_SETS:
                    self._restricted.popitem(last=False)
            else:
                self._restricted.move_to_end(labels)
            return identifier

    def _labels(self, codes: list[str]) -> dict[str, str]:
        """py3langid's label -> the first served code of that language (``pt-BR`` -> ``pt``)."""
        self._model()
        labels: dict[str, str] = {}
        for code in codes:
            try:
                language = langcodes.Language.get(code).language or ""
            except (ValueError, LookupError):
                continue
            label = LABEL_ALIASES.get(language, language)
            if label in self._known:
                labels.setdefault(label, code)
        return labels

    def detect(self, text: str, codes: list[str]) -> list[Detection]:
        labels = self._labels(same_script(text, codes))
        if len(labels) < 2:  # the script named it (or nothing is known): not a statistical guess
            return [Detection(code, 100.0) for code in labels.values()]
        ranked = self._identifier(tuple(sorted(labels))).rank(text)
        if ranked[0][1] - ranked[-1][1] < 1e-9:  # "Hi", "ok": no n-gram the model knows, a tie
            return [Detection(code, 0.0) for code in labels.values()]
        keep = self._served_share(text, labels)
        return [Detection(labels[label], round(100 * p * keep, 2)) for label, p in ranked if round(100 * p, 2) > 0]

    def served_share(self, text: str, codes: list[str]) -> float:
        """What the served languages keep of their confidences (1, or less: ``_served_share``)."""
        return self._served_share(text, self._labels(codes))

    def _served_share(self, text: str, labels: Iterable[str]) -> float:
        """Among the served languages alone, Italian is English at 92%: where the whole model is
        sure (FOREIGN) of a language not served nor a variety of one, what it leaves them."""
        top, share = self._model().rank(text)[0]
        return 1.0 - share if share >= FOREIGN and not _kin(top, labels) else 1.0


def _kin(label: str, served: Iterable[str]) -> bool:
    """Whether py3langid's ``label`` is a served language or a variety of one (Cantonese of
    Chinese, Moroccan Arabic of Arabic), by CLDR's language matching in the label's script."""
    if label in served:
        return True
    try:
        script = langcodes.Language.get(label).maximize().script
        return any(langcodes.tag_distance(label, f"{s}-{script}" if script else s) <= KIN for s in served)
    except (ValueError, LookupError):
        return False


class LinguaDetector:
    """lingua, restricted to the given codes (the ones it knows)."""

    name = "lingua"

    def __init__(self) -> None:
        import lingua  # the 'detect' extra

        self._lingua = lingua
        self._foreign = LangidDetector()  # the whole py3langid model: a language not served (Polish)
        self._built: dict[tuple[str, ...], Any] = {}

    def _known(self, codes: list[str]) -> dict[str, Any]:
        known = {}
        taken = set()
        for code in codes:  # the first served code of each language, as langid's labels (pt-BR -> pt)
            try:
                iso = self._lingua.IsoCode639_1.from_str(language_tags.language(code) or code.lower())
            except ValueError:
                continue
            if iso not in taken:
                taken.add(iso)
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
        values = [v for v in detector.compute_language_confidence_values(text) if v.value > 0]
        keep = self._foreign.served_share(text, list(known)) if values else 1.0
        return [Detection(by_language[v.language], round(100 * v.value * keep, 2)) for v in values]


def _lingua_or_none() -> LinguaDetector | None:
    try:
        return LinguaDetector()
    except ImportError:
        return None


def make_detector(choice: str) -> Detector | None:
    """``langid``: the built-in one; ``lingua``: lingua or ConfigError; ``auto``: lingua when
    installed, else langid; ``off``: none."""
    if choice == "off":
        return None
    if choice in ("lingua", "auto"):
        found = _lingua_or_none()
        if found is not None:
            return found
        if choice == "lingua":
            raise ConfigError("language_detection lingua: lingua is not installed (pip install 'attnserve[detect]')")
    try:
        return LangidDetector()
    except ImportError:  # a base dependency: only a broken installation lacks it
        raise ConfigError(
            "language_detection langid: py3langid is not installed (it is a dependency of attnserve: reinstall it)"
        ) from None
