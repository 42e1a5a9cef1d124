"""The server's code stays readable in the shape issue 31 set: no function over 80 lines, no
class over 250, and request options read as typed fields, never through ``getattr`` (a
misspelt or missing option would read as its default instead of failing)."""

from __future__ import annotations

import ast
from pathlib import Path

SERVER = Path(__file__).resolve().parents[2] / "server"
MAX_FUNCTION_LINES, MAX_CLASS_LINES = 80, 250
OPTION_NAMES = {"options", "request", "wanted", "valid"}  # what a request or its options are called


def _trees():
    for path in sorted(SERVER.rglob("*.py")):
        yield path.relative_to(SERVER.parent), ast.parse(path.read_text(encoding="utf-8"), str(path))


def _lines(node: ast.AST) -> int:
    return node.end_lineno - node.lineno + 1


def test_no_function_over_80_lines_and_no_class_over_250():
    too_long = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _lines(node) > MAX_FUNCTION_LINES:
                too_long.append(f"{path}:{node.lineno} function {node.name}: {_lines(node)} lines")
            if isinstance(node, ast.ClassDef) and _lines(node) > MAX_CLASS_LINES:
                too_long.append(f"{path}:{node.lineno} class {node.name}: {_lines(node)} lines")
    assert too_long == []


def _names(node: ast.AST) -> set[str]:
    """The variable and attribute names ``node`` reads (``request.options`` -> request, options)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def test_request_options_are_not_read_with_getattr():
    found = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
                if node.args and _names(node.args[0]) & OPTION_NAMES:
                    found.append(f"{path}:{node.lineno} {ast.unparse(node)}")
    assert found == []
