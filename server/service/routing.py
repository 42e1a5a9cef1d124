"""Which model a translation request goes to: the one routing policy of every door.

A model's languages are the ones its ``model.json`` declares (``"languages": {"source":
[...], "target": [...]}``), else the pair in its name (``<anything>-<src>-<tgt>`` with two-
or three-letter codes: ``translator-en-de``, ``opus-mt-en-de``), else none. Publicly (the
LibreTranslate ``/languages`` list, the codes a request is matched against) a model's code
is its standard language tag (``attnserve.contract.language_tags``: NLLB's ``deu_Latn`` is
``de``, ``zho_Hant`` is ``zh-Hant``; Argos Translate's ``pb`` is ``pt-BR`` and ``zt`` is
``zh-Hant``, as LibreTranslate lists them), or its own code where two of its own share one.
A request's code finds a public code as ``language_tags.matches`` says: an exact code first,
``pt-BR`` / ``zh-Hant`` the model made for exactly that before a plain ``pt`` / ``zh``, a bare
``pt`` / ``zh`` the plain one (or the only variant served: ``pt-BR`` alone), ``EN-US`` /
``EN-GB`` an ``en``; ``zh-Hant`` never reaches a simplified ``zh`` nor ``pt-PT`` a ``pt-BR``.

The policy, the same through every door:

1. a request that names a model goes to that model (``NOT_FOUND`` if it is not served);
   its languages must be the model's (``languages.resolve``);
2. a request without a model name but with a language (either side may be empty) goes to
   a model that serves the pair: a model made for exactly one pair before a multilingual
   one, then the first by name. A language no model knows, a target no model translates
   into, or a pair no model serves is ``INVALID_ARGUMENT`` naming what is served (a typed
   :class:`LanguageNotServed`, which LibreTranslate words its own way);
3. with neither, the only translation model (``INVALID_ARGUMENT`` when there are several).

A model with no languages at all is served on every route that names it and takes no part
in language routing.

Pivoting (Argos Translate's way): a pair no model serves directly, ``source -> target``, is
served through the pivot language X (``--pivot-language``, default ``en``) when models serve
``source -> X`` and ``X -> target`` (:meth:`LanguageTable.pivot_route`); the translation
service chains the two. :meth:`LanguageTable.routes` lists every pair, direct and by pivot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnserve.contract.kinds import TRANSLATION
from attnserve.contract.language_tags import matches, standard

from ..shared.errors import InvalidRequest, echo
from .languages import iso_639_1, own_codes

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
    # the variants Argos packages serve (pb, zt), named as LibreTranslate's /languages names them
    "pt-br": "Portuguese (Brazil)", "pt-pt": "Portuguese (Portugal)",
    "zh-hans": "Chinese (simplified)", "zh-hant": "Chinese (traditional)",
}  # fmt: skip


def language_name(code: str) -> str:
    """``de`` -> ``German``; a model's own code by its language: ``zho_Hant`` -> ``Chinese (zho_Hant)``."""
    if code.lower() in NAMES:
        return NAMES[code.lower()]
    iso = iso_639_1(code)
    return f"{NAMES[iso]} ({code})" if iso in NAMES else code


class LanguageNotServed(InvalidRequest):
    """No served model translates a request's languages. ``code``: the language no model knows
    (else ""); ``target_only``: no model translates into ``target`` at all."""

    def __init__(self, message: str, source: str, target: str, code: str = "", target_only: bool = False) -> None:
        super().__init__(message)
        self.source, self.target, self.code, self.target_only = source, target, code, target_only


@dataclass(frozen=True)
class Route:
    """A pair a request may name: one model, or two through ``pivot``."""

    source: str
    target: str
    models: tuple[str, ...]
    pivot: str = ""


@dataclass(frozen=True)
class ModelLanguages:
    model: str
    sources: tuple[str, ...]  # public codes (see the module docstring)
    targets: tuple[str, ...]

    @property
    def one_pair(self) -> bool:
        return len(self.sources) == 1 and len(self.targets) == 1


def declared_languages(model: Any) -> ModelLanguages:
    """What a loaded translation model translates from and to, by public codes (both empty when it does not say)."""
    sources, targets = own_codes(model)
    if model.manifest.languages is not None and not (sources and targets):
        sources = targets = []  # half a declaration: no part in routing (the name does not override it)
    public_sources, public_targets = _codes(sources), _codes(targets)
    if public_sources and public_targets:
        return ModelLanguages(model.name, public_sources, public_targets)
    return ModelLanguages(model.name, (), ())


def _codes(values: list[str]) -> tuple[str, ...]:
    """The public codes of a model's own: its standard tag where it names one of them only."""
    own = list(dict.fromkeys(v for v in values if v))
    tags = [standard(code) or code for code in own]
    return tuple(tag if tags.count(tag) == 1 else code for code, tag in zip(own, tags, strict=True))


def _match(code: str, codes: list[str]) -> str | None:
    """``code`` as one of the public ``codes`` (``language_tags.matches``)."""
    found = matches(code, codes)
    if len(found) > 1:
        raise InvalidRequest(f"language {echo(code)} is ambiguous: one of {', '.join(found)}")
    return found[0] if found else None


class LanguageTable:
    """Every served translation model's languages, in routing order (see the module docstring)."""

    def __init__(self, models: list[ModelLanguages]) -> None:
        served = [m for m in models if m.sources and m.targets]
        self.models = sorted(served, key=lambda m: (not m.one_pair, m.model))
        self.pairs: dict[tuple[str, str], str] = {}
        for m in self.models:
            for s in m.sources:
                for t in m.targets:
                    if s != t:
                        self.pairs.setdefault((s, t), m.model)
        self.codes = sorted({c for m in self.models for c in (*m.sources, *m.targets)})
        self.sources = sorted({s for s, _ in self.pairs})
        self.targets = sorted({t for _, t in self.pairs})

    def targets_of(self, source: str) -> list[str]:
        return sorted(t for s, t in self.pairs if s == source)

    def sources_to(self, target: str) -> list[str]:
        return sorted(s for s, t in self.pairs if t == target)

    def pivot_route(self, source: str, target: str, pivot: str) -> Route | None:
        """``source -> pivot -> target`` when no model serves the pair directly and two models reach
        and leave ``pivot`` (codes as a request gives them; None otherwise, and for unknown codes)."""
        if not (source and target and pivot):
            return None
        try:
            src, tgt = self.public(source, among=self.sources), self.public(target, among=self.targets)
            via = self.public(pivot)
        except InvalidRequest:
            return None
        if src == tgt or via in (src, tgt) or (src, tgt) in self.pairs:
            return None
        first, second = self.pairs.get((src, via)), self.pairs.get((via, tgt))
        return Route(src, tgt, (first, second), via) if first and second else None

    def routes(self, pivot: str) -> list[Route]:
        """Every pair served: directly, and through ``pivot`` ("" = none)."""
        found = [Route(s, t, (m,)) for (s, t), m in self.pairs.items()]
        try:
            via = _match(pivot, self.codes) if pivot else None
        except InvalidRequest:  # a pivot ambiguous among the served codes: none
            via = None
        if via is not None:
            for source in self.sources_to(via):
                for target in self.targets_of(via):
                    if target != source and (source, target) not in self.pairs:
                        models = (self.pairs[(source, via)], self.pairs[(via, target)])
                        found.append(Route(source, target, models, via))
        return sorted(found, key=lambda r: (r.source, r.target))

    def public(self, code: str, pair: str = "", among: list[str] | None = None) -> str:
        """A request's code as a served public code ("" stays ""); LanguageNotServed otherwise.
        ``among``: the codes of its side, tried first (a source ``zh`` is the only Chinese source
        ``zh-Hant`` even where a plain ``zh`` is a target)."""
        if not code:
            return ""
        found = _match(code, among) if among else None
        found = found or _match(code, self.codes)
        if found is None:
            served = ", ".join(self.codes) or "none"
            wanted = pair or echo(code, quoted=False)
            message = f"no model serves {wanted}: no served model knows {echo(code)}; served languages: {served}"
            raise LanguageNotServed(message, "", "", code=code)
        return found

    def route(self, source: str, target: str) -> str:
        """The model serving ``source`` -> ``target`` (either may be ""); LanguageNotServed otherwise."""
        any_ = "any language"  # a side the request leaves open (a source to detect, a model's own target)
        pair = f"{echo(source, quoted=False) if source else any_} -> {echo(target, quoted=False) if target else any_}"
        src, tgt = self.public(source, pair, self.sources), self.public(target, pair, self.targets)
        if tgt and not self.sources_to(tgt):
            raise LanguageNotServed(f"no model serves {pair}: none translates into {tgt}", src, tgt, target_only=True)
        for m in self.models:
            if (not src or src in m.sources) and (not tgt or tgt in m.targets) and not (src and src == tgt):
                return m.model
        served = ", ".join(f"{s} -> {t}" for s, t in self.pairs) or "none"
        raise LanguageNotServed(f"no model serves {pair}; served pairs: {served}", src, tgt)


class ServedLanguages:
    """The language table of a registry, cached per set of served model versions."""

    def __init__(self, registry: Any) -> None:
        self.registry = registry
        self._key: tuple = ()
        self._table = LanguageTable([])

    @property
    def table(self) -> LanguageTable:
        """Of every served translation model, loaded or only indexed (its model.json says it all)."""
        described = {**self.registry.index, **self.registry.models}
        models = [m for m in described.values() if m.kind == TRANSLATION]
        key = tuple(sorted((m.name, m.fingerprint) for m in models))
        if key != self._key:
            self._table, self._key = LanguageTable([declared_languages(m) for m in models]), key
        return self._table
