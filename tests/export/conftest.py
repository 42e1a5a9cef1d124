"""Shared by the export CLI tests: run the CLI in-process, tiny checkpoints.

Exports take seconds each even for tiny models (the dynamo exporter), so directories
are built once per module and copied when a test needs to damage one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnserve.export.cli import main
from attnserve.export.modeldir import placeholder_tokenizer
from attnserve.models import (
    TranslationConfig,
    TranslationTransformer,
    VisionTransformer,
    ViTConfig,
    save_checkpoint,
)

TINY_MT = TranslationConfig(
    vocab_size=61, d_model=32, num_heads=4, encoder_layers=1, decoder_layers=2, ffn_dim=64, dropout=0.0
)
TINY_VIT = ViTConfig(image_size=16, patch_size=4, in_channels=1, num_classes=5, dim=32, depth=2, num_heads=4)


class CliRun:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err


@pytest.fixture
def cli(capsys):
    """cli(*args) -> CliRun with the exit code and captured stdout/stderr."""

    def run(*args) -> CliRun:
        capsys.readouterr()
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return CliRun(code, captured.out, captured.err)

    return run


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Tiny translation and ViT checkpoints (+ the translator's tokenizer file)."""
    root = tmp_path_factory.mktemp("checkpoints")
    torch.manual_seed(0)
    mt = save_checkpoint(TranslationTransformer(TINY_MT), root / "mt.safetensors", extra={"task": "tiny"})
    vit = save_checkpoint(
        VisionTransformer(TINY_VIT), root / "vit.safetensors", extra={"labels": list("abcde"), "task": "tiny"}
    )
    tokenizer = root / "tokenizer.json"
    placeholder_tokenizer(TINY_MT.vocab_size).save(str(tokenizer))
    return {"translation": mt, "vit": vit, "tokenizer": tokenizer}


def error_lines(run: CliRun) -> list[str]:
    """The error part of stderr (progress lines of the stages that ran come before it);
    a user mistake must never print a traceback."""
    assert "Traceback" not in run.err, run.err
    return [line for line in run.err.splitlines() if line.startswith("attnserve-export: error:")]


def leftovers(parent: Path) -> list[str]:
    """Staging directories an export left behind (they start with '.')."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))
