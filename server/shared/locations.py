"""Where a server's files live by default: the model repository, the bundled models, the
per-repository folders of the state it keeps on disk, and the memory-backed folder its processes
share mapped files in."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from pathlib import Path

# files the processes of --workers N map (batches for the session host, the request-rate table):
# memory-backed where the system has it, else the temp folder (pages the kernel writes back)
SHARED_MEMORY_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def default_model_repo() -> Path:
    return Path("model-repo")


def per_repository_dir(prefix: str, model_repo: Path) -> Path:
    """``<system temp>/<prefix>-<12 hex digits of the repository's real path>``: the default home of
    state a server keeps on disk. Servers of one model repository (``--workers``, a restart) share
    it, so a restarted server finds its jobs and downloads; a server of another repository on the
    same machine has its own, so it never takes jobs for models it does not serve."""
    digest = hashlib.sha256(str(Path(model_repo).resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"{prefix}-{digest}"


def bundled_model_repo() -> Path | None:
    """The bundled model directories shipped inside the package (``attnserve/models/repo``), or
    None when this installation lacks them. Found without importing ``attnserve.models``, whose
    ``__init__`` imports torch (the server never does)."""
    spec = importlib.util.find_spec("attnserve.models")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        if (Path(folder) / "repo").is_dir():
            return Path(folder) / "repo"
    return None
