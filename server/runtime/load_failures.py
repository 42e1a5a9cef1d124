"""What the lazy loader (``residency.py``) keeps of a model whose on-demand load failed, so that
clients retrying it cost the models that serve nothing.

A failed load answers UNAVAILABLE with its reason, and so does every request for the model while
its files are unchanged (model.json's bytes; each file's inode, size and modification time, as
:func:`~.model_loader.file_stamps` tells them): for ``--model-load-retry-seconds`` (doubling
after each failure); after that its next request tries again only where the budget has room
without unloading another model, since a load of the same files fails the same way but for
passing causes (memory short then); and after ``--model-load-attempts`` failures not at all.
Once its files change (a fixed copy written in place, ``attnserve-export pull``) the failure is
forgotten and its next request tries at once; readiness answers compare the stamps too, so a fixed
model reads ready before any request tries it. A reload (SIGHUP, Reload, RepositoryModelLoad)
forgets it too."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from attnserve.contract.manifest import ManifestError

from ..shared.config import Settings
from ..shared.errors import ModelUnavailable, echo
from ..shared.metrics import Metrics
from .model_loader import file_stamps

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadFailure:
    reason: str
    attempts: int
    retry_at: float  # time.monotonic()
    limit: int  # attempts before it waits for a reload or new files (--model-load-attempts)
    files: tuple | None  # the directory's files_now() when the failed load began

    @property
    def final(self) -> bool:
        return self.attempts >= self.limit

    def waiting(self) -> bool:
        """Refused whatever the budget holds: attempts spent, or within the backoff."""
        return self.final or time.monotonic() < self.retry_at

    def message(self, name: str) -> str:
        failed = f"model {echo(name)} could not be loaded"
        if self.final:
            return (
                f"{failed} ({self.attempts} attempts): {self.reason}; it is tried again once its files change "
                "or after a reload (SIGHUP, Reload, RepositoryModelLoad)"
            )
        wait = self.retry_at - time.monotonic()
        if wait > 0:
            return f"{failed}: {self.reason}; it is tried again in {wait:.0f} s, or once its files change"
        return (
            f"{failed}: {self.reason}; its files are unchanged, so it is tried again only when the budget has "
            "room without unloading another model, or once they change"
        )


def files_now(model_dir: Path) -> tuple | None:
    """What identifies ``model_dir``'s files now (None: model.json or the folder cannot be read)."""
    try:
        return file_stamps(model_dir)
    except OSError:
        return None


class LoadFailures:
    """The failed on-demand loads of one residency, by model name (see the module docstring)."""

    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.settings, self.metrics = settings, metrics
        self._by_name: dict[str, LoadFailure] = {}
        self._reported: set[str] = set()  # failed and reported NOT_SERVING since (health)

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def get(self, name: str) -> LoadFailure | None:
        return self._by_name.get(name)

    def current(self, name: str, model_dir: Path | None) -> LoadFailure | None:
        """``name``'s failure, if its files are those it failed with; one whose files changed is
        forgotten (``model_dir`` None: the model is not indexed, its failure is kept as it is)."""
        failure = self._by_name.get(name)
        if failure is not None and model_dir is not None and failure.files != files_now(model_dir):
            log.info("model %s: its files changed since its load failed; its next request loads it", name)
            self.forget(name)
            return None
        return failure

    def record(self, name: str, model_dir: Path, exc: Exception, files: tuple | None) -> ModelUnavailable:
        """A load of ``model_dir`` (whose files were ``files`` when it began) failed with ``exc``."""
        named = isinstance(exc, ManifestError) or str(model_dir) in str(exc)
        reason = str(exc) if named else f"{model_dir}: {type(exc).__name__}: {exc}"
        previous = self._by_name.get(name)
        attempts = (previous.attempts if previous else 0) + 1
        backoff = self.settings.model_load_retry_seconds * 2 ** (attempts - 1)
        limit = self.settings.model_load_attempts
        failure = LoadFailure(reason, attempts, time.monotonic() + backoff, limit, files)
        self._by_name[name] = failure
        self._reported.add(name)
        self.metrics.model_loads.labels(name, "failed").inc()
        log.error("model %s failed to load on demand (attempt %d): %s", name, attempts, reason)
        return ModelUnavailable(failure.message(name))

    def recovered(self, name: str, model_dir: Path) -> bool:
        """``name`` was reported NOT_SERVING for a failed load, and its files changed since or a
        reload forgot the failure: it is reported SERVING (once) by the caller."""
        if name not in self._reported or self.current(name, model_dir) is not None:
            return False
        self._reported.discard(name)
        return True

    def forget(self, name: str, reported: bool = False) -> None:
        """``name``'s failure is forgotten; ``reported`` too where its health is said anew (loaded, unloaded)."""
        self._by_name.pop(name, None)
        if reported:
            self._reported.discard(name)
