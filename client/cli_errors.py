"""How ``attnserve-client`` says an error: one line on stderr and, with
``--json``, ``{"error": {"code": ..., "message": ...}}`` on stdout, for the server's errors (its
gRPC status) and the client's own alike, so a script reading stdout always has an answer."""

from __future__ import annotations

import json
import sys

USAGE = "INVALID_ARGUMENT"  # exit 2: the command line, a file it names, stdin
LOCAL = "LOCAL_ERROR"  # exit 1: the client's own failure (a file it could not write, after the call)


def fail(as_json: bool, message: str, exit_code: int = 2, code: str = "", said: str = "", hint: str = "") -> int:
    """Says the error and returns ``exit_code``; ``code`` is USAGE for exit 2, else LOCAL unless
    given (the server's status); ``said`` replaces the stderr line's text (``CODE: details``);
    ``hint``, what to do instead, is a second line on stderr."""
    if as_json:
        code = code or (USAGE if exit_code == 2 else LOCAL)
        print(json.dumps({"error": {"code": code, "message": message}}), flush=True)
    print(f"attnserve-client: error: {said or message}", file=sys.stderr)
    if hint:
        print(f"attnserve-client: hint: {hint}", file=sys.stderr)
    return exit_code
