"""A translated paragraph placed back onto the runs it was read from.

A paragraph of a .docx, a slide or an .odt is a sequence of runs, each with its own style
(``Hello <b>big</b> world``: three runs). The model translates the paragraph as one sentence;
its translation is then cut into as many pieces as the paragraph had runs with words in them.

Without word alignments, by proportion of words: a run holding a third of the source's
words gets about a third of the translation's, in order, each such run at least one. When
that cannot be right (a run boundary inside a word, ``H`` + ``ello``; fewer translated words
than runs), the first run with words takes the whole translation in its style and the others
are emptied (their elements, and so their styles, stay). Runs without words (spaces,
punctuation) are emptied: the translation carries its own.

The seam for word alignments (``Hypothesis.alignments``, issue 34): a placement is a function
``(unit, translation) -> run texts`` (:data:`Placement`), chosen by the file formats' caller
(``service.files``); an aligned placement gives each target word the run of the source word
it is aligned to, and falls back to :func:`place` where a word has no alignment.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Unit:
    """A translatable stretch of a file: its runs and what separates them.

    ``runs[i]`` is the text of run i as the file holds it; ``joints[i]`` (one fewer) is what
    the model reads between run i and run i + 1 for things that are not runs and stay where
    they are (a tab, a line break, an ODF ``<text:s/>``): "" where the runs touch."""

    runs: tuple[str, ...]
    joints: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        assert len(self.joints) == max(0, len(self.runs) - 1), "one joint between each two runs"

    @property
    def text(self) -> str:
        """What the model translates."""
        out = [self.runs[0]] if self.runs else []
        for joint, run in zip(self.joints, self.runs[1:]):
            out += (joint, run)
        return "".join(out)


Placement = Callable[["Unit", str], list[str]]


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


def place(unit: Unit, translation: str) -> list[str]:
    """The new text of every run of ``unit`` for ``translation`` of its text, by proportion of
    words (see the module docstring)."""
    runs = unit.runs
    if len(runs) == 1:
        return [translation]
    words = translation.split()
    counts = [sum(any(ch.isalnum() for ch in word) for word in run.split()) for run in runs]  # words, not ":"
    holders = [i for i, c in enumerate(counts) if c]
    out = [""] * len(runs)
    if not holders:
        out[0] = translation
        return out
    unsure = len(words) < len(holders) or any(
        _splits_word(runs[i], unit.joints[i], runs[i + 1]) for i in range(len(runs) - 1)
    )
    if unsure or len(holders) == 1:
        out[holders[0]] = translation
        return out
    at = 0
    for n, (i, share) in enumerate(zip(holders, _shares([counts[i] for i in holders], len(words)))):
        text = " ".join(words[at : at + share])
        at += share
        later = holders[n + 1] if n + 1 < len(holders) else None
        if later is not None and not any(j.strip() == "" and j for j in unit.joints[i:later]):
            text += " "  # the runs' own spaces were emptied with them; a tab or break between them is one
        out[i] = text
    return out
