"""Fixtures of the reliability and security tests (issue 8), and the figures they report.

Every test here is bounded: fixed hypothesis seeds and example counts, a soak of
``ATTNSERVE_SOAK_SECONDS`` (default 60) and generous timeouts for a shared 2-core
machine. Tests record their figures (inputs tried, requests sent/accepted/rejected,
peak RSS, ...) with the ``figures`` fixture: they go into the JUnit report as
properties and are printed in a "reliability figures" section at the end of the run,
with or without ``-s``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from ..server.conftest import (  # noqa: F401 - fixtures shared with the server tests
    LoopThread,
    ServerHandle,
    digit_images,
    digit_png,
    loop_thread,
    repo,
    serve,
    settings_for,
    vit_dirs,
)

VOCAB = 60
MAX_SOURCE, MAX_TARGET = 16, 300
SOAK_SECONDS = float(os.environ.get("ATTNSERVE_SOAK_SECONDS", "60"))

_FIGURES: list[tuple[str, str, object]] = []


@pytest.fixture
def figures(request, record_property):
    """``figures("requests sent", 1234)``: report a measured figure of this test."""

    def add(name: str, value: object) -> None:
        record_property(name, value)
        _FIGURES.append((request.node.name, name, value))

    return add


def pytest_terminal_summary(terminalreporter) -> None:
    if not _FIGURES:
        return
    terminalreporter.section("reliability figures")
    for test, name, value in _FIGURES:
        shown = f"{value:.1f}" if isinstance(value, float) else value
        terminalreporter.write_line(f"{test}: {name} = {shown}")


def export_mt(out: Path, seed: int = 0, name: str = "mt"):
    """A tiny random translation model (vocab 60, d 32) exported to ``out``; returns (model, tokenizer)."""
    from attnserve.export.modeldir import placeholder_tokenizer, write_translation_dir
    from attnserve.models import TranslationConfig, TranslationTransformer

    torch.manual_seed(seed)
    cfg = TranslationConfig(
        vocab_size=VOCAB, d_model=32, num_heads=4, encoder_layers=1, decoder_layers=2, ffn_dim=64, dropout=0.0
    )
    model = TranslationTransformer(cfg).eval()
    tokenizer = placeholder_tokenizer(VOCAB)
    write_translation_dir(model, out, tokenizer, name=name, max_source_len=MAX_SOURCE, max_target_len=MAX_TARGET)
    return model, tokenizer


class MT:
    """The tiny translator, its tokenizer and the PyTorch reference decoder."""

    def __init__(self, model, tokenizer, model_dir: Path) -> None:
        self.model, self.tokenizer, self.model_dir = model, tokenizer, model_dir

    def greedy(self, text: str, max_new_tokens: int):
        from attnserve.models import greedy_decode

        src = torch.tensor([self.tokenizer.encode(text).ids])  # (1, L) with eos
        return greedy_decode(self.model, src, max_new_tokens=max_new_tokens)[0]

    def long_source(self) -> str:
        """A source whose greedy output runs to the length limit (no early eos): a long decode."""
        for i in range(4, VOCAB):
            text = f"t{i} t{(i * 7) % (VOCAB - 4) + 4}"
            if self.greedy(text, MAX_TARGET).finish == "length":
                return text
        pytest.skip("no source of this random model decodes to the length limit")


@pytest.fixture(scope="session")
def mt(tmp_path_factory) -> MT:
    root = tmp_path_factory.mktemp("rel-mt")
    model, tokenizer = export_mt(root / "mt")
    return MT(model, tokenizer, root / "mt")


@pytest.fixture(scope="session")
def full_repo(tmp_path_factory, mt, vit_dirs) -> Path:  # noqa: F811 - the fixture imported above
    """The tiny translator and both tiny ViTs (symlinked model directories)."""
    root = tmp_path_factory.mktemp("rel-repo")
    (root / "mt").symlink_to(mt.model_dir, target_is_directory=True)
    for name, path in vit_dirs.items():
        (root / name).symlink_to(path, target_is_directory=True)
    return root


@pytest.fixture(scope="session")
def long_source(mt) -> str:
    return mt.long_source()
