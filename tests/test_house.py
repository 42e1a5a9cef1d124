"""House rules of the product code: its comments and docstrings say why the code is as it is,
not how it came to be; an issue number belongs to the history files, not beside the code."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("server", "export", "models", "client", "contract")
ISSUE = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
# Phrases that narrate how the code came to be rather than why it is so (git history holds that).
NARRATION = re.compile(r"\bas before\b|\bused to be\b|\buntil a GPU\b|\bwas: ", re.IGNORECASE)


def product_files() -> list[Path]:
    files = [p for folder in PRODUCT for p in (ROOT / folder).rglob("*.py")]
    files += (ROOT / "benchmarks").glob("*.py")
    return sorted(p for p in files if "protos" not in p.parts)


def citations(source: str, pattern: re.Pattern = ISSUE) -> list[tuple[int, str]]:
    """(line, text) of every comment or string literal of ``source`` that matches ``pattern``
    (by default: cites an issue number)."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.COMMENT, tokenize.STRING) and pattern.search(token.string):
            found.append((token.start[0], pattern.search(token.string).group()))
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


def test_narration_is_found_in_comments_and_strings():
    source = 'x = 1  # works as before\ny = "refused until a GPU confirms it"\nwas = 2\n'
    assert citations(source, NARRATION) == [(1, "as before"), (2, "until a GPU")]


def test_the_product_code_does_not_narrate_its_history():
    narrated = {}
    for path in product_files():
        found = citations(path.read_text(encoding="utf-8"), NARRATION)
        if found:
            narrated[path.relative_to(ROOT).as_posix()] = found
    assert not narrated, f"comments narrating history (say why the code is so, not how it came to be): {narrated}"


MAX_FUNCTION_LINES, MAX_MODULE_LINES = 60, 400
SIZED = ("server", "client", "contract", "export", "models")  # product code; tests, benchmarks, experiments aside


def oversized(source: str, name: str) -> list[str]:
    """What in ``source`` (the file ``name``) is over the limits: the module's line count, and each
    function's or method's lines from its ``def`` (decorators aside) to its last line."""
    found = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{name}: module of {lines} lines (at most {MAX_MODULE_LINES})")
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{name}:{node.lineno}: {node.name} of {length} lines (at most {MAX_FUNCTION_LINES})")
    return found


def test_oversized_names_a_long_function_and_a_long_module():
    body = "".join(f"    x{i} = {i}\n" for i in range(59))
    source = f"def short():\n    return 1\n\n\nasync def long():\n{body}" + "\n" * (400 - 64)
    assert oversized(source, "m.py") == []  # 400 lines; long() is 60 lines
    assert oversized(source.replace("async def long():\n", "async def long():\n    pass\n"), "m.py") == [
        "m.py: module of 401 lines (at most 400)",
        "m.py:5: long of 61 lines (at most 60)",
    ]


def test_no_function_over_60_lines_and_no_module_over_400_in_product_code():
    found = []
    for path in sorted(p for folder in SIZED for p in (ROOT / folder).rglob("*.py") if "protos" not in p.parts):
        found += oversized(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
    assert not found, "split by meaning (a helper per concern, a module named for what it holds):\n" + "\n".join(found)


def test_the_benchmark_report_is_a_report_of_what_is_measured():
    """benchmarks/README.md holds today's figures, their commands and machines: at most 800 lines,
    no issue numbers (superseded runs and their story go to benchmarks/results/HISTORY-*.md)."""
    report = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    assert len(report.splitlines()) <= 800, "move superseded runs to benchmarks/results/HISTORY-*.md"
    assert not ISSUE.findall(report), ISSUE.findall(report)
