"""``source_language: auto``: the served source languages a text may be in, and the detector's
choice among them, per text (a batch of mixed languages) or for a document's texts together."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from concurrent.futures import Executor

from ..documents import HTML, HTML_RULES, MARKDOWN, MarkupRules
from ..documents.markdown import markdown_runs
from ..documents.markup import html_runs
from ..shared.errors import InvalidRequest
from . import limits
from .detection import Detector
from .requests import Detection, TranslationRequest
from .routing import LanguageNotServed, ServedLanguages

DETECT_CHARS = 2000  # enough for a detector to be sure; a 50,000-character text would take 0.1 s


# a web or e-mail address: its letters are no language's, and read as English ("latest-release-notes")
ADDRESS = re.compile(r"\b(?:[a-z][a-z0-9+.-]*://|www\.)\S+|[\w.+-]+@[\w-]+(?:\.[\w-]+)+", re.IGNORECASE)


def words_of(text: str, format: str = "", markup: MarkupRules = HTML_RULES) -> str:
    """What the detector reads of a text: its words, without web and e-mail addresses, nor the
    markup of an html or markdown one (tag and attribute names are read as English), one run a line."""
    if format == HTML:
        text = "\n".join(run.plain for run in html_runs(text, markup))
    elif format == MARKDOWN:
        text = "\n".join(run.plain for run in markdown_runs(text))
    return ADDRESS.sub(" ", text)


def has_letters(text: str) -> bool:
    """Whether a text holds anything a detector can read: digits, punctuation and emoji are
    every language's (a tie, which would name the alphabetically first)."""
    return any(ch.isalpha() for ch in text)


class SourceDetection:
    """The server's detector (None where detection is off) over the languages it serves."""

    def __init__(self, detector: Detector | None, pool: Executor, languages: ServedLanguages) -> None:
        self.detector, self.pool, self.languages = detector, pool, languages

    async def detect(self, text: str, codes: list[str]) -> list[Detection]:
        """The detector on the text's first DETECT_CHARS characters, on the work pool (~0.1-2 ms)."""
        if self.detector is None:
            return []
        text = words_of(text[: 2 * DETECT_CHARS])  # about DETECT_CHARS without its addresses
        if not has_letters(text):  # "42", "2025-03-03": any language; LibreTranslate says so with 0
            return [Detection(codes[0], 0.0)] if codes else []
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(self.pool, self.detector.detect, text[:DETECT_CHARS], codes)
        return found[:1] if found and found[0].confidence == 0 else found  # a tie: one, as for "42"

    def candidates(self, target: str) -> list[str]:
        """The served source languages that reach ``target`` (all of them when it is "")."""
        table = self.languages.table
        public = table.public(target, f"auto -> {target}", table.targets)
        candidates = table.sources_to(public) if public else table.sources
        if public and not candidates:
            raise LanguageNotServed(f"no model translates into {public}", "", public, target_only=True)
        return candidates

    async def each(self, request: TranslationRequest) -> list[Detection]:
        """``source_language: auto``: each text's served source language (reaching the target),
        read from its words (``format`` html, markdown: not its markup)."""
        texts, format, markup = request.texts, request.format, request.markup
        limits.check_format(format)
        limits.check_markup(markup)
        candidates = self.candidates(request.target_language)
        if len(candidates) == 1:  # the only language the target is reached from: not a detection
            return [Detection(candidates[0], 100.0)] * len(texts)
        if not candidates:
            raise InvalidRequest("source language auto: this server serves no source language to detect")
        if self.detector is None:
            raise InvalidRequest(
                "source language auto needs language detection, which is off on this server; "
                f"name the source language: one of {', '.join(candidates)}"
            )
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, self._each, texts, candidates, format, markup)

    def _each(self, texts: tuple[str, ...], candidates: list[str], format: str, markup: MarkupRules) -> list[Detection]:
        detected: list[Detection | None] = []
        for i, text in enumerate(texts):
            text = words_of(text, format, markup)
            if not has_letters(text):  # blank, numbers, a date, emoji: nothing says which language
                detected.append(None)
                continue
            found = self.detector.detect(text[:DETECT_CHARS], candidates) if self.detector else []
            if not found:
                where = f"text {i}" if len(texts) > 1 else "the text"
                raise InvalidRequest(
                    f"the language of {where} is not one this server detects; name the source language: one of "
                    f"{', '.join(candidates)}"
                )
            detected.append(found[0] if found[0].confidence > 0 else None)  # a tie: as a text without letters
        # a text without letters, or that ties, goes with the batch's first detected language (no other model's
        # load for it), at confidence 0 as LibreTranslate reports a text it cannot detect
        first = next((d.language for d in detected if d is not None), candidates[0])
        return [d if d is not None else Detection(first, 0.0) for d in detected]

    async def together(self, request: TranslationRequest) -> Detection:
        """``source_language: auto`` for one document (a stream, a file): the language of its texts together."""
        (found,) = await self.each(dataclasses.replace(request, texts=("\n".join(request.texts),)))
        return found
