"""``Translator`` and ``Classifier``: one call's worth of :class:`Client`, as a function.

Given an address they open their own channel, closed by :meth:`close` or at the end of a
``with`` block; given a ``Client`` they use it and leave it open, its owner's to close."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from . import DEFAULT_ADDRESS, Client, Label  # the package imports this module last


class _Shortcut:
    def __init__(self, client: Client | str) -> None:
        self.owns_client = not isinstance(client, Client)
        self.client = Client(client) if self.owns_client else client

    def close(self) -> None:
        """Closes the channel it opened (a ``Client`` it was given stays open)."""
        if self.owns_client:
            self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Translator(_Shortcut):
    """``Translator("127.0.0.1:50051", beam_size=4)("Monday, March 3, 2025") -> str``."""

    def __init__(self, client: Client | str = DEFAULT_ADDRESS, model: str = "", **options: Any) -> None:
        super().__init__(client)
        self.model, self.options = model, options

    def __call__(self, text: str) -> str:
        return self.client.translate([text], self.model, **self.options)[0].text

    def batch(self, texts: Iterable[str]) -> list[str]:
        return [t.text for t in self.client.translate(texts, self.model, **self.options)]

    def stream(self, text: str) -> Iterator[str]:
        for chunk in self.client.translate_stream(text, self.model, **self.options):
            if chunk.delta:
                yield chunk.delta


class Classifier(_Shortcut):
    """``Classifier("127.0.0.1:50051")("digit.png") -> [Label, ...]`` (most probable first)."""

    def __init__(self, client: Client | str = DEFAULT_ADDRESS, model: str = "", top_k: int = 0) -> None:
        super().__init__(client)
        self.model, self.top_k = model, top_k

    def __call__(self, image: bytes | str | Path | np.ndarray) -> list[Label]:
        return self.client.classify([image], self.model, top_k=self.top_k)[0].labels

    def batch(self, images: Iterable[bytes | str | Path | np.ndarray]) -> list[list[Label]]:
        return [r.labels for r in self.client.classify(list(images), self.model, top_k=self.top_k)]
