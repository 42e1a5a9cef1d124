"""The one place protocol layers call a translation engine.

attnserve.v1, KServe v2 (gRPC and REST) and the HTTP routes all translate through these
two functions, so a change of the engine's API is a change here and nowhere else. Both check
and tokenise the request once (``engine.prepare(texts, options)``) before any work is queued:
a bad request fails with InvalidRequest before it costs a decoder row, and the engine
decodes the ``Prepared`` ids without tokenising again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from attnserve.server.translation import DecodeOptions, StreamEvent, TranslationEngine, TranslationResult


async def translate(engine: TranslationEngine, texts: list[str], options: DecodeOptions) -> list[TranslationResult]:
    """One ``TranslationResult`` per text, in order."""
    prepared = engine.prepare(texts, options)
    return await engine.translate(prepared)


def stream(engine: TranslationEngine, text: str, options: DecodeOptions) -> AsyncIterator[StreamEvent]:
    """``StreamEvent``s of one text; closing the iterator frees its decoder row at the next step."""
    prepared = engine.prepare([text], options)
    return engine.stream(prepared)
