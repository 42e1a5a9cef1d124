"""``attnserve-train translation|digits``: reproduce a bundled model with one command.

Writes the checkpoint (+ tokenizer) into ``models/zoo/<name>/`` (or ``--out``) and prints
the held-out metrics; ``python -m attnserve.export.evaluate`` measures them again through
the exported ONNX graphs.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

ZOO = Path(__file__).resolve().parent.parent / "zoo"
# Third-party modules of the train extra (pyproject.toml, with the export extra it includes):
# one missing is a one-line error saying what to install, not a traceback.
TRAIN_MODULES = (
    *("torch", "onnx", "onnxscript", "safetensors", "tqdm"),
    *("babel", "matplotlib", "num2words", "sacrebleu", "sklearn"),
)


def _yes_no(text: str) -> bool:
    if text.lower() not in ("true", "false", "yes", "no", "1", "0"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() in ("true", "yes", "1")


def _add_config_flags(parser: argparse.ArgumentParser, cfg_cls) -> None:
    for f in dataclasses.fields(cfg_cls):
        flag = "--" + f.name.replace("_", "-")
        kind = _yes_no if isinstance(f.default, bool) else type(f.default)  # bool("false") would be True
        parser.add_argument(flag, type=kind, default=None, help=f"(default: {f.default})")


def build_parser() -> argparse.ArgumentParser:
    from .train_digits import DigitsTrainConfig
    from .train_translation import TranslationTrainConfig

    parser = argparse.ArgumentParser(prog="attnserve-train", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="model", required=True)
    for name, cfg_cls, default_dir in (
        ("translation", TranslationTrainConfig, "translator-en-de"),
        ("digits", DigitsTrainConfig, "digits-vit"),
    ):
        p = sub.add_parser(name, help=f"train models/zoo/{default_dir}")
        p.add_argument("--out", type=Path, default=ZOO / default_dir, help=f"(default: models/zoo/{default_dir})")
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
        _add_config_flags(p, cfg_cls)
        p.set_defaults(cfg_cls=cfg_cls)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except ModuleNotFoundError as exc:
        if exc.name not in TRAIN_MODULES:  # not the train extra's: a bug, keep its traceback
            raise
        needs = "training needs the train extra (PyTorch, data and metrics packages)"
        print(
            f"attnserve-train: error: {needs}; {exc.name} is not installed: pip install 'attnserve[train]'",
            file=sys.stderr,
        )
        return 1


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    overrides = {
        f.name: getattr(args, f.name) for f in dataclasses.fields(args.cfg_cls) if getattr(args, f.name) is not None
    }
    cfg = args.cfg_cls(**overrides)
    if args.model == "translation":
        from .train_translation import run
    else:
        from .train_digits import run
    run(cfg, args.out, progress=not args.no_progress)
    print(f"wrote {args.out}; ONNX metrics: python -m attnserve.export.evaluate {args.out.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
