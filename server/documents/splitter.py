"""Texts -> documents of segments for the model, and the limits checked before any of it.

``DocumentSplitter.split(text, format)`` runs: runs of plain text (the whole text, or the
text runs of html) -> sentences (sentencex, lines kept) -> pieces at inline markup (html) ->
pieces of sentences over the model's source limit -> segments. The normalised text of every
segment and its token ids come with it, so the engine tokenises nothing twice.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from attnserve.server.errors import InvalidRequest, echo

from .document import Document, Segment, SourceMap
from .fit import SentenceFitter, TokenBudget
from .markup import html_runs
from .normalize import Normalizer
from .sentences import CLOSE, Run, cut_at_markup, sentence_spans

TEXT, HTML = "text", "html"
FORMATS = (TEXT, HTML)


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


@dataclass(frozen=True)
class PreparedDocument:
    document: Document
    sources: tuple[str, ...]  # normalised text of each segment: what is tokenised
    ids: tuple[tuple[int, ...], ...]  # its token ids (special tokens included), each within the budget

    @property
    def segments(self) -> int:
        return len(self.document.segments)


def _may_cut(source_map: SourceMap, p: int) -> bool:
    return not source_map.splits_reference(p)


def text_runs(text: str) -> list[Run]:
    return [Run(text, SourceMap.identity(0, len(text)), lines=True)]


class DocumentSplitter:
    """Splits texts into segments that the model can take, one at a time (see the module docstring)."""

    def __init__(self, budget: TokenBudget, normalizer: Normalizer | None = None, language: str = "en") -> None:
        self.budget = budget
        self.normalize = normalizer or Normalizer.for_tokenizer(budget.tokenizer)
        self.language = language

    def split(self, text: str, format: str = TEXT) -> PreparedDocument:
        return self.split_many([text], format)[0]

    def split_many(self, texts: Sequence[str], format: str = TEXT) -> list[PreparedDocument]:
        """Each text as a document. One tokenizer call for every sentence of all of them: a call
        per run cost ~0.5 ms each, and a call per text ~0.2 ms (a file of 900 paragraphs)."""
        if format not in FORMATS:
            raise InvalidRequest(f"format must be one of {', '.join(FORMATS)}, got {echo(format)}")
        works = []
        for text in texts:
            runs = html_runs(text) if format == HTML else text_runs(text)
            works.append(
                [(run, cut_at_markup(run, sentence_spans(run.plain, self.language, run.lines))) for run in runs]
            )
        flat = [self.normalize(run.plain[s:e]) for work in works for run, spans in work for s, e in spans]
        ids = iter(self.budget.encode(flat))
        return [self._document(text, work, ids, format) for text, work in zip(texts, works)]

    def _document(
        self, text: str, work: list[tuple[Run, list[tuple[int, int]]]], ids: Iterator[list[int]], format: str
    ) -> PreparedDocument:
        placed: list[tuple[int, int, Segment, list[int]]] = []  # (raw start, raw end, segment, ids)
        for run, spans in work:
            fitter = SentenceFitter(run.plain, self.normalize, self.budget, functools.partial(_may_cut, run.map))
            for (start, end), segment_ids in fitter.fit(spans, [next(ids) for _ in spans]):
                raw_start, raw_end = run.map.start(start), run.map.end(end)
                placed.append((raw_start, raw_end, self._segment(text, run, start, end, format), segment_ids))
        separators, at = [], 0
        for raw_start, raw_end, *_ in placed:
            separators.append(text[at:raw_start])
            at = raw_end
        separators.append(text[at:])
        segments = tuple(p[2] for p in placed)
        return PreparedDocument(
            Document(tuple(separators), segments),
            tuple(self.normalize(s.text) for s in segments),
            tuple(tuple(p[3]) for p in placed),
        )

    @staticmethod
    def _segment(raw: str, run: Run, start: int, end: int, format: str) -> Segment:
        source = raw[run.map.start(start) : run.map.end(end)]
        text = run.plain[start:end]
        if format == TEXT:
            return Segment(source, text)
        inside = run.anchors_inside(start, end)  # markup inside a word (see cut_at_markup)
        return Segment(
            source,
            text,
            before="".join(raw[a.raw_start : a.raw_end] for a in inside if a.kind != CLOSE),
            after="".join(raw[a.raw_start : a.raw_end] for a in inside if a.kind == CLOSE),
            references=run.map.references(start, end, run.plain, raw),
            html=True,
        )
