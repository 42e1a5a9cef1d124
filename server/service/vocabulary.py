"""The words the doors and the services speak: the types of the requests a door builds and of the
answers it encodes, whichever layer under the service defines them.

A door imports these from here, never from the layer that defines them (``tests/test_layers.py``):
what the services take and return is their contract, and where it changes the doors follow from
this one list. Each name is one a service's request holds or its answer carries:

- text formats (``TranslationRequest.format``): ``TEXT``, ``HTML``, ``FORMATS``; how html reads
  its tags (``TranslationRequest.markup``): ``MarkupRules``;
- decoding (``TranslationRequest.options``, ``Translated.results``, ``TranslationService.stream``):
  ``DecodeOptions``, ``Hypothesis``, ``StreamEvent``; word alignments (``Translated.alignments``):
  ``WordAlignment``;
- images (``ClassificationRequest.images``, ``ClassificationService.classify``): ``ImageInput``
  (an ``EncodedImage`` or a ``RawTensor``), ``ImageResult``;
- files: the extensions a file request may have (``FILE_EXTENSIONS``), a background job's record
  (``Job``, ``FileJobs``), a stored glossary (``Glossary``, its ``Dictionary`` of each language
  pair, ``StoredGlossaries``);
- the models: one model's hot reload (``ReloadOutcome``, the repository's reload action).
"""

from __future__ import annotations

from ..documents import FORMATS, HTML, TEXT, MarkupRules
from ..documents.alignment import WordAlignment
from ..files import SUPPORTED as FILE_EXTENSIONS
from ..files.job_store import Job
from ..images.classifier import EncodedImage, ImageInput, ImageResult, RawTensor
from ..runtime.reload import ReloadOutcome
from ..state import Dictionary, Glossary
from ..translation import DecodeOptions, Hypothesis, StreamEvent

__all__ = [
    "FILE_EXTENSIONS",
    "FORMATS",
    "HTML",
    "TEXT",
    "DecodeOptions",
    "Dictionary",
    "EncodedImage",
    "Glossary",
    "Hypothesis",
    "ImageInput",
    "ImageResult",
    "Job",
    "MarkupRules",
    "RawTensor",
    "ReloadOutcome",
    "StreamEvent",
    "WordAlignment",
]
