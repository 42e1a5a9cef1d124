"""Typed errors of the export side (torch-free, so ``verify`` and ``inspect`` need no torch)."""

from __future__ import annotations

import sys

from attnserve.contract.manifest import ManifestError


class ExportError(RuntimeError):
    """An export that cannot proceed; the message says why and what to do."""


def is_user_error(exc: BaseException) -> bool:
    """An error the CLI reports in one line (what to change), not a traceback (a defect)."""
    kinds: list[type] = [ManifestError, ExportError]
    for module, error in (
        ("attnserve.export.precision", "PrecisionError"),  # needs onnx: loaded with verify
        ("attnserve.models.checkpoint", "CheckpointError"),  # loaded only by exports (it needs torch)
    ):
        if module in sys.modules:
            kinds.append(getattr(sys.modules[module], error))
    return isinstance(exc, tuple(kinds))
