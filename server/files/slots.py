"""A run's character data in an XML part, what a translation is written into (``paragraphs``).

A :class:`Slot` is one element's ``text`` or ``tail``. A :class:`Hyphenated` is a word Word
writes with a hyphen element inside it (ECMA-376 Part 1 § 17.3.3: ``<w:noBreakHyphen/>``, a
hyphen no line breaks at, and ``<w:softHyphen/>``, where a line may break with one): ``e``
``<w:noBreakHyphen/>`` ``mail`` is the one run ``e‑mail`` (U+2011, the non-breaking hyphen), and
``co`` ``<w:softHyphen/>`` ``operate`` is ``cooperate``, as the reader sees them; two runs there
would be a word cut in two, which sends the paragraph's translation onto one run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lxml import etree

from . import xstring

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
# Strict Open XML (ISO/IEC 29500 Strict: Word's and PowerPoint's "Strict Open XML" save type)
W_STRICT = "{http://purl.oclc.org/ooxml/wordprocessingml/main}"
S = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
S_STRICT = "{http://purl.oclc.org/ooxml/spreadsheetml/main}"
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
# text elements whose edge spaces the application drops without xml:space="preserve"
_PRESERVED = frozenset({f"{W}t", f"{W_STRICT}t", f"{S}t", f"{S_STRICT}t"})
# characters XML 1.0 cannot hold (a control character in a model's output): see xml_text
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
NO_BREAK = "\u2011"
# hyphen elements inside a word -> what the reader sees of them (a soft hyphen shows only at a line's end)
HYPHENS = {
    f"{ns}{name}": shown for ns in (W, W_STRICT) for name, shown in (("noBreakHyphen", NO_BREAK), ("softHyphen", ""))
}


def xml_text(text: str) -> str:
    """``text`` without the characters XML 1.0 cannot hold: a space for one that separates words
    (a form feed), nothing for the others."""
    return _NOT_XML.sub(lambda m: " " if m.group().isspace() else "", text)


@dataclass(frozen=True)
class Slot:
    """An element's ``text`` (or ``tail``): one run's character data; ``escaped``: read and written
    through SpreadsheetML's ``_xHHHH_`` escapes (``xstring``), so the model reads characters."""

    element: etree._Element
    tail: bool = False
    escaped: bool = False

    def get(self) -> str:
        text = (self.element.tail if self.tail else self.element.text) or ""
        return xstring.decode(text) if self.escaped else text

    def set(self, text: str) -> None:
        text = xml_text(xstring.encode(text) if self.escaped else text)
        if self.tail:
            self.element.tail = text
            return
        self.element.text = text
        if self.element.tag in _PRESERVED and text != text.strip():  # Word and Excel drop edge spaces without it
            self.element.set(XML_SPACE, "preserve")


@dataclass(frozen=True)
class Hyphenated:
    """Text elements (``w:t``) and the hyphen elements before, between and after them, one run
    (``parts``, in document order: ``-5`` starts with its hyphen). Written: the translation into
    the first text element (``element``), each U+2011 in it a ``<w:noBreakHyphen/>`` again; the
    source's hyphen elements removed (a soft hyphen's place in the source's word is no place in
    the translation's) and its other text elements emptied."""

    parts: tuple[etree._Element, ...]
    made: list[etree._Element] = field(default_factory=list, compare=False)  # written by the last set
    tail = False

    @property
    def element(self) -> etree._Element:
        return next(p for p in self.parts if p.tag not in HYPHENS)

    def get(self) -> str:
        return "".join(HYPHENS[p.tag] if p.tag in HYPHENS else p.text or "" for p in self.parts)

    def set(self, text: str) -> None:
        target = self.element
        for element in self.made:  # the last write's hyphens and pieces
            if element.getparent() is not None:
                element.getparent().remove(element)
        self.made.clear()
        for element in self.parts:
            if element is target:
                continue
            if element.tag in HYPHENS:
                if element.getparent() is not None:
                    element.getparent().remove(element)
            else:
                Slot(element).set("")
        first, *pieces = text.split(NO_BREAK)
        namespace, at = etree.QName(target).namespace, target
        if not first and pieces:  # a translation that starts with one (-5): the hyphen before the text
            target.addprevious(hyphen := etree.Element(f"{{{namespace}}}noBreakHyphen"))
            self.made.append(hyphen)
            first = pieces.pop(0)
        Slot(target).set(first)
        for piece in pieces:
            hyphen = etree.Element(f"{{{namespace}}}noBreakHyphen")
            words = etree.Element(target.tag)
            at.addnext(hyphen)
            hyphen.addnext(words)
            Slot(words).set(piece)
            self.made.extend((hyphen, words))
            at = words
