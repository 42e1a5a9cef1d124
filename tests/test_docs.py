"""The README and the pages it sends readers to: short, first things first, no dead links."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def test_the_readme_fits_on_a_few_screens_with_the_two_commands_on_the_first():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250
    first_screen = "\n".join(lines[:30])
    assert "make serve" in first_screen and "make test" in first_screen
    assert any("Ctrl-C" in line for line in lines), "the README says how to stop the server"


def test_every_relative_link_of_the_readme_and_docs_reaches_a_file():
    dead = []
    for page in PAGES:
        for target, _ in LINK.findall(page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            if not (page.parent / target).exists():
                dead.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not dead, dead


def test_every_docs_page_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for page in (ROOT / "docs").glob("*.md"):
        assert f"](docs/{page.name})" in readme or f"](docs/{page.name}#" in readme, page.name
    assert "](benchmarks/README.md)" in readme
