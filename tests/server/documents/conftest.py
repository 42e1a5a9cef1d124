"""The bundled translator's own tokenizer (committed with its weights): documents are split in
its tokens, no model needed."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

from attnserve.server.documents import DocumentSplitter, TokenBudget

TOKENIZER = Path(__file__).resolve().parents[3] / "models" / "zoo" / "translator-en-de" / "tokenizer.json"
COMMITTED = Path(__file__).resolve().parents[3] / "models" / "repo" / "translator-en-de"  # what make serve serves


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(TOKENIZER))


@pytest.fixture(scope="session")
def splitter(tokenizer) -> DocumentSplitter:
    """The bundled translator's limit: 64 source tokens."""
    return DocumentSplitter(TokenBudget(tokenizer, 64))


@pytest.fixture(scope="session")
def tight(tokenizer) -> DocumentSplitter:
    """A 12-token limit, so ordinary sentences need cutting."""
    return DocumentSplitter(TokenBudget(tokenizer, 12))


@pytest.fixture(scope="session")
def translator_repo(tmp_path_factory) -> Path:
    """A model repository with the bundled translator: its committed model directory (models/repo)."""
    out = tmp_path_factory.mktemp("bundled-translator")
    (out / "translator-en-de").symlink_to(COMMITTED, target_is_directory=True)
    return out
