"""Translation serving: tokenization, the encoder, and continuous-batching decoding over a KV cache.

See ``engine.py`` (the public API), ``scheduler.py`` (admission and the step loop),
``cache.py`` (the KV-cache layout), ``search.py`` (greedy, beam search, sampling) and
``detok.py`` (incremental detokenization for streams).
"""

from .engine import TranslationEngine
from .options import DecodeOptions, EngineSettings, Hypothesis, StreamEvent, TranslationResult
from .sessions import load_translation_sessions, session_options

__all__ = [
    "DecodeOptions",
    "EngineSettings",
    "Hypothesis",
    "StreamEvent",
    "TranslationEngine",
    "TranslationResult",
    "load_translation_sessions",
    "session_options",
]
