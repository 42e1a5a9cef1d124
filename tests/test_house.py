"""House rules of the product code: its comments and docstrings say why the code is as it is,
not how it came to be; an issue number belongs to the history files, not beside the code."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("server", "export", "models", "client", "contract")
ISSUE = re.compile(r"\bissues? #?\d+", re.IGNORECASE)


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
        if found:
            cited[name] = found
    assert not cited, f"issue numbers in product code (say why, not which issue): {cited}"
