"""Build the default model repository from the committed checkpoints in ``models/zoo``.

``python -m attnserve.export.zoo --out DIR [--force]`` writes ``translator-en-de/``
(encoder.onnx, decoder.onnx, tokenizer.json) and ``digits-vit/`` (model.onnx,
labels.json) with their ``model.json``. Idempotent: a model directory whose
``model.json`` records the sha256 of the current checkpoint (and tokenizer) and this
attnserve version is left alone.

The export is deterministic (same weights, same bytes), and its output is committed in
``models/repo`` (:data:`REPO`), which ``make serve`` serves without PyTorch. After
retraining a model, ``make models`` (``--out models/repo``) regenerates it;
``tests/training/test_zoo_models.py`` fails while the two disagree.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from attnserve.contract.kinds import IN_PLACE
from attnserve.contract.manifest import Languages, ManifestError, load_manifest, sha256_file
from attnserve.contract.quality import QualityCalibration, parse_calibration
from attnserve.models import load_checkpoint

from .modeldir import ATTNSERVE_VERSION, ExportError, write_translation_dir, write_vit_dir

log = logging.getLogger(__name__)

ZOO = Path(__file__).resolve().parent.parent / "models" / "zoo"
REPO = ZOO.parent / "repo"  # the committed export of ZOO: ready model directories
NAMES = ("translator-en-de", "digits-vit")
# The translator's one pair, declared so that target_language="de" (gRPC, KServe, HTTP) selects it.
LANGUAGES = Languages(source=["en"], target=["de"], default_source="en", default_target="de")
# What each model is for, in a sentence: model.json extra.domain, served as ModelInfo.domain
# (`attnserve-client models`) and stated in its MODEL_CARD.md.
DOMAINS = {
    "translator-en-de": (
        "English -> German for short phrases of numbers, dates, times, quantities and money "
        "('Monday, March 3, 2025', 'at 3:45 PM', 'more than 1,500 miles'); not free text: "
        "a sentence of other words gets German-looking nonsense, not an error"
    ),
    "digits-vit": (
        "one digit 0-9 per image, handwritten, drawn or typed, dark on light or light on dark, any "
        "size and place in the frame; always answers a digit, even for an image that holds none"
    ),
}


def _sources(name: str) -> list[Path]:
    files = [ZOO / name / "model.safetensors"]
    if name == "translator-en-de":
        files.append(ZOO / name / "tokenizer.json")
    return files


def _fingerprint(name: str) -> dict[str, str]:
    return {p.name: sha256_file(p) for p in _sources(name)}


def zoo_quality(name: str) -> QualityCalibration | None:
    """The quality score's calibration ``benchmarks/quality.py --write-calibration`` fit for a zoo model."""
    path = ZOO / name / "quality.json"
    return parse_calibration(json.loads(path.read_text())) if path.is_file() else None


def export_translator(
    checkpoint: Path, out: Path, force: bool = False, extra: dict | None = None, kv_cache: str = IN_PLACE
):
    """``kv_cache``: the decoder's cache layout (left-padded for a server on CUDA)."""
    model, meta = load_checkpoint(checkpoint, dropout=0.0)
    limits = meta.get("limits", {})
    return write_translation_dir(
        model,
        out,
        checkpoint.parent / "tokenizer.json",
        name="translator-en-de",
        max_source_len=limits.get("max_source_len"),
        max_target_len=limits.get("max_target_len"),
        extra={**meta, **(extra or {})},
        languages=LANGUAGES,
        force=force,
        kv_cache=kv_cache,
        quality=zoo_quality("translator-en-de"),
    )


def export_digits(checkpoint: Path, out: Path, keep_rate: float = 1.0, force: bool = False, extra: dict | None = None):
    model, meta = load_checkpoint(checkpoint, dropout=0.0, keep_rate=keep_rate)
    return write_vit_dir(
        model,
        out,
        name="digits-vit",
        labels=meta["labels"],
        preprocessing=meta["preprocessing"],
        extra={**meta, "keep_rate": keep_rate, **(extra or {})},
        force=force,
    )


def is_current(model_dir: Path, name: str) -> bool:
    try:
        manifest = load_manifest(model_dir)
    except ManifestError:
        return False
    built = manifest.extra.get("zoo", {})
    return (
        built.get("sources") == _fingerprint(name)
        and built.get("attnserve_version") == ATTNSERVE_VERSION
        and manifest.extra.get("domain") == DOMAINS.get(name)
        and (name != "translator-en-de" or _current_translator(manifest))
    )


def _current_translator(manifest) -> bool:
    """The bundled translator's layout: its languages, the in-place cache, an aligner reading the encoder output."""
    aligner = "aligner" in manifest.graphs and not manifest.aligner_io().encodes
    quality = zoo_quality("translator-en-de")
    same_quality = (manifest.quality and manifest.quality.to_json()) == (quality and quality.to_json())
    return manifest.languages == LANGUAGES and manifest.kv_cache == IN_PLACE and aligner and same_quality


def build_repo(out: Path, names: tuple[str, ...] | list[str] = NAMES, force: bool = False) -> list[str]:
    """Export each zoo model into ``out/<name>`` unless an up-to-date one is there; returns the names built."""
    built = []
    for name in names:
        if name not in NAMES:
            raise ExportError(f"unknown zoo model {name!r}; available: {', '.join(NAMES)}")
        missing = [str(p) for p in _sources(name) if not p.is_file()]
        if missing:
            raise ExportError(f"{name}: committed weights missing: {', '.join(missing)}")
        target = Path(out) / name
        if not force and is_current(target, name):
            log.info("%s: up to date", target)
            continue
        stamp = {
            "domain": DOMAINS[name],
            "zoo": {"sources": _fingerprint(name), "attnserve_version": ATTNSERVE_VERSION},
        }
        if name == "translator-en-de":
            export_translator(ZOO / name / "model.safetensors", target, force=True, extra=stamp)
        else:
            export_digits(ZOO / name / "model.safetensors", target, force=True, extra=stamp)
        built.append(name)
    return built


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m attnserve.export.zoo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("model-repo"), help="repository folder (default: model-repo)")
    parser.add_argument("--force", action="store_true", help="re-export even when up to date")
    parser.add_argument("models", nargs="*", default=list(NAMES), help=f"zoo models (default: {' '.join(NAMES)})")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .progress import quiet_exporter

    quiet_exporter()
    unknown = [name for name in args.models if name not in NAMES]
    if unknown:
        print(f"error: unknown zoo model {unknown[0]!r}; available: {', '.join(NAMES)}", file=sys.stderr)
        return 2
    for name in args.models:
        target = args.out / name
        print(f"{target}: ", end="", flush=True)
        start = time.perf_counter()
        try:
            built = build_repo(args.out, [name], args.force)
        except ExportError as exc:
            print("failed")
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"exported from models/zoo/{name} in {time.perf_counter() - start:.1f} s" if built else "up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
