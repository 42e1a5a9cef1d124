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


TREES = ("server", "contract", "export", "client")
MODULE = re.compile(r"(?<![\w./])(\w+)\.py\b")


def architecture_trees() -> dict[str, dict[str, str]]:
    """docs/architecture.md's module trees: {tree: {top-level folder ("" for the tree's own
    modules): the text of its entry}}. A tree is a line ``name/`` at the start of a line of a
    fenced block; its entries are the lines indented by two spaces, continued by deeper ones."""
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    trees: dict[str, dict[str, str]] = {}
    for block in re.findall(r"^```\n(.*?)^```", doc, re.S | re.M):
        tree = folder = None
        for line in block.splitlines():
            if re.fullmatch(r"\w+/", line):
                tree, folder = line[:-1], ""
                trees.setdefault(tree, {})
            elif tree is not None and line.startswith("  "):
                entry = re.match(r"  (\w+)/", line)
                if entry:
                    folder = entry.group(1)
                elif not line.startswith("   "):
                    folder = ""
                trees[tree][folder] = trees[tree].get(folder, "") + line + "\n"
            elif line.strip():
                tree = None
    return trees


def test_architecture_names_every_module_of_the_server_contract_export_and_client_in_its_tree():
    trees = architecture_trees()
    unnamed = []
    for tree in TREES:
        entries = trees.get(tree, {})
        for path in sorted((ROOT / tree).rglob("*.py")):
            rel = path.relative_to(ROOT / tree)
            if rel.name == "__init__.py":
                continue
            folder, *inner = rel.parts[:-1] or ("",)
            text = entries.get(folder, "")
            if rel.stem not in MODULE.findall(text) or any(f"{sub}/" not in text for sub in inner):
                unnamed.append(f"{tree}/{rel.as_posix()}")
    assert not unnamed, "docs/architecture.md's trees do not name (add a line): " + ", ".join(unnamed)


def test_every_module_an_architecture_tree_names_exists_in_its_folder():
    trees = architecture_trees()
    assert set(TREES) <= set(trees), "a tree is missing from docs/architecture.md"
    gone = []
    for tree, entries in trees.items():
        for folder, text in entries.items():
            where = ROOT / tree / folder
            files = {p.name for p in (where.rglob("*.py") if folder else where.glob("*.py"))}
            gone += [
                f"{tree}/{folder}/{name}.py".replace("//", "/")
                for name in MODULE.findall(text)
                if f"{name}.py" not in files
            ]
    assert not gone, "docs/architecture.md's trees name modules that do not exist: " + ", ".join(gone)
