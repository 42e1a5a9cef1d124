"""Fixtures of the HTTP route tests: the KServe tests' trained word reverser and live servers."""

from __future__ import annotations

from ..conftest import loop_thread, serve, vit_dirs  # noqa: F401
from ..kserve.conftest import (  # noqa: F401 - fixtures shared with the KServe tests
    kserve_repo,
    reverse,
    reverser_dir,
    server,
)
