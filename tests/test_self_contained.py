"""A clone is self-contained: no tracked file points at design notes outside the repository."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# "../shared" and the old external design notes (DESIGN.md / STYLE.md): a clone has none of them.
OUTSIDE = re.compile(r"\.\./shared|\bshared/(DESIGN|STYLE)|\bDESIGN\.md\b|\bSTYLE\.md\b|/work/")


def tracked_text_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to list tracked files")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in out.decode().split("\0") if name]


def test_no_tracked_file_points_outside_the_repository():
    offenders = []
    for path in tracked_text_files():
        if path == Path(__file__).resolve() or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary (weights, images)
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "files point outside the repository (use docs/architecture.md):\n" + "\n".join(offenders)


def test_the_readme_links_the_architecture_page_that_exists():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](docs/architecture.md)" in readme
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for section in ("## Data flow", "## The fused attention op", "KV cache", "model-directory contract", "plan"):
        assert section in page
