"""OOXML's escapes for characters in SpreadsheetML text (ECMA-376 Part 1, 22.9.2.19 ST_Xstring):
``_xHHHH_`` stands for the UTF-16 code unit HHHH, so a cell may hold a character XML 1.0 cannot
(Excel writes a carriage return as ``_x000D_``, a control character as ``_x0007_``), and an
underscore that would start such a sequence is itself escaped (``_x005F_``: the text
``_x0041_`` is written ``_x005F_x0041_``). The model reads the characters, never the escapes;
its translation is written back escaped where XML or the escape syntax needs it."""

from __future__ import annotations

import re

_ESCAPE = re.compile(r"_x([0-9A-Fa-f]{4})_")
_SURROGATE = re.compile("[\ud800-\udfff]")
# what is escaped on writing: an underscore that would read as an escape's start, and the
# characters XML 1.0 cannot hold but an escape can (a lone surrogate is dropped: files.paragraphs)
_NEEDS_ESCAPE = re.compile("_(?=x[0-9A-Fa-f]{4}_)|[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def decode(text: str) -> str:
    """The characters ``text``'s escapes stand for (a pair of escaped surrogates is one character)."""
    if "_x" not in text:
        return text
    decoded = _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)
    if _SURROGATE.search(decoded):  # UTF-16 code units: a character beyond the BMP is two escapes
        decoded = decoded.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return decoded


def encode(text: str) -> str:
    """``text`` with its escapes written: what :func:`decode` reads back as ``text``."""
    return _NEEDS_ESCAPE.sub(lambda m: "_x005F_" if m.group() == "_" else f"_x{ord(m.group()):04X}_", text)
