"""A translated paragraph placed back onto the runs it was read from.

A paragraph of a .docx, a slide or an .odt is a sequence of runs, each with its own style
(``Hello <b>big</b> world``: three runs). The model translates the paragraph's sentences, cut
where html's would be at its styled stretches (:func:`styled_spans`); its translation is then
cut into pieces, one for each run with words in it (a piece may be empty).

Without word alignments, by proportion of words: a run holding a third of the source's
words gets about a third of the translation's, in order, each such run at least one. When
that cannot be right (a run boundary inside a word, ``H`` + ``ello``; fewer translated words
than runs), the first run with words takes the whole translation in its style and the others
are emptied (their elements, and so their styles, stay). Runs without words (spaces,
punctuation) are emptied: the translation carries its own.

With word alignments (:func:`place_aligned`), the placement html and markdown inline markup
gets (``documents.placement.covered_ranges``): each run covers the translated words from the
first to the last one linked to its source words (the narrowest run where ranges overlap; a
run none of whose words is linked, the word its place maps to where no other run covers it),
and the runs, which keep their order in the file (their elements carry the styles), take the
contiguous stretches of the translation that give the most words to the run covering them,
then the most uncovered words to runs that cover none (plain text outside every element
stays outside it in html). A run may take no word: ``on <b>Friday, January 9, 2026</b> at
<i>3:45 PM</i>`` -> ``am <b>Freitag, 9. Januar 2026</b> <i>um 15:45 Uhr</i>``, the " at "
run emptied (its element, so its style, stays) as "um" is linked to 3:45, as html places it;
giving every run a word took 2026 out of the bold. ``Monday, <b>March</b> 3, 2025`` ->
``Montag, 3. <b>März</b> 2025``. A monotone segmentation found by dynamic programming, time
and memory words x runs.
Where the alignments say nothing, the cases above are unsure, or the paragraph has more than
``max_runs`` runs with words (``--max-aligned-runs``: a paragraph of 16,000 alternating bold
runs would be 256 M cells), it is :func:`place`, whose time is linear in words + runs. A placement is a function
``(unit, translation) -> run texts`` (:data:`Placement`), chosen by ``service.files``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

MAX_ALIGNED_RUNS = 256  # --max-aligned-runs' default: runs with words a paragraph placed by alignment may have
_SMALL = 4096  # words x runs below which the segmentation runs as a Python loop (numpy's per-call cost)


@dataclass(frozen=True)
class Unit:
    """A translatable stretch of a file: its runs and what separates them.

    ``runs[i]`` is the text of run i as the file holds it; ``joints[i]`` (one fewer) is what
    the model reads between run i and run i + 1 for things that are not runs and stay where
    they are (a tab, a line break, an ODF ``<text:s/>``): "" where the runs touch. ``styles[i]``
    (none, or one per run) says how run i looks: "" plain, runs that look alike the same."""

    runs: tuple[str, ...]
    joints: tuple[str, ...] = ()
    styles: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        assert len(self.joints) == max(0, len(self.runs) - 1), "one joint between each two runs"
        assert len(self.styles) in (0, len(self.runs)), "a style for each run, or none"
        out = [self.runs[0]] if self.runs else []
        for joint, run in zip(self.joints, self.runs[1:]):
            out += (joint, run)
        object.__setattr__(self, "_text", "".join(out))  # once: a frozen unit's runs do not change

    @property
    def text(self) -> str:
        """What the model translates."""
        return self._text


Placement = Callable[["Unit", str], list[str]]


def styled_spans(unit: Unit) -> tuple[tuple[int, int], ...]:
    """The (start, end) offsets in ``unit.text`` of each stretch of runs in one style other than
    plain (what an html element is to its text): a sentence is segmented at them as at html's
    inline markup (``documents.splitter``), so a paragraph is translated alike in every format."""
    out: list[tuple[int, int]] = []
    at, start, style = 0, 0, ""
    for i, run in enumerate(unit.runs):
        joint = unit.joints[i - 1] if i else ""
        now = unit.styles[i] if unit.styles else ""
        if now != style:
            if style:
                out.append((start, at))
            start, style = at + len(joint), now
        at += len(joint) + len(run)
    if style:
        out.append((start, at))
    return tuple(out)


def _splits_word(left: str, joint: str, right: str) -> bool:
    return not joint and bool(left) and bool(right) and left[-1].isalnum() and right[0].isalnum()


def _shares(weights: Sequence[int], n: int) -> list[int]:
    """``n`` items split in proportion to ``weights`` (all > 0), each share >= 1, in order."""
    total, out, given = sum(weights), [], 0
    cumulative = 0
    for i, weight in enumerate(weights):
        cumulative += weight
        left = len(weights) - i - 1  # runs after this one, each needing a word
        end = round(cumulative / total * n)
        end = max(given + 1, min(end, n - left))
        out.append(end - given)
        given = end
    return out


def _counts(unit: Unit) -> list[int]:
    """Words per run (words with a letter or digit: not ":")."""
    return [sum(any(ch.isalnum() for ch in word) for word in run.split()) for run in unit.runs]


def holders(unit: Unit) -> list[int]:
    """The runs with words in them: those a translation is shared out to."""
    return [i for i, c in enumerate(_counts(unit)) if c]


def place(unit: Unit, translation: str) -> list[str]:
    """The new text of every run of ``unit`` for ``translation`` of its text, by proportion of
    words (see the module docstring)."""
    runs = unit.runs
    if len(runs) == 1:
        return [translation]
    words = translation.split()
    counts = _counts(unit)
    having = [i for i, c in enumerate(counts) if c]
    out = [""] * len(runs)
    if not having:
        out[0] = translation
        return out
    unsure = len(words) < len(having) or any(
        _splits_word(runs[i], unit.joints[i], runs[i + 1]) for i in range(len(runs) - 1)
    )
    if unsure or len(having) == 1:
        out[having[0]] = translation
        return out
    return _written(unit, having, words, _shares([counts[i] for i in having], len(words)))


def _written(unit: Unit, holders: list[int], words: list[str], shares: Sequence[int]) -> list[str]:
    """Run texts: holder n takes the next ``shares[n]`` words (maybe none); the other runs are emptied."""
    out, at = [""] * len(unit.runs), 0
    filled = [(i, share) for i, share in zip(holders, shares) if share]
    for n, (i, share) in enumerate(filled):
        text = " ".join(words[at : at + share])
        at += share
        later = filled[n + 1][0] if n + 1 < len(filled) else None
        if later is not None and not any(j.strip() == "" and j for j in unit.joints[i:later]):
            text += " "  # the runs' own spaces were emptied with them; a tab or break between them is one
        out[i] = text
    return out


def run_at(unit: Unit) -> list[int | None]:
    """For every character of ``unit.text``: the run it belongs to (None inside a joint)."""
    out: list[int | None] = []
    for i, run in enumerate(unit.runs):
        if i:
            out += [None] * len(unit.joints[i - 1])
        out += [i] * len(run)
    return out


def place_aligned(
    unit: Unit, translation: str, preferred: Sequence[int | None] | None, max_runs: int = MAX_ALIGNED_RUNS
) -> list[str]:
    """The new text of every run for ``translation``, whose whitespace-separated words are
    covered by the runs ``preferred[j]`` (``documents.placement.covered_ranges``, or None): the
    monotone split that gives the most words to the run covering them, then the most uncovered
    words to runs that cover none (module docstring); :func:`place` where there is nothing to go
    by or more than ``max_runs`` runs have words."""
    words = translation.split()
    if len(unit.runs) < 2 or preferred is None or len(preferred) != len(words) or not words:
        return place(unit, translation)
    having = holders(unit)
    if not 2 <= len(having) <= max_runs:
        return place(unit, translation)
    if any(_splits_word(unit.runs[i], unit.joints[i], unit.runs[i + 1]) for i in range(len(unit.runs) - 1)):
        return place(unit, translation)
    slot = {run: n for n, run in enumerate(having)}
    wants = [slot.get(run) if run is not None else None for run in preferred]  # holder covering each word, or None
    if all(w is None for w in wants):
        return place(unit, translation)
    return _written(unit, having, words, _segment(wants, len(having)))


def _gains(wants: Sequence[int | None], m: int) -> tuple[np.ndarray, int]:
    """What a word scores in each block: its covering block outweighs all uncovered words
    together (``len(wants) + 1``); an uncovered word scores 1 in a block that covers nothing (as
    text outside every element stays outside them in html). Returns (the free blocks' row for an
    uncovered word, the covering score)."""
    free = np.ones(m, dtype=np.int64)
    free[[w for w in wants if w is not None]] = 0
    return free, len(wants) + 1


def _segment(wants: Sequence[int | None], m: int) -> list[int]:
    """Block sizes (m of them, each >= 0, in order) splitting the words to score the most
    (:func:`_gains`); of equal splits, each word in the earliest block."""
    return _segment_loop(wants, m) if len(wants) * m <= _SMALL else _segment_numpy(wants, m)


def _segment_numpy(wants: Sequence[int | None], m: int) -> list[int]:
    """:func:`_segment` one word at a time over all blocks at once: the same recurrence as
    :func:`_segment_loop`, with the block of the word before kept for the way back (n x m)."""
    n, blocks = len(wants), np.arange(m)
    free, covered = _gains(wants, m)

    def gain(w: int | None) -> np.ndarray:
        return free if w is None else np.where(blocks == w, covered, 0)

    best = gain(wants[0]).copy()  # (m,) the most words 0..j score with word j in block h
    came = np.zeros((n, m), dtype=np.uint16 if m < 1 << 16 else np.int64)  # (n, m) the block of word j-1
    for j in range(1, n):
        top = np.maximum.accumulate(best)  # (m,) the best of blocks 0..h
        rises = np.concatenate(([True], top[1:] > top[:-1]))  # where a new best is first reached
        came[j] = np.maximum.accumulate(np.where(rises, blocks, 0))
        best = top + gain(wants[j])
    return _sizes(came, int(np.argmax(best)), n, m)


def _sizes(came: Sequence[Sequence[int]], last: int, n: int, m: int) -> list[int]:
    sizes, h = [0] * m, last
    for j in range(n - 1, -1, -1):
        sizes[h] += 1
        h = int(came[j][h]) if j else h
    return sizes


def _segment_loop(wants: Sequence[int | None], m: int) -> list[int]:
    n = len(wants)
    free, covered = _gains(wants, m)
    free = free.tolist()

    def gain(w: int | None, h: int) -> int:
        return free[h] if w is None else covered * (w == h)

    best = [gain(wants[0], h) for h in range(m)]  # best[h]: the most words 0..j score with word j in block h
    came = [[0] * m for _ in range(n)]  # the block of word j-1 on that best way
    for j in range(1, n):
        top, at, row, w = -1, 0, came[j], wants[j]
        for h in range(m):
            if best[h] > top:
                top, at = best[h], h
            row[h] = at
            best[h] = top + gain(w, h)
    return _sizes(came, max(range(m), key=lambda h: (best[h], -h)), n, m)
