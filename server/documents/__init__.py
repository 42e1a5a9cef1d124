"""Texts as documents: split into lines and sentences for the model, translated
segment by segment, joined with the original separators. Torch-free, engine-free."""

from .document import Document, Segment
from .fit import TokenBudget
from .markup import HTML_RULES, TAG_NAME, MarkupRules
from .normalize import Normalizer, unicode_form
from .splitter import FORMATS, HTML, MARKDOWN, TEXT, DocumentSplitter, PreparedDocument

__all__ = [
    "FORMATS",
    "HTML",
    "HTML_RULES",
    "MARKDOWN",
    "TAG_NAME",
    "TEXT",
    "Document",
    "DocumentSplitter",
    "MarkupRules",
    "Normalizer",
    "PreparedDocument",
    "Segment",
    "TokenBudget",
    "unicode_form",
]
