"""House rules of the product code: its comments and docstrings say why the code is as it is,
not how it came to be; an issue number belongs to the history files, not beside the code."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("server", "export", "models", "client", "contract")
ISSUE = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
# Files another branch is rewriting at the time this test was written; each must still hold a
# citation (a stale entry fails), and leaves this set once its citations are gone.
PENDING = {
    "server/translation/aligner.py",
    "server/translation/options.py",
}


def product_files() -> list[Path]:
    files = [p for folder in PRODUCT for p in (ROOT / folder).rglob("*.py")]
    files += (ROOT / "benchmarks").glob("*.py")
    return sorted(p for p in files if "protos" not in p.parts)


def citations(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment or string literal of ``source`` that cites an issue number."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.COMMENT, tokenize.STRING) and ISSUE.search(token.string):
            found.append((token.start[0], ISSUE.search(token.string).group()))
    return found


def test_citations_finds_comments_and_docstrings_but_not_code():
    source = '"""Doc (issue 12)."""\nx = 1  # see Issue 7\nissue = 3\nprint(issue + 4)\n'
    assert citations(source) == [(1, "issue 12"), (2, "Issue 7")]


def test_the_product_code_cites_no_issue_number():
    cited = {}
    for path in product_files():
        name = path.relative_to(ROOT).as_posix()
        found = citations(path.read_text(encoding="utf-8"))
        if found and name not in PENDING:
            cited[name] = found
    assert not cited, f"issue numbers in product code (say why, not which issue): {cited}"


@pytest.mark.parametrize("name", sorted(PENDING))
def test_every_pending_file_still_cites_one(name):
    path = ROOT / name
    assert path.exists() and citations(path.read_text(encoding="utf-8")), f"{name}: drop it from PENDING"
