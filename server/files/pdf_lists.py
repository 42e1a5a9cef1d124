"""A PDF's list items: the bullets and labels that begin one, though its lines are spaced as a
paragraph's (``pdf_blocks`` asks :func:`item` before it joins a line to the block above).

A bullet glyph always begins an item (no wrapped line of prose starts with one), and so does a
bullet drawn as a shape before a line (``Line.bullet``: a browser's, found by ``pdf_paths``). A
label ("1.", "b)", "iv.", "- ") begins one only where the block began with a label as far left, or
with its text starting as far left after it, or after a lead-in ending in a colon: a paragraph's
wrapped line that starts "2. The" or "2025 was" continues it.
"""

from __future__ import annotations

import re

from .pdf_lines import Line

# Word's and LibreOffice's bullets in symbol fonts (Symbol's •, Wingdings' ▪ ❖ ➢ ✓), which their
# PDFs map to the private-use code points Windows' symbol fonts have them at (U+F000 + the font's
# code): a block is read with the Unicode bullet each looks like, which the fonts a translation is
# drawn in have (no font but the symbol font draws the private-use one)
SYMBOL_BULLETS = {"\uf0b7": "\u2022", "\uf0a7": "\u25aa", "\uf076": "\u2756", "\uf0d8": "\u27a2", "\uf0fc": "\u2713"}
BULLET = re.compile(
    r"[\u2022\u2023\u2043\u25aa\u25ab\u25cf\u25cb\u25e6\u25a0\u25a1\u25c6\u25c7\u25ba\u25b6\u2713\u2219\u00b7\u2756\u27a2"
    + "".join(SYMBOL_BULLETS)
    + "]"
)
# a list item's label: a dash or asterisk, or 1-3 digits, a letter or a roman numeral with "." or ")", then a space
LABEL = re.compile(r"(?:[-\u2013\u2014*]|\(?(?:\d{1,3}|[a-zA-Z]|[ivxlcIVXLC]{2,6})[.)])\s")


def label(text: str) -> bool:
    """Whether ``text`` is a list item's label and nothing else: a bullet glyph, "1.", "b)", "-"."""
    text = text.strip()
    return bool(BULLET.fullmatch(text) or LABEL.fullmatch(text + " "))


def item(lines: list[Line], line: Line) -> bool:
    """Whether ``line`` begins a list item of its own, though spaced as the block's next line. A
    bullet glyph always does (no wrapped line of prose starts with one), and so does a bullet
    drawn as a shape before it (``Line.bullet``: a browser's). A label ("1.", "b)", "iv.", "- ")
    does where the block began with a label of any kind, a bullet too, as far left or with its
    text starting as far left after it (the item before it, of this list or of a list of the other
    kind right above; its wrapped lines, under its text, carry none) or the line above ends in a
    colon (the list's lead-in); a paragraph's wrapped line that starts "2. The" or "2025 was"
    continues it."""
    text = line.text.lstrip()
    if line.bullet is not None or BULLET.match(text):
        return True
    if not LABEL.match(text + " "):
        return False
    near = 0.5 * line.first.size
    start, first_text, text = label_left(lines[0]), text_start(lines[0]), text_start(line)
    listed = start is not None and abs(start - line.first.left) < near
    aligned = first_text is not None and text is not None and abs(first_text - text) < near
    return listed or aligned or lines[-1].text.rstrip().endswith(":")


def label_left(line: Line) -> float | None:
    """Where the line's label stands: its bullet drawn as a shape, or a bullet or label its text
    begins with (Chrome right-aligns a number where its bullets' left edges are); None for none."""
    if line.bullet is not None:
        return line.bullet
    text = line.text.lstrip()
    return line.first.left if BULLET.match(text) or LABEL.match(text + " ") else None


def text_start(line: Line) -> float | None:
    """Where the line's text after its label begins: after its bullet drawn as a shape, or after
    the objects that hold its bullet or label and nothing else ("10. ", or "1" and "1. " where a
    browser split "11." at its kerning). A list's items start their text at one place, however wide
    their labels ("9." and "10." right-aligned by Chrome, left-aligned at a tab stop by Word); None
    where no label stands alone in its objects (a wrapped line of prose starting "10. The")."""
    if line.bullet is not None:
        return min(line.first.left, line.first.x)
    head = ""
    for run, after in zip(line.runs, line.runs[1:]):
        head += run.text
        if label(head):
            return min(after.left, after.x)
    return None
