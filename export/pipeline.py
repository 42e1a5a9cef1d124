"""The export pipeline behind ``attnserve-export translation|vit``, one plain call after another:

check the inputs -> stage a temporary directory -> ONNX graphs (:mod:`.modeldir`) ->
reference outputs (:mod:`.reference`) -> optional int8/fp16 (:mod:`.precision`) ->
verification (:mod:`.verify`) -> report -> seal (hashes, model.json) -> commit (rename
into place). A failed verification raises
:class:`~attnserve.export.verify.VerificationFailed` and leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from attnserve.contract.machine import cpu_model, isa_flags
from attnserve.contract.manifest import Languages, Manifest
from attnserve.models import TranslationTransformer, VisionTransformer

from .layer_bias import fold_graph_biases
from .modeldir import (
    ATTNSERVE_VERSION,
    check_translation,
    check_vit,
    seal,
    staged_directory,
    write_translation_graphs,
    write_vit_graph,
)
from .options import ExportOptions
from .precision import INT8_SCHEME, convert_graph
from .progress import Progress
from .projection_bias import fold_decoder_bias
from .reference import save_reference, translation_reference, vit_reference
from .screen_vocab import screen_decoder
from .verify import REPORT_FILE, VERIFICATION_FILE, Verification, VerificationFailed, verify_model_dir, write_report


@dataclass
class ExportResult:
    manifest: Manifest
    report: dict[str, Any]
    verification: Verification | None = None
    out: Path = field(default_factory=Path)


def planned_stages(kind: str, options: ExportOptions) -> int:
    """Stages the progress display will show (load + export graphs + reference + ... + model.json)."""
    graphs = 3 if kind == "translation" else 1
    screen = kind == "translation" and options.screens_vocab
    return 1 + graphs + screen + 1 + (options.precision != "fp32") + 2 * options.verify + 1


def export_translation(
    model: TranslationTransformer,
    tokenizer: Tokenizer | Path | str,
    options: ExportOptions,
    *,
    max_source_len: int | None = None,
    max_target_len: int | None = None,
    extra: dict[str, Any] | None = None,
    progress: Progress | None = None,
    family: str = "attnserve",
    languages: Languages | None = None,
    source_eos: bool = True,
) -> ExportResult:
    """``source_eos``: the tokenizer ends every source with the end token, as the model was trained
    (checked); False for models that read sources without one (CTranslate2's without add_source_eos)."""
    progress = progress or Progress(planned_stages("translation", options), enabled=False)
    tok, limits = check_translation(model, tokenizer, max_source_len, max_target_len, source_eos)
    steps = min(max_target_len or model.cfg.max_positions, model.cfg.max_positions)
    with staged_directory(options.out, options.force) as tmp:
        manifest = write_translation_graphs(
            model, tmp, tok, limits, name=options.model_name, attention=options.attention, opset=options.opset,
            extra=extra, stage=progress, family=family, languages=languages, kv_cache=options.cache_layout,
            step_attention=options.step_attention,
        )  # fmt: skip
        if options.screens_vocab:
            progress("screen the vocabulary projection (int8)")
            manifest = screen_decoder(tmp, manifest)
            fold_decoder_bias(tmp, manifest)
        if options.folds_layer_biases:
            fold_graph_biases(tmp / manifest.graphs["encoder"].file, manifest.encoder_io().src_ids)
            fold_graph_biases(tmp / manifest.graphs["decoder"].file, manifest.decoder_io().input_ids)
        progress("reference outputs (PyTorch)")
        reference = translation_reference(
            model, seed=options.seed, max_target_len=steps, kv_cache=manifest.kv_cache, extra=manifest.extra
        )
        save_reference(tmp, reference)
        result = finish(tmp, manifest, options, progress)
    return result


def export_vit(
    model: VisionTransformer,
    options: ExportOptions,
    *,
    labels: list[str] | None = None,
    preprocessing: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    progress: Progress | None = None,
) -> ExportResult:
    progress = progress or Progress(planned_stages("vit", options), enabled=False)
    labels, prep = check_vit(model, labels, preprocessing)
    with staged_directory(options.out, options.force) as tmp:
        manifest = write_vit_graph(
            model, tmp, labels, prep, name=options.model_name, attention=options.attention, opset=options.opset,
            extra=extra, stage=progress,
        )  # fmt: skip
        progress("reference outputs (PyTorch)")
        save_reference(tmp, vit_reference(model, seed=options.seed))
        result = finish(tmp, manifest, options, progress)
    return result


def finish(tmp: Path, manifest: Manifest, options: ExportOptions, progress: Progress) -> ExportResult:
    """The steps after the graphs and reference outputs are in the staged directory ``tmp``:
    convert the precision, verify, write the report, seal (hashes + model.json).

    Raises VerificationFailed (the caller's staged directory is then discarded).
    """
    sizes = convert_precision(tmp, manifest, options.precision, progress)
    quantization = {"quantization": INT8_SCHEME.to_json()} if options.precision == "int8" else {}
    manifest = dataclasses.replace(
        manifest,
        precision=options.precision,
        extra={**manifest.extra, "verification": VERIFICATION_FILE, "report": REPORT_FILE, **quantization},
    )
    verification = None
    if options.verify:
        verification = verify_model_dir(tmp, manifest, device=options.device, threads=options.threads, stage=progress)
    report = build_report(tmp, manifest, options, sizes, verification, progress)
    write_report(tmp, report)
    if verification is not None and not verification.passed:
        raise VerificationFailed(verification, report)
    manifest = seal(tmp, manifest, progress)
    return ExportResult(manifest, report, verification, Path(options.out))


def convert_precision(tmp: Path, manifest: Manifest, precision: str, progress: Progress) -> dict[str, dict[str, float]]:
    """Convert every graph of ``tmp`` to ``precision`` (fp32: nothing to do); returns sizes per graph file."""
    sizes = {spec.file: {"fp32_bytes": (tmp / spec.file).stat().st_size} for spec in manifest.graphs.values()}
    if precision != "fp32":
        progress(f"convert graphs to {precision}")
        for spec in manifest.graphs.values():
            sizes[spec.file]["bytes"] = convert_graph(tmp / spec.file, precision)["bytes_after"]
    for entry in sizes.values():
        entry.setdefault("bytes", entry["fp32_bytes"])
        entry["ratio"] = round(entry["fp32_bytes"] / entry["bytes"], 3)
    return sizes


def build_report(
    model_dir: Path,
    manifest: Manifest,
    options: ExportOptions,
    graph_sizes: dict[str, dict[str, float]],
    verification: Verification | None,
    progress: Progress,
) -> dict[str, Any]:
    fp32 = sum(s["fp32_bytes"] for s in graph_sizes.values())
    now = sum(s["bytes"] for s in graph_sizes.values())
    return {
        "name": manifest.name,
        "kind": manifest.kind,
        "attention": manifest.attention,
        "precision": manifest.precision,
        "opset": manifest.opset,
        "attnserve_version": ATTNSERVE_VERSION,
        "source": manifest.extra.get("source"),
        "seed": options.seed,
        "graphs": graph_sizes,
        "graph_bytes": {"fp32": fp32, manifest.precision: now, "ratio": round(fp32 / now, 3)},
        "quantization": manifest.extra.get("quantization"),
        "machine": {"cpu": cpu_model(), "isa": isa_flags()},  # where the graphs were verified
        "files": {p.name: p.stat().st_size for p in sorted(model_dir.iterdir()) if p.is_file()},
        "stages": progress.stages(),
        "verification": verification.to_json() if verification else {"skipped": "--no-verify"},
    }
