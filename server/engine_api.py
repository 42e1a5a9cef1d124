"""The one place protocol layers call a translation engine.

attnserve.v1, KServe v2 (gRPC and REST) and the HTTP routes to come all translate through
these two functions, so a change of the engine's API (issue 12: tokenise once with
``prepare(texts, options)``, then ``translate(prepared)`` / ``stream(prepared)``) is a
change here and nowhere else. Both validate before any work is queued: a bad request
fails with InvalidRequest before it costs a decoder row.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any


async def translate(engine: Any, texts: list[str], options: Any) -> list[Any]:
    """One ``TranslationResult`` per text, in order."""
    engine.validate(texts, options)
    return await engine.translate(texts, options)


def stream(engine: Any, text: str, options: Any) -> AsyncIterator[Any]:
    """``StreamEvent``s of one text; closing the iterator frees its decoder row at the next step."""
    engine.validate([text], options)
    return engine.stream(text, options)
