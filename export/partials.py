"""The hidden ``.<name>.partial-*`` folders a model directory is written in before it is renamed
into place, and which of them are left over.

Every writer holds a shared ``flock`` on the folder it writes into (the model repository) while its
partial folder exists. The kernel drops the lock when the writer dies, however it dies (SIGKILL, an
OOM kill), so a pull that gets the lock exclusively knows that no partial folder there has a live
writer, and removes the ones of the model it is about to install. While any other writer holds its
lock nothing is removed: a concurrent export's folder is never taken from under it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # no flock (Windows): writers go unlocked and nothing is ever removed
    fcntl = None

log = logging.getLogger(__name__)

PARTIAL = ".partial-"


def prefix(name: str) -> str:
    """The start of the partial folders' names of the model directory ``name``."""
    return f".{name}{PARTIAL}"


@contextlib.contextmanager
def writing(parent: Path) -> Iterator[None]:
    """A shared lock on ``parent`` for as long as a partial folder is being written in it."""
    fd = _open(parent)
    try:
        if fd is not None:
            with contextlib.suppress(OSError):  # a file system without flock: written unlocked
                fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        if fd is not None:
            os.close(fd)


def remove_stale(parent: Path, name: str) -> list[str]:
    """Remove the partial folders of ``name`` in ``parent`` when no writer holds ``parent``'s lock;
    the names removed (none when another writer is at work, or the lock cannot be had)."""
    fd = _open(parent)
    if fd is None:
        return []
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another export or pull is writing here (or no flock): leave everything
            return []
        removed = []
        for path in sorted(parent.glob(prefix(name) + "*")):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path.name)
        if removed:
            log.info("removed %s: left by writers that are gone", ", ".join(removed))
        return removed
    finally:
        os.close(fd)


def _open(parent: Path) -> int | None:
    if fcntl is None:
        return None
    try:
        return os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
