"""The test tiers. Every test belongs to exactly one, a marker declared in pyproject.toml:
``unit`` (``make test-fast``, a few minutes on 2 cores), ``integration`` (live server processes,
torch exports, training, fuzzing, pip installs), ``docker``, ``soak`` and ``gpu``. A test's
own tier marker wins; otherwise its folder or module below decides, and anything not listed is
``unit``, so a new test lands in a tier without an edit here. ``make test`` runs them all.
"""

from __future__ import annotations

from pathlib import Path

TIERS = ("unit", "integration", "docker", "soak", "gpu")
TESTS = Path(__file__).resolve().parents[1]
# Paths relative to tests/ (a folder ends in "/"); the first match wins.
TIER_OF_PATH = (
    ("reliability/test_soak.py", "soak"),
    ("docker/test_compose_stack.py", "docker"),
    ("server/test_cuda.py", "gpu"),
    ("benchmarks/", "integration"),
    ("training/", "integration"),
    ("reliability/", "integration"),
    ("export/", "integration"),
    ("server/kserve/", "integration"),
    ("server/http/", "integration"),
    ("server/files/test_translate_file_rpc.py", "integration"),
    ("server/test_cli.py", "integration"),
    ("server/test_protobuf_range.py", "integration"),
    ("test_install_paths.py", "integration"),
)


def tier_of(path: Path) -> str:
    relative = path.resolve().relative_to(TESTS).as_posix()
    return next((tier for prefix, tier in TIER_OF_PATH if relative.startswith(prefix)), "unit")
