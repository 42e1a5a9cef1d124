"""A translation no one font has every character of, drawn as runs: each character in its font
(``pdf_fonts.Fonts.pen`` chooses them), measured and drawn in it, a text object a run.

A space where one run gives way to the next ends the run before it, drawn in its font (where it
has a space), not at the start of the next: PDFium's text page puts a space of its own where the
font changes, and "나왔습니다. 더" (the full stop in Helvetica, the space and Korean in Droid Sans
Fallback) was read "나왔습니다.  더" from the objects' texts. Each run begins where the translation
was measured to (its spaces in their own font), so the lines keep the widths they were broken at.
"""

from __future__ import annotations

import ctypes
from typing import Protocol

from .pdf_paths import pdfium, pdfium_c


class Glyphs(Protocol):
    """A font's glyphs as runs are measured and drawn in them (``pdf_fonts.Glyphs``, which imports
    this module: named by what it does, not imported back)."""

    font: pdfium_c.FPDF_FONT
    advance: dict[str, float]

    def width(self, text: str) -> float: ...

    def missing(self, text: str) -> int: ...

    def runs(self, text: str) -> list[tuple[Glyphs, str]]: ...


class Runs:
    """A translation that no one font has every character of: each character in its font
    (``fonts``), else in ``main``'s, measured and drawn in it."""

    def __init__(self, main: Glyphs, fonts: dict[str, Glyphs]) -> None:
        self.main, self.fonts = main, fonts

    def width(self, text: str) -> float:
        return sum(self.fonts.get(ch, self.main).advance[ch] for ch in text)

    def runs(self, text: str) -> list[tuple[Glyphs, str]]:
        """``text`` as its runs of characters of one font, in order; the spaces a run begins
        with at the end of the run before, where its font has a space."""
        out: list[tuple[Glyphs, str]] = []
        for ch in text:
            glyphs = self.fonts.get(ch, self.main)
            if out and out[-1][0] is glyphs:
                out[-1] = (glyphs, out[-1][1] + ch)
            else:
                out.append((glyphs, ch))
        for i in range(len(out) - 1, 0, -1):
            (before, ahead), (glyphs, run) = out[i - 1], out[i]
            spaces = len(run) - len(run.lstrip(" "))
            if spaces and not before.missing(" "):
                out[i - 1] = (before, ahead + " " * spaces)
                out[i] = (glyphs, run[spaces:])
        return [(glyphs, run) for glyphs, run in out if run]

    def measured(self, glyphs: Glyphs, run: str) -> float:
        """How far ``run``, drawn in ``glyphs``, was measured to advance: its spaces in their own font's width."""
        if " " not in run:
            return glyphs.width(run)
        return glyphs.width(run) + run.count(" ") * (self.fonts.get(" ", self.main).advance[" "] - glyphs.advance[" "])


def text_objects(doc: pdfium.PdfDocument, pen: Glyphs | Runs, text: str, size: float) -> list[pdfium_c.FPDF_PAGEOBJECT]:
    """A line of ``text`` (in the order it is drawn) as text objects at ``size``, one a run of one
    font, each where the one before was measured to end, from x = 0 on the baseline y = 0."""
    objects, x = [], 0.0
    for glyphs, run in pen.runs(text):
        obj = pdfium_c.FPDFPageObj_CreateTextObj(doc.raw, glyphs.font, ctypes.c_float(size))
        encoded = (run + "\0").encode("utf-16-le")  # one copy, straight into PDFium's array type
        pdfium_c.FPDFText_SetText(obj, (pdfium_c.FPDF_WCHAR * (len(encoded) // 2)).from_buffer_copy(encoded))
        if objects:  # a run after another: where the one before ends
            pdfium_c.FPDFPageObj_Transform(obj, 1, 0, 0, 1, x, 0)
        objects.append(obj)
        if isinstance(pen, Runs):
            glyphs.missing(run)  # a right-to-left line's mirrored bracket may be one not measured yet
            x += pen.measured(glyphs, run) * size
    return objects
