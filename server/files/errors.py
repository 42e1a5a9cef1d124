"""The file layer's refusals: INVALID_ARGUMENT (HTTP 400) on every door, in words a person can act on."""

from __future__ import annotations

from ..errors import InvalidRequest


class FileRefused(InvalidRequest):
    """A file that cannot be translated: an unsupported type, a corrupt or hostile package, no text."""


class UnsupportedFile(FileRefused):
    """A file name whose extension is not one of the supported formats."""

    def __init__(self, filename: str, supported: tuple[str, ...], why: str = "") -> None:
        super().__init__(f"file format not supported: {filename!r}{why}; this server translates {', '.join(supported)}")
