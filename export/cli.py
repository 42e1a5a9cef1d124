"""``attnserve-export``: PyTorch models -> verified ONNX model directories.

    attnserve-export translation (--checkpoint PATH | --preset NAME | --from-hf DIR | --from-argos PATH) --out DIR
                                 [options]
    attnserve-export vit (--checkpoint PATH | --preset NAME | --from-hf-vit DIR) --out DIR [options]
    attnserve-export verify DIR       re-run the checks of a model directory (onnx + onnxruntime, no PyTorch)
    attnserve-export inspect DIR      manifest, graph inputs/outputs, attention nodes, file sizes
    attnserve-export pull (NAME... | --languages en,de,fr) --model-repo DIR   download, import, install

Exit codes: 0 ok, 1 failure (bad input, failed verification), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from attnserve.contract.manifest import Languages

from .errors import ExportError, is_user_error
from .progress import quiet_exporter

log = logging.getLogger(__name__)

# Third-party modules of the optional extras (pyproject.toml) that the subcommands import: the
# CLI imports them only when a subcommand needs them, and one missing is a one-line error
# saying what to install. verify and inspect need onnx and onnxruntime only, not PyTorch.
EXPORT_MODULES = ("torch", "onnx", "onnxscript", "safetensors", "tqdm")  # the export extra
RUNTIME_MODULE = "onnxruntime"  # the cpu extra (or cuda: onnxruntime-gpu)
IMPORT_MODULES = ("transformers", "sentencepiece", "huggingface_hub")  # the import extra (pull)
COMMANDS = ("translation", "vit", "verify", "inspect", "pull")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnserve-export",
        description="Export attention models to verified ONNX model directories.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit codes: 0 ok, 1 failure (bad input, failed verification), 2 usage.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{translation,vit,verify,inspect,pull}")

    _add_translation_parser(sub)
    _add_vit_parser(sub)
    _add_check_parsers(sub)
    from .pull.command import add_parser as add_pull_parser

    add_pull_parser(sub)
    return parser


def _add_translation_parser(sub) -> None:
    from .options import ExportOptions  # needs onnx (the attention op table)

    mt = sub.add_parser("translation", help="export a translation Transformer (encoder.onnx + decoder.onnx)")
    source = mt.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", type=Path, help="attnserve .safetensors checkpoint (needs --tokenizer)")
    source.add_argument("--preset", help="preset with random weights: mt-tiny, mt-small, mt-base")
    source.add_argument(
        "--from-hf",
        type=Path,
        metavar="DIR",
        help="local Hugging Face translation directory: MarianMT / opus-mt, M2M100 or NLLB (by config.json model_type)",
    )
    source.add_argument("--from-marian", type=Path, metavar="DIR", help="--from-hf for a MarianMT directory")
    source.add_argument(
        "--from-argos",
        type=Path,
        metavar="PATH",
        help="an Argos Translate package (.argosmodel file or unpacked directory), or a folder of them "
        "(LibreTranslate's package folder): then --out is a model repository and each package becomes OUT/argos-xx-yy",
    )
    mt.add_argument("--tokenizer", type=Path, help="tokenizers JSON file (default for --preset: a placeholder)")
    mt.add_argument("--max-source-len", type=int, help="longest source in tokens (default: checkpoint or model)")
    mt.add_argument("--max-target-len", type=int, help="most generated tokens (default: checkpoint or model)")
    mt.add_argument(
        "--source-language",
        metavar="CODE",
        help="the language the model reads (ISO 639-1, e.g. en), recorded in model.json for the server's routing; "
        "with --target-language, for --checkpoint / --preset (Hugging Face directories record their own)",
    )
    mt.add_argument("--target-language", metavar="CODE", help="the language the model writes (e.g. de)")
    ExportOptions.add_arguments(mt)


def _add_vit_parser(sub) -> None:
    from .options import ExportOptions  # needs onnx (the attention op table)

    vit = sub.add_parser("vit", help="export a Vision Transformer classifier (model.onnx)")
    source = vit.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", type=Path, help="attnserve .safetensors checkpoint")
    source.add_argument("--preset", help="preset with random weights: vit-tiny, vit-s16, vit-b16")
    source.add_argument("--from-hf-vit", type=Path, metavar="DIR", help="local Hugging Face ViT directory")
    vit.add_argument("--keep-rate", type=float, help="token pruning: fraction of patch tokens kept (0, 1]")
    vit.add_argument(
        "--labels", type=Path, help="class names: a JSON list (a file starting with '['), or one name per line"
    )
    ExportOptions.add_arguments(vit)


def _add_check_parsers(sub) -> None:
    from .options import thread_count

    verify = sub.add_parser("verify", help="re-run the checks of an existing model directory")
    verify.add_argument("model_dir", type=Path, metavar="DIR")
    verify.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="onnxruntime provider (default cpu)")
    verify.add_argument("--threads", type=thread_count, default=0, help="onnxruntime threads (default: all)")
    verify.add_argument("--json", action="store_true", help="print the result as JSON")

    inspect = sub.add_parser("inspect", help="print the manifest, graph inputs/outputs and attention nodes")
    inspect.add_argument("model_dir", type=Path, metavar="DIR")
    inspect.add_argument("--json", action="store_true", help="print the summary as JSON")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return _main(argv)
    except ModuleNotFoundError as exc:
        # the subcommand: the first argument that is not an option (the top level has only -h)
        command = next((a for a in argv if not a.startswith("-")), None)
        message = missing_module_message(exc.name, command if command in COMMANDS else None)
        if message is None:  # not an optional extra's module: a bug, keep its traceback
            raise
        print(f"attnserve-export: error: {message}", file=sys.stderr)
        return 1


def missing_module_message(name: str | None, command: str | None) -> str | None:
    """What to install when an optional extra's module ``name`` is missing (None: not one of them)."""
    if command == "pull" and name in (*EXPORT_MODULES, *IMPORT_MODULES, RUNTIME_MODULE):
        needs = "pull needs PyTorch, transformers and huggingface_hub (the import extra)"
        return f"{needs}; {name} is not installed: pip install 'attnserve[import]'"
    if name not in (*EXPORT_MODULES, RUNTIME_MODULE):
        return None
    if command in ("verify", "inspect"):
        install = f"pip install {name}"
        if name == RUNTIME_MODULE:
            install = "pip install 'attnserve[cpu]' (or 'attnserve[cuda]' for a GPU)"
        return f"{command} needs onnx and onnxruntime (not PyTorch); {name} is not installed: {install}"
    if command:
        needs = f"{command} needs PyTorch, onnx and onnxruntime (the export extra)"
        return f"{needs}; {name} is not installed: pip install 'attnserve[export]'"
    only = "verify and inspect need only onnx and onnxruntime"
    return f"{name} is not installed: pip install 'attnserve[export]' ({only})"


def _main(argv: list[str]) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) and usage errors (2)
        return int(exc.code or 0)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "verify":
            return _verify(args)
        if args.command == "inspect":
            return _inspect(args)
        if args.command == "pull":
            from .pull.command import run as pull

            return pull(args)
        return _export(args)
    except KeyboardInterrupt as exc:  # Ctrl-C; SIGTERM during a pull too (exit 143)
        print("attnserve-export: interrupted; nothing was written", file=sys.stderr)
        return getattr(exc, "exit_code", 130)
    except Exception as exc:  # noqa: BLE001 - typed user-facing errors become one line; bugs keep their traceback
        verify = sys.modules.get("attnserve.export.verify")  # imported by every subcommand that verifies
        if verify is not None and isinstance(exc, verify.VerificationFailed):
            _print_verification(exc.verification.lines(), exc.verification.skipped)
            print(f"attnserve-export: error: {exc}; nothing was written", file=sys.stderr)
            return 1
        if not is_user_error(exc):
            raise
        print(f"attnserve-export: error: {exc}", file=sys.stderr)
        return 1


def _export(args: argparse.Namespace) -> int:
    import torch

    from .options import ExportOptions
    from .pipeline import planned_stages
    from .progress import Progress

    options = ExportOptions.from_args(args)
    if options.threads > 0:
        torch.set_num_threads(options.threads)
    quiet_exporter()
    if args.command == "translation" and args.from_argos is not None:
        from .argos_folder import export_argos_folder, is_folder_of_packages

        if is_folder_of_packages(args.from_argos):
            return export_argos_folder(args.from_argos, options, _languages_given(args))
    progress = Progress(planned_stages(args.command, options))
    progress("load model")
    try:
        export = _export_translation if args.command == "translation" else _export_vit
        result = export(args, options, progress)
    finally:
        progress.close()
    print(format_report(result.report))
    print(f"wrote {result.out} ({result.manifest.kind}, {result.manifest.precision}, {result.manifest.attention})")
    return 0


def _export_translation(args: argparse.Namespace, options, progress):
    from . import sources
    from .pipeline import export_translation

    if args.checkpoint is not None:
        source = sources.from_checkpoint("translation", args.checkpoint)
    elif args.preset is not None:
        source = sources.from_preset("translation", args.preset, seed=options.seed)
    elif args.from_hf is not None:
        source = sources.from_hf(args.from_hf)
    elif args.from_argos is not None:
        source = sources.from_argos(args.from_argos)
    else:
        source = sources.from_marian(args.from_marian)
    tokenizer, note = sources.tokenizer_for(source, args.tokenizer, checkpoint=args.checkpoint)
    limits = {
        "max_source_len": _given(args.max_source_len, source.limits.get("max_source_len")),
        "max_target_len": _given(args.max_target_len, source.limits.get("max_target_len")),
    }
    extra = {**source.extra, **note, "source": source.description}
    languages = _languages(source.languages, args.source_language, args.target_language)
    return export_translation(
        source.model,
        tokenizer,
        options,
        **limits,
        extra=extra,
        progress=progress,
        family=source.family,
        languages=languages,
        source_eos=source.source_eos,
    )


def _export_vit(args: argparse.Namespace, options, progress):
    from . import sources
    from .pipeline import export_vit

    if args.keep_rate is not None and not 0.0 < args.keep_rate <= 1.0:
        raise ExportError(f"--keep-rate must be in (0, 1], got {args.keep_rate}")
    if args.checkpoint is not None:
        source = sources.from_checkpoint("vit", args.checkpoint, keep_rate=args.keep_rate)
    elif args.preset is not None:
        source = sources.from_preset("vit", args.preset, seed=options.seed, keep_rate=args.keep_rate)
    else:
        source = sources.from_hf_vit(args.from_hf_vit, keep_rate=args.keep_rate)
    labels = sources.read_labels(args.labels) if args.labels else source.labels
    extra = {**source.extra, "source": source.description}
    return export_vit(
        source.model, options, labels=labels, preprocessing=source.preprocessing, extra=extra, progress=progress
    )


def _languages(recorded: dict | None, source: str | None, target: str | None) -> Languages | None:
    """The languages model.json records: the flags' pair, else what the source recorded (Hugging Face)."""
    if source is None and target is None:
        return Languages(**recorded) if recorded else None
    if not source or not target:
        raise ExportError("--source-language and --target-language go together: give both (e.g. en and de)")
    if recorded:
        raise ExportError(
            "--source-language / --target-language are for attnserve checkpoints and presets; this model "
            f"records its own languages ({', '.join(recorded.get('source', []))} -> "
            f"{', '.join(recorded.get('target', []))})"
        )
    for flag, code in (("--source-language", source), ("--target-language", target)):
        if not code.replace("-", "").replace("_", "").isalnum() or len(code) > 64:
            raise ExportError(f"{flag}: {code!r} is not a language code (ISO 639-1 such as en, or a BCP 47 tag)")
    return Languages(source=[source], target=[target], default_source=source, default_target=target)


def _languages_given(args: argparse.Namespace) -> bool:
    return args.source_language is not None or args.target_language is not None


def _given(flag: int | None, default: int | None) -> int | None:
    """A flag's value when it was given (0 included: the range check refuses it), else the default."""
    return default if flag is None else flag


def _verify(args: argparse.Namespace) -> int:
    from .progress import Progress
    from .verify import VerificationFailed, verify_model_dir

    progress = Progress(3, enabled=not args.json)
    try:
        verification = verify_model_dir(args.model_dir, device=args.device, threads=args.threads, stage=progress)
    finally:
        progress.close()
    if args.json:
        print(json.dumps(verification.to_json(), indent=2))
    else:
        _print_verification(verification.lines(), [], stream=sys.stdout)
    if not verification.passed:
        print(f"attnserve-export: error: {VerificationFailed(verification)}", file=sys.stderr)
        return 1
    status = "passed" if not verification.skipped else "passed (numeric checks skipped, see above)"
    if not args.json:
        print(f"{args.model_dir}: verification {status}")
    return 0


def _print_verification(lines: list[str], skipped: list[str], stream=None) -> None:
    stream = stream or sys.stderr
    print("verification:", file=stream)
    for line in lines:
        print(line, file=stream)


def _inspect(args: argparse.Namespace) -> int:
    from .describe import describe_model_dir, format_description

    summary = describe_model_dir(args.model_dir)
    print(json.dumps(summary, indent=2) if args.json else format_description(summary))
    return 0


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def format_report(report: dict[str, Any]) -> str:
    """The export report as text: stages, graph sizes, verification."""
    lines = [f"export report: {report['name']} ({report['kind']}, {report['attention']}, {report['precision']})"]
    lines.append("stages:")
    lines += [f"  {s['stage']:<42} {s['seconds']:8.2f} s" for s in report["stages"]]
    lines.append("graphs:")
    for fname, size in report["graphs"].items():
        ratio = f" ({_mb(size['fp32_bytes'])} fp32, {size['ratio']:.2f}x smaller)" if size["ratio"] != 1 else ""
        lines.append(f"  {fname:<20} {_mb(size['bytes'])}{ratio}")
    total = report["graph_bytes"]
    if total["ratio"] != 1:
        lines.append(f"  all graphs: {_mb(total['fp32'])} fp32 -> {_mb(total[report['precision']])}, {total['ratio']}x")
    lines.append("files: " + ", ".join(f"{name} {_mb(size)}" for name, size in report["files"].items()))
    verification = report["verification"]
    if "checks" not in verification:
        lines.append(f"verification: skipped ({verification['skipped']})")
        return "\n".join(lines)
    lines.append(f"verification ({verification['provider'] or 'no numeric run'}):")
    for check in verification["checks"]:
        mark = {True: "ok  ", False: "FAIL", None: "info"}[check["passed"]]
        lines.append(f"  {mark}  {check['name']}: {check['detail']}")
    lines += [f"  skip  {s}" for s in verification["skipped"]]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
