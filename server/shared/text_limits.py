"""The characters a text and a request may have: checked before a text is read any further, by
the service for every door and by the engine for its own callers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .errors import InvalidRequest


@dataclass(frozen=True)
class DocumentLimits:
    """Characters (code points, markup included) a text and a whole request may have: checked
    before anything else, so a 1 MB text is refused without being read."""

    max_text_chars: int = 50_000
    max_request_chars: int = 200_000

    def __post_init__(self) -> None:
        if self.max_text_chars < 1 or self.max_request_chars < 1:
            raise ValueError(f"character limits must be >= 1, got {self.max_text_chars}, {self.max_request_chars}")

    def check(self, texts: Sequence[str]) -> None:
        total = 0
        for i, text in enumerate(texts):
            if len(text) > self.max_text_chars:
                raise InvalidRequest(
                    f"text {i} is {len(text):,} characters; this server takes at most {self.max_text_chars:,} "
                    "per text: split it"
                )
            total += len(text)
        if total > self.max_request_chars:
            raise InvalidRequest(
                f"the texts of this request are {total:,} characters together; this server takes at most "
                f"{self.max_request_chars:,} per request: send them in several requests"
            )
