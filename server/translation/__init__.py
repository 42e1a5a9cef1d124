"""Translation serving: tokenization, the encoder, and continuous-batching decoding over a KV cache.

``engine.py`` is the public API (``prepare`` -> ``translate`` / ``stream``), ``prepared.py``
the prepared request and one model's limits (which the translation service checks requests
against: the engine trusts what it receives and measures only tokens); the scheduler thread
(``scheduler.py``) repeats plan (``planner.py``, over the ``waiting.py`` queue) -> run
(``slots.py``, ``cache.py``, ``runner.py``) -> update (``search.py``: greedy, beam search,
sampling; ``constraints.py`` and ``constrained_beam.py``: the same writing a glossary's terms,
``terms.py``, whose surrogates ``term_swap.py`` swaps for their targets); ``jobs.py`` holds a
text's state and where its results go; ``detok.py`` detokenises streams incrementally.
See docs/architecture.md.
"""

from .engine import TranslationEngine
from .options import DecodeOptions, EngineSettings, Hypothesis, StreamEvent, TranslationResult
from .sessions import load_translation_sessions
from .terms import Constraint, TermTokens

__all__ = [
    "Constraint",
    "DecodeOptions",
    "EngineSettings",
    "Hypothesis",
    "StreamEvent",
    "TermTokens",
    "TranslationEngine",
    "TranslationResult",
    "load_translation_sessions",
]
