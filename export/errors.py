"""Typed errors of the export side (torch-free, so ``verify`` and ``inspect`` need no torch)."""

from __future__ import annotations


class ExportError(RuntimeError):
    """An export that cannot proceed; the message says why and what to do."""
