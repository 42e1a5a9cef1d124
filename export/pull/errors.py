"""The one error type of ``pull``: a download, an index or a request that cannot be served."""

from __future__ import annotations

from attnserve.export.errors import ExportError


class PullError(ExportError):
    """A model that cannot be pulled; the message names it and says why (the others still install)."""
