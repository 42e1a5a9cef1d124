"""Word alignments for a file's styled paragraphs (from the model's aligner): which run of
a .docx / .pptx / .odt / .odp paragraph each translated word goes to (``files.place_aligned``).

Only paragraphs with words in two runs or more need them (one run takes the whole translation),
and no more than ``max_runs`` (``--max-aligned-runs``: the run placement is words x runs; a
paragraph with more is placed by proportion of words), and a paragraph repeated in the file is
aligned once. Their sentences are aligned on the work
pool as the engine finishes them, in tasks of ``ALIGN_BATCH`` paragraphs, while the engine
decodes the rest of the file. The engine keeps each step's attention for those sentences
(the positions ``RunAligner.add`` returns) where the decoder returns it, so greedy decoding (a file's) leaves the
aligner graph nothing to run and what remains is the word links; otherwise the aligner's pass
starts from the encoder output the engine kept, and where a core is free most of it is not
added to the file's time (onnxruntime runs without the GIL).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Sequence
from concurrent.futures import Executor

from .. import files
from ..documents import PreparedDocument, placement
from ..documents.alignment import WordAlignment
from ..files.jobs import FileText, Preferred
from ..translation import TranslationResult
from . import alignments
from .requests import ValidTranslation

ALIGN_BATCH = 64  # paragraphs per aligner task: enough sentences for aligner runs of like lengths


def preferences(unit: files.Unit, translation: str, sentences: Sequence[WordAlignment]) -> list[int | None] | None:
    """For every whitespace-separated word of ``translation`` (the unit's): the run that covers
    it, by the placement html and markdown elements get (``documents.placement.covered_ranges``:
    a run covers the target words from the first to the last one linked to its source words; a
    run none of whose words is linked, the word its place maps to where no other run covers it),
    or None where no run does; None when the sentences cannot be found in the texts."""
    runs = files.run_at(unit)
    wanted: dict[int, int | None] = {}  # a target word's offset in the translation -> the run covering it
    source_at = target_at = 0
    for a in sentences:
        s, t = unit.text.find(a.source, source_at), translation.find(a.target, target_at)
        if s < 0 or t < 0:
            return None
        source_at, target_at = s + len(a.source), t + len(a.target)
        run_of_word = [runs[s + start] for start, _ in a.source_spans]
        ranges = placement.covered_ranges(run_of_word, a.links, len(unit.runs))
        covers = placement.covering(ranges, len(a.target_spans))
        if covers:  # a run none of whose words is linked: the word its place maps to, if no run covers it
            placed: set[int] = set()
            for i, run in enumerate(run_of_word):  # from each such run's first word
                if run is None or ranges[run] is not None or run in placed:
                    continue
                placed.add(run)
                j = placement.scaled_word(i, len(run_of_word), len(covers))
                if covers[j] is None:
                    covers[j] = run
        for (start, _), run in zip(a.target_spans, covers):
            wanted[t + start] = run
    return [wanted.get(m.start()) for m in re.finditer(r"\S+", translation)]


class RunAligner:
    """Aligns a file's styled paragraphs as their sentences are decoded (module docstring):
    ``add`` hears of the file's documents as they are split, ``decoded`` is the
    ``SentenceFlow``'s callback; ``placement`` waits for the alignments and returns where each
    word goes; ``cancel`` drops them (a failed request)."""

    def __init__(
        self, valid: ValidTranslation, extracted: FileText, pool: Executor, max_runs: int = files.MAX_ALIGNED_RUNS
    ) -> None:
        self.valid, self.pool, self.units = valid, pool, extracted.units
        self.max_runs = max_runs
        self.seen: set[str] = set()  # the styled paragraphs' texts (one repeated is aligned once)
        self.prepared: dict[int, PreparedDocument] = {}  # those to align, as they are split
        self.spans: dict[int, range] = {}  # their sentences' positions
        self.left: dict[int, set[int]] = {}  # those not decoded yet
        self.paragraph: dict[int, int] = {}  # a sentence's position -> its paragraph
        self.sentences: dict[int, TranslationResult] = {}
        self.ready: list[int] = []
        self.tasks: list[tuple[list[int], asyncio.Future]] = []

    @property
    def needed(self) -> bool:
        """Whether the file may have paragraphs to align (it has runs, and the model aligns)."""
        return bool(self.units) and self.valid.model.aligns

    def _aligned(self, k: int) -> bool:
        """Whether paragraph ``k`` is aligned: words in 2 to ``max_runs`` runs, its text not met before."""
        if k >= len(self.units) or not self.valid.model.aligns:
            return False
        unit = self.units[k]
        if unit.text in self.seen or not 2 <= len(files.holders(unit)) <= self.max_runs:
            return False
        self.seen.add(unit.text)
        return True

    def add(self, start: int, prepared: Sequence[PreparedDocument], at: int) -> list[int]:
        """The next documents of the file as they are split (its texts from ``start`` on, their
        sentences from position ``at`` on): the positions of the sentences whose alignment inputs
        the engine keeps (``SentenceFlow.add``): their steps' attention, or their encoder output
        for the aligner graph."""
        keep: list[int] = []
        for k, document in enumerate(prepared, start):
            span = range(at, at + document.segments)
            at = span.stop
            if not self._aligned(k):
                continue
            self.prepared[k], self.spans[k], self.left[k] = document, span, set(span)
            self.paragraph.update((p, k) for p in span)
            keep += span
            if not span:
                self.ready.append(k)
        return keep

    def decoded(self, positions: Sequence[int], results: Sequence[TranslationResult]) -> None:
        for p, result in zip(positions, results):
            k = self.paragraph.get(p)
            if k is None:
                continue
            self.sentences[p] = result
            left = self.left[k]
            left.discard(p)
            if not left:
                self.ready.append(k)
        if len(self.ready) >= ALIGN_BATCH:
            self._start()

    def _start(self) -> None:
        chosen, self.ready = self.ready, []
        their = [self.sentences[p] for k in chosen for p in self.spans[k]]
        work = alignments.align(self.valid, [self.prepared[k] for k in chosen], their, self.pool)
        self.tasks.append((chosen, asyncio.ensure_future(work)))

    async def placement(self, results: Sequence[TranslationResult]) -> Preferred | None:
        """Where the words of the translations (``results``, one per text) go: for each styled
        paragraph's text, the run each word prefers (``jobs.write_file``); None: by proportion."""
        if not self.spans:
            return None
        if self.ready:
            self._start()
        preferred: Preferred = {}
        for chosen, task in self.tasks:
            for k, sentences in zip(chosen, alignments.best_only(await task)):
                unit = self.units[k]
                preferred[unit.text] = preferences(unit, results[k].hypotheses[0].text, sentences)
        return preferred

    async def cancel(self) -> None:
        for _, task in self.tasks:
            task.cancel()
        for _, task in self.tasks:
            with contextlib.suppress(BaseException):
                await task
