"""The file layer's refusals: INVALID_ARGUMENT (HTTP 400) on every door, in words a person can act on."""

from __future__ import annotations

from ..shared.errors import InvalidRequest, LimitExceeded


class FileRefused(InvalidRequest):
    """A file that cannot be translated: an unsupported type, a corrupt or hostile package, no text."""


class UnsupportedFile(FileRefused):
    """A file name whose extension is not one of the supported formats."""

    def __init__(self, filename: str, supported: tuple[str, ...], why: str = "") -> None:
        super().__init__(f"file format not supported: {filename!r}{why}; this server translates {', '.join(supported)}")


class TooManyCharacters(LimitExceeded):
    """A file with more characters of text than ``--max-file-chars``, found while it is read: the
    reader stops there, so ``value`` is what it had counted (more than ``maximum``), not the file's total."""

    def __init__(self, counted: int, limit: int) -> None:
        super().__init__(
            f"the file holds more than {limit:,} characters of text; this server translates at most {limit:,} per "
            "file (--max-file-chars)",
            "max_file_chars", counted, limit,
        )  # fmt: skip
