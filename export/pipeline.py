"""The export pipeline behind ``attnserve-export translation|vit``.

PyTorch model -> ONNX graphs (:mod:`.modeldir`) -> reference outputs (:mod:`.reference`)
-> optional int8/fp16 (:mod:`.precision`) -> verification (:mod:`.verify`) -> report,
all inside the staged temporary directory: a failed verification raises
:class:`~attnserve.export.verify.VerificationFailed` and leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from attnserve.models import TranslationTransformer, VisionTransformer
from attnserve.server.manifest import Manifest

from .modeldir import ATTNSERVE_VERSION, write_translation_dir, write_vit_dir
from .options import ExportOptions
from .precision import convert_graph
from .progress import Progress
from .reference import save_reference, translation_reference, vit_reference
from .verify import REPORT_FILE, VERIFICATION_FILE, Verification, VerificationFailed, verify_model_dir, write_report


@dataclass
class ExportResult:
    manifest: Manifest
    report: dict[str, Any]
    verification: Verification | None = None
    out: Path = field(default_factory=Path)


def planned_stages(kind: str, options: ExportOptions) -> int:
    """Stages the progress display will show (load + export graphs + reference + ... + model.json)."""
    graphs = 2 if kind == "translation" else 1
    return 1 + graphs + 1 + (options.precision != "fp32") + 2 * options.verify + 1


def export_translation(
    model: TranslationTransformer,
    tokenizer: Tokenizer | Path | str,
    options: ExportOptions,
    *,
    max_source_len: int | None = None,
    max_target_len: int | None = None,
    extra: dict[str, Any] | None = None,
    progress: Progress | None = None,
) -> ExportResult:
    progress = progress or Progress(planned_stages("translation", options), enabled=False)
    result: dict[str, Any] = {}
    steps = min(max_target_len or model.cfg.max_positions, model.cfg.max_positions)
    manifest = write_translation_dir(
        model,
        options.out,
        tokenizer,
        name=options.model_name,
        attention=options.attention,
        opset=options.opset,
        max_source_len=max_source_len,
        max_target_len=max_target_len,
        extra=extra,
        force=options.force,
        stage=progress,
        postprocess=_postprocess(
            lambda: translation_reference(model, seed=options.seed, max_target_len=steps), options, progress, result
        ),
    )
    return ExportResult(manifest, result["report"], result.get("verification"), Path(options.out))


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
    result: dict[str, Any] = {}
    manifest = write_vit_dir(
        model,
        options.out,
        name=options.model_name,
        labels=labels,
        preprocessing=preprocessing,
        attention=options.attention,
        opset=options.opset,
        extra=extra,
        force=options.force,
        stage=progress,
        postprocess=_postprocess(lambda: vit_reference(model, seed=options.seed), options, progress, result),
    )
    return ExportResult(manifest, result["report"], result.get("verification"), Path(options.out))


def _postprocess(
    reference: Callable[[], dict], options: ExportOptions, progress: Progress, result: dict[str, Any]
) -> Callable[[Path, Manifest], Manifest]:
    """The ``postprocess`` hook of the model-directory writers: runs in the staged directory."""

    def postprocess(tmp: Path, manifest: Manifest) -> Manifest:
        progress("reference outputs (PyTorch)")
        save_reference(tmp, reference())
        sizes = {spec.file: {"fp32_bytes": (tmp / spec.file).stat().st_size} for spec in manifest.graphs.values()}
        if options.precision != "fp32":
            progress(f"convert graphs to {options.precision}")
            for spec in manifest.graphs.values():
                sizes[spec.file]["bytes"] = convert_graph(tmp / spec.file, options.precision)["bytes_after"]
        for entry in sizes.values():
            entry.setdefault("bytes", entry["fp32_bytes"])
            entry["ratio"] = round(entry["fp32_bytes"] / entry["bytes"], 3)
        manifest = dataclasses.replace(
            manifest,
            precision=options.precision,
            extra={**manifest.extra, "verification": VERIFICATION_FILE, "report": REPORT_FILE},
        )
        verification = None
        if options.verify:
            verification = verify_model_dir(
                tmp, manifest, device=options.device, threads=options.threads, stage=progress
            )
        report = build_report(tmp, manifest, options, sizes, verification, progress)
        write_report(tmp, report)
        result["report"], result["verification"] = report, verification
        if verification is not None and not verification.passed:
            raise VerificationFailed(verification, report)
        return manifest

    return postprocess


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
        "files": {p.name: p.stat().st_size for p in sorted(model_dir.iterdir()) if p.is_file()},
        "stages": progress.stages(),
        "verification": verification.to_json() if verification else {"skipped": "--no-verify"},
    }
