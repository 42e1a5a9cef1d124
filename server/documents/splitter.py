"""Texts -> documents of segments for the model.

``DocumentSplitter.split(text, format)`` runs: runs of plain text (the whole text, or the
text runs of html) -> sentences (sentencex, lines kept) -> pieces at inline markup (html) ->
pieces of sentences over the model's source limit -> segments. The normalised text of every
segment and its token ids come with it, so the engine tokenises nothing twice.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..shared import stopping
from ..shared.errors import InvalidRequest, echo
from .document import Document, Segment, SourceMap
from .fit import SentenceFitter, TokenBudget
from .markdown import markdown_runs
from .markup import HTML_RULES, MarkupRules, html_runs
from .normalize import Normalizer
from .placement import InlineElement
from .sentences import CLOSE, OPEN, VOID, Anchor, Run, cut_at_markup, sentence_spans, translatable, trim
from .structure import at_block_start

TEXT, HTML, MARKDOWN = "text", "html", "markdown"
FORMATS = (TEXT, HTML, MARKDOWN)


@dataclass(frozen=True)
class PreparedDocument:
    document: Document
    sources: tuple[str, ...]  # normalised text of each segment: what is tokenised
    ids: tuple[tuple[int, ...], ...]  # its token ids (special tokens included), each within the budget

    @property
    def segments(self) -> int:
        return len(self.document.segments)


CLAUSE_PUNCTUATION = frozenset(",;:&|/\u2013\u2014")  # , ; : & | / en and em dashes
_TAG_NAME = re.compile(r"</?\s*([^\s/>]+)")


def _name(raw: str, anchor: Anchor) -> str:
    m = _TAG_NAME.match(raw, anchor.raw_start, anchor.raw_end)
    return anchor.name or (m.group(1).lower() if m else "")


def unpaired(raw: str, anchors: Sequence[Anchor]) -> list[Anchor]:
    """The opening anchors not closed and the closing anchors not opened among ``anchors``."""
    stack: list[Anchor] = []
    out: list[Anchor] = []
    for anchor in anchors:
        if anchor.kind == OPEN:
            stack.append(anchor)
        elif anchor.kind == CLOSE:
            k = next((k for k in range(len(stack) - 1, -1, -1) if _name(raw, stack[k]) == _name(raw, anchor)), None)
            if k is None:
                out.append(anchor)
            else:
                stack.pop(k)
    return out + stack


def _beside_punctuation(plain: str, anchor: Anchor) -> bool:
    """Whether clause punctuation separates the anchor from the rest of its sentence: what comes
    before an opening anchor, or after a closing one (spaces skipped)."""
    step = -1 if anchor.kind == OPEN else 1
    at = anchor.position - 1 if step < 0 else anchor.position
    while 0 <= at < len(plain) and plain[at].isspace():
        at += step
    return 0 <= at < len(plain) and plain[at] in CLAUSE_PUNCTUATION


def cut_at_unpaired(raw: str, run: Run, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sentences for markup placed by alignment: cut only where an element reaches past the
    sentence's edge and punctuation sets it off (``<b>Friday, January 9</b>, <a>at 3:45 PM</a>``,
    ``March 3: <b>9:00 AM</b>``: each is a phrase of its own, and a small model translates
    phrases best one at a time); an element inside the sentence (``Monday, <i>March</i> 3``) or
    part of a phrase (``more than <b>1,500 miles</b>``) stays in it, to move with its words."""
    out = []
    for start, end in spans:
        anchors = unpaired(raw, run.anchors_inside(start, end))
        edges = {a.position for a in anchors if _beside_punctuation(run.plain, a)}
        out += cut_at_markup(run, [(start, end)], only=edges) if edges else [(start, end)]
    return out


def elements(raw: str, anchors: Sequence[Anchor], start: int, end: int) -> tuple[InlineElement, ...]:
    """The inline markup of the sentence at plain offsets ``start:end`` as elements: an opening
    anchor and the next closing one of the same name are one element (offsets relative to the
    sentence); one left unmatched in the sentence reaches to the sentence's end (an opening one)
    or from its start (a closing one); void markup is void."""
    out: list[InlineElement] = []
    stack: list[tuple[str, Anchor]] = []
    for anchor in anchors:
        markup = raw[anchor.raw_start : anchor.raw_end]
        name = _name(raw, anchor)
        if anchor.kind == OPEN:
            stack.append((name, anchor))
        elif anchor.kind == CLOSE:
            k = next((k for k in range(len(stack) - 1, -1, -1) if stack[k][0] == name), None)
            if k is None:  # opened before the sentence (not set off by punctuation): closes after its words
                out.append(InlineElement(0, anchor.position - start, "", markup))
            else:
                _, opened = stack.pop(k)
                out.append(
                    InlineElement(
                        opened.position - start, anchor.position - start, raw[opened.raw_start : opened.raw_end], markup
                    )
                )
        else:
            out.append(InlineElement(anchor.position - start, anchor.position - start, markup))
    for _, opened in stack:
        out.append(InlineElement(opened.position - start, end - start, raw[opened.raw_start : opened.raw_end]))
    return tuple(out)


def _may_cut(source_map: SourceMap, p: int) -> bool:
    return not source_map.splits_reference(p)


def text_runs(text: str, lines: bool = True) -> list[Run]:
    return [Run(text, SourceMap.identity(0, len(text)), lines=lines)]


def whole_run(plain: str) -> list[tuple[int, int]]:
    """A run as one sentence (DeepL's ``split_sentences=0``), trimmed; none with nothing to translate."""
    start, end = trim(plain, 0, len(plain))
    return [(start, end)] if translatable(plain[start:end]) else []


def styled_runs(text: str, styled: Sequence[tuple[int, int]]) -> list[Run]:
    """A file paragraph as html's run would be: each styled stretch (start, end) an element."""
    anchors = [Anchor(p, p, p, kind, str(i)) for i, (s, e) in enumerate(styled) for p, kind in ((s, OPEN), (e, CLOSE))]
    anchors.sort(key=lambda a: (a.position, a.kind == OPEN))  # at one offset an element closes, then one opens
    return [Run(text, SourceMap.identity(0, len(text)), lines=True, anchors=anchors)]


RUNS = {TEXT: text_runs, HTML: html_runs, MARKDOWN: markdown_runs}


class DocumentSplitter:
    """Splits texts into segments that the model can take, one at a time (see the module docstring)."""

    def __init__(self, budget: TokenBudget, normalizer: Normalizer | None = None, language: str = "en") -> None:
        self.budget = budget
        self.normalize = normalizer or Normalizer.for_tokenizer(budget.tokenizer)
        self.language = language

    def split(
        self, text: str, format: str = TEXT, place_inline: bool = False, markup: MarkupRules = HTML_RULES
    ) -> PreparedDocument:
        return self.split_many([text], format, place_inline, markup=markup)[0]

    def split_many(
        self,
        texts: Sequence[str],
        format: str = TEXT,
        place_inline: bool = False,
        styled: Sequence[Sequence[tuple[int, int]]] | None = None,
        markup: MarkupRules = HTML_RULES,
    ) -> list[PreparedDocument]:
        """Each text as a document. One tokenizer call for every sentence of all of them: a call
        per run cost ~0.5 ms each, and a call per text ~0.2 ms (a file of 900 paragraphs).
        ``place_inline``: sentences keep their inline markup whole (:class:`InlineElement`s, to
        place by word alignment) instead of being cut at it. ``styled`` (format text): for each
        text, a file paragraph placed on its runs by alignment, its styled stretches (start, end),
        where its sentences are cut as html's are at elements (``cut_at_unpaired``). ``markup``:
        how format html reads its tags (``markup.MarkupRules``: xml, tags ignored or splitting)."""
        if format not in FORMATS:
            raise InvalidRequest(f"format must be one of {', '.join(FORMATS)}, got {echo(format)}")
        works = []
        read = functools.partial(html_runs, rules=markup) if format == HTML else RUNS[format]
        if format == TEXT and not markup.lines:
            read = functools.partial(text_runs, lines=False)
        for i, text in enumerate(texts):
            stopping.check()  # between a file's paragraphs or pages: its client may have gone
            stretches = styled[i] if styled is not None and format == TEXT else ()
            runs = styled_runs(text, stretches) if stretches else read(text)
            cut = functools.partial(cut_at_unpaired, text) if place_inline or stretches else cut_at_markup
            works.append([(run, cut(run, self._sentences(run, markup))) for run in runs])
        flat = [self.normalize(run.plain[s:e]) for work in works for run, spans in work for s, e in spans]
        stopping.check()
        ids = iter(self.budget.encode(flat))
        return [self._document(text, work, ids, format, place_inline) for text, work in zip(texts, works)]

    def _sentences(self, run: Run, markup: MarkupRules) -> list[tuple[int, int]]:
        if not markup.sentences:
            return whole_run(run.plain)
        return sentence_spans(run.plain, self.language, run.lines)

    def _document(
        self,
        text: str,
        work: list[tuple[Run, list[tuple[int, int]]]],
        ids: Iterator[list[int]],
        format: str,
        place_inline: bool,
    ) -> PreparedDocument:
        stopping.check()
        placed: list[tuple[int, int, Segment, list[int]]] = []  # (raw start, raw end, segment, ids)
        for run, spans in work:
            fitter = SentenceFitter(run.plain, self.normalize, self.budget, functools.partial(_may_cut, run.map))
            for (start, end), segment_ids in fitter.fit(spans, [next(ids) for _ in spans]):
                raw_start, raw_end = run.map.start(start), run.map.end(end)
                segment = self._segment(text, run, start, end, format, place_inline)
                placed.append((raw_start, raw_end, segment, segment_ids))
        separators, at = [], 0
        for raw_start, raw_end, *_ in placed:
            separators.append(text[at:raw_start])
            at = raw_end
        separators.append(text[at:])
        segments = tuple(p[2] for p in placed)
        if format == MARKDOWN:  # which begin a line's text, where a translation's "- " would be a list item
            segments = tuple(
                dataclasses.replace(segment, begins_line=True) if begins_line(separators, i) else segment
                for i, segment in enumerate(segments)
            )
        return PreparedDocument(
            Document(tuple(separators), segments),
            tuple(self.normalize(s.text) for s in segments),
            tuple(tuple(p[3]) for p in placed),
        )

    @staticmethod
    def _segment(raw: str, run: Run, start: int, end: int, format: str, place_inline: bool) -> Segment:
        source = raw[run.map.start(start) : run.map.end(end)]
        text = run.plain[start:end]
        if format == TEXT:  # a sentence over lines (not ``run.lines``) keeps its breaks
            return Segment(source, text, breaks=() if run.lines else line_breaks(raw, run, start, end)[0])
        breaks, merged = line_breaks(raw, run, start, end)
        # markup inside a word (see cut_at_markup), or any (place_inline); a hard break is its line break's
        inside = [a for a in run.anchors_inside(start, end) if a not in merged]
        kinds = {"html": format == HTML, "markdown": format == MARKDOWN, "breaks": breaks}
        if place_inline and inside:
            references = run.map.references(start, end, run.plain, raw)
            return Segment(source, text, references=references, inline=elements(raw, inside, start, end), **kinds)
        return Segment(
            source,
            text,
            before="".join(raw[a.raw_start : a.raw_end] for a in inside if a.kind != CLOSE),
            after="".join(raw[a.raw_start : a.raw_end] for a in inside if a.kind == CLOSE),
            references=run.map.references(start, end, run.plain, raw),
            **kinds,
        )


def begins_line(separators: Sequence[str], i: int) -> bool:
    """Whether segment ``i`` begins its line's text: nothing but indentation and container
    markers (``> ``, ``- ``, ``1. ``) between the line's start and it."""
    before = separators[i]
    if "\n" not in before and i > 0:  # a segment earlier on the line
        return False
    return at_block_start(before.rsplit("\n", 1)[-1])


def line_breaks(raw: str, run: Run, start: int, end: int) -> tuple[tuple[tuple[int, str], ...], set[Anchor]]:
    """The line breaks inside the sentence at plain ``start:end`` as (offset in the sentence, the
    input from the break to the next line's text: ``"\\n> "`` in a block quote), and the anchors
    that belong to them: a markdown hard break (``"  "`` or ``"\\"`` before the newline) is spelled
    with its break, so it stays at a line's end."""
    breaks, merged = [], set()
    p = run.plain.find("\n", start, end)
    while p >= 0:
        first = p - 1 if p - 1 >= start and run.plain[p - 1] == "\r" else p
        last = p + 1  # the next line's text, after its indentation (html keeps it in the text)
        while last < end and run.plain[last] in " \t":
            last += 1
        raw_start, raw_end = run.map.start(first), run.map.start(last)
        for anchor in run.anchors_inside(first - 1, last + 1):
            hard_break = raw[anchor.raw_start : anchor.raw_end].strip(" \t") in ("", "\\")
            if anchor.kind == VOID and anchor.position == first and anchor.raw_end == raw_start and hard_break:
                merged.add(anchor)
                raw_start = anchor.raw_start
            elif anchor.position > p:  # markup opening the next line: not the break's
                raw_end = min(raw_end, anchor.raw_start)
        breaks.append((first - start, raw[raw_start:raw_end]))
        p = run.plain.find("\n", p + 1, end)
    return tuple(breaks), merged
