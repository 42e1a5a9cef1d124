"""Paragraphs of the XML parts of office packages, as runs the model's translation is placed back on.

One :class:`Dialect` per family, read from the specs:

- OOXML WordprocessingML (.docx, ECMA-376 Part 1 § 17.3): a paragraph ``<w:p>`` holds runs
  ``<w:r>`` whose text is in ``<w:t>``; ``<w:tab/>``, ``<w:ptab/>`` (an absolute tab: a header's
  right-aligned part) and ``<w:br/>`` / ``<w:cr/>`` sit between texts. Deleted text
  (``<w:delText>``, the runs of a tracked ``<w:del>`` or ``<w:moveFrom>``: text moved away) and
  field codes (``<w:instrText>``) are not read; inserted text (``<w:ins>``, ``<w:moveTo>``) is.
  A hyphen element inside a word (``<w:noBreakHyphen/>``, ``<w:softHyphen/>``) is part of its run
  (``slots.Hyphenated``); one with no word before it (``-5``, or after a tab) is the next word's.
  A field's result (§ 17.16: the runs of a ``<w:fldSimple>``, or those between a ``<w:fldChar>`` ``separate`` and its
  ``end``: a figure's number, a cross-reference, a page number) is what Word shows and does not
  compute again on opening, so it is kept as it is, a placeholder between the runs as a tab is;
  only a ``HYPERLINK`` field's result (the link's words) and a ``TOC``'s (the headings' words,
  translated with them; its entries' ``PAGEREF`` page numbers kept) are read as runs. Ruby text
  (``<w:rt>``: the reading shown above its base, furigana) is not read: the model reads the
  base's words alone, and the reading, of words the translation replaced, is emptied.
- OOXML DrawingML (.pptx, § 21.1.2): ``<a:p>`` holds runs ``<a:r>`` with ``<a:t>``, and
  ``<a:br/>``; a field's text (``<a:fld>``: a slide number, a date) is a placeholder too. A
  deck's older comments (PresentationML ``<p:cm>``) hold their words in ``<p:text>``, one run.
  WordprocessingML and DrawingML are read in their Transitional and Strict namespaces alike.
- OOXML SpreadsheetML (.xlsx, § 18.4): a shared string ``<si>``, an inline string ``<is>`` and a
  comment's ``<text>`` hold either one ``<t>`` or rich-text runs ``<r>`` with ``<rPr>`` and ``<t>``;
  phonetic runs (``<rPh>``, a Japanese reading aid) are not read; their text's ``_xHHHH_``
  escapes are read as the characters they stand for and written back (``xstring``). Transitional
  and Strict namespaces alike.
- OpenDocument (.odt, .odp, ODF 1.3 § 5.1): ``<text:p>`` and ``<text:h>`` hold mixed content:
  character data, ``<text:span>`` and ``<text:a>`` (styled runs and links, read through),
  ``<text:s/>`` (spaces), ``<text:tab/>``, ``<text:line-break/>``, a ruby (``<text:ruby>``: its
  ``<text:ruby-base>`` read through, its ``<text:ruby-text>`` reading emptied as a .docx's); anything else inside (a
  frame, a note, a bookmark) keeps its place and its own paragraphs are read on their own.
  An .odp's footer and header declarations (``<presentation:footer-decl>``, the text of every
  slide's footer) are read as paragraphs too.

Each stretch of character data is a :class:`Slot`: an element's ``text`` or ``tail``, the
only thing written back. Everything else in the part (properties, styles, images, fields,
relationships) is untouched.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from lxml import etree

from .alternate_content import fallback_of
from .run_placement import Unit
from .slots import HYPHENS, S_STRICT, W_STRICT, Hyphenated, S, Slot, W

A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
# Strict Open XML (ISO/IEC 29500 Strict: Word's and PowerPoint's "Strict Open XML" save type)
A_STRICT = "{http://purl.oclc.org/ooxml/drawingml/main}"
TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
HYPERLINK = frozenset({f"{W}hyperlink", f"{W_STRICT}hyperlink"})
FIELD_CHAR, INSTRUCTION = (
    frozenset({f"{W}fldChar", f"{W_STRICT}fldChar"}),
    frozenset({f"{W}instrText", f"{W_STRICT}instrText"}),
)
# run properties that do not show: runs differing only in them look alike (Word splits runs at edits)
_UNSEEN = frozenset({"lang", "altLang", "noProof", "dirty", "err", "smtClean", "smtId", "bmk", "rsidRPr"})


@dataclass(frozen=True)
class Dialect:
    paragraphs: frozenset[str]  # paragraph elements
    texts: frozenset[str]  # elements whose .text is a run's text (OOXML)
    joints: dict[str, str]  # elements between runs -> what the model reads for them
    mixed: bool = False  # ODF: character data of the paragraph and of `inline` elements are runs
    inline: frozenset[str] = frozenset()  # read through (ODF spans and links)
    run_parents: frozenset[str] = frozenset()  # OOXML: a text element counts only inside these (a:r, not a:fld)
    fields: frozenset[str] = frozenset()  # elements whose text is a field's result (w:fldSimple, a:fld)
    escaped: bool = False  # SpreadsheetML: text holds _xHHHH_ escapes (files.xstring)
    readings: frozenset[str] = frozenset()  # elements holding a reading aid of the words beside (ruby text)
    hyphens: frozenset[str] = frozenset()  # hyphen elements inside a run's word (slots.Hyphenated)
    removed: frozenset[str] = frozenset()  # tracked deletions: runs not read, whatever their text element


FIELD = " "  # what the model reads for a field's result: the words around it, not the result itself
# a field whose result is the author's words: a link's, a table of contents' (the headings' words)
_LINK = re.compile(r"\s*(HYPERLINK|TOC)\b", re.IGNORECASE)


def _both(namespaces: tuple[str, str], *names: str) -> frozenset[str]:
    return frozenset(f"{ns}{name}" for ns in namespaces for name in names)


WORDPROCESSING = Dialect(
    paragraphs=_both((W, W_STRICT), "p"),
    texts=_both((W, W_STRICT), "t"),
    joints={
        f"{ns}{name}": joint
        for ns in (W, W_STRICT)
        for name, joint in (("tab", "\t"), ("ptab", "\t"), ("br", "\n"), ("cr", "\n"))
    },
    run_parents=_both((W, W_STRICT), "r"),
    fields=_both((W, W_STRICT), "fldSimple"),
    readings=_both((W, W_STRICT), "rt"),
    hyphens=frozenset(HYPHENS),
    # text moved away is deleted where it was (§ 17.13.5.22), and writers put it in w:t as often as in w:delText
    removed=_both((W, W_STRICT), "del", "moveFrom"),
)
DRAWING = Dialect(
    paragraphs=_both((A, A_STRICT), "p"),
    texts=_both((A, A_STRICT), "t"),
    joints={f"{A}br": "\n", f"{A_STRICT}br": "\n"},
    run_parents=_both((A, A_STRICT), "r"),
    fields=_both((A, A_STRICT), "fld"),
)
SPREADSHEET = Dialect(
    paragraphs=frozenset(f"{ns}{name}" for ns in (S, S_STRICT) for name in ("si", "is", "text")),
    texts=frozenset({f"{S}t", f"{S_STRICT}t"}),
    joints={},
    # a plain string's <t> sits in the string itself, a rich one's in its runs (not in <rPh>)
    run_parents=frozenset(f"{ns}{name}" for ns in (S, S_STRICT) for name in ("r", "si", "is", "text")),
    escaped=True,
)
PRESENTATION = "{urn:oasis:names:tc:opendocument:xmlns:presentation:1.0}"
OPENDOCUMENT = Dialect(
    # a presentation's footer (its text shown on every slide that shows the footer) is declared once
    paragraphs=frozenset({f"{TEXT}p", f"{TEXT}h", f"{PRESENTATION}footer-decl", f"{PRESENTATION}header-decl"}),
    texts=frozenset(),
    joints={f"{TEXT}s": " ", f"{TEXT}tab": "\t", f"{TEXT}line-break": "\n"},
    mixed=True,
    inline=frozenset({f"{TEXT}span", f"{TEXT}a", f"{TEXT}ruby", f"{TEXT}ruby-base"}),
    readings=frozenset({f"{TEXT}ruby-text"}),
)
P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
P_STRICT = "{http://purl.oclc.org/ooxml/presentationml/main}"
# an older PowerPoint comment (ECMA-376 Part 1 § 19.4.1): its words are <p:text>'s character data, no runs
PRESENTATION_COMMENT = Dialect(paragraphs=_both((P, P_STRICT), "text"), texts=frozenset(), joints={}, mixed=True)
# read through, but no look of their own: a ruby's base is its sentence's words, as a .docx's is
_UNSTYLED = frozenset({f"{TEXT}ruby", f"{TEXT}ruby-base"})


def _word_attribute(element: etree._Element, name: str) -> str:
    """A WordprocessingML attribute of ``element``, Transitional or Strict ("" where absent)."""
    return element.get(f"{W}{name}") or element.get(f"{W_STRICT}{name}") or ""


def _seen(element: etree._Element) -> str:
    """``element``'s attributes and children but the unseen ones, as a key."""
    attributes = sorted((k, v) for k, v in element.attrib.items() if etree.QName(k).localname not in _UNSEEN)
    children = sorted(
        etree.QName(c).localname + _seen(c)
        for c in element
        if isinstance(c.tag, str) and etree.QName(c).localname not in _UNSEEN
    )
    return f"{attributes}{children}" if attributes or children else ""


@dataclass(frozen=True)
class Paragraph:
    slots: tuple[Slot | Hyphenated, ...]
    unit: Unit
    # per slot: (a field's result is right before it, right after it); the model reads a space
    # there, so the translation's edge next to the field gets its space back (_spaced)
    fields: tuple[tuple[bool, bool], ...] = ()
    readings: tuple[etree._Element, ...] = ()  # text elements of ruby readings, emptied with their words

    def write(self, runs: list[str]) -> None:
        for reading in self.readings:
            reading.text = ""
        fields = self.fields or ((False, False),) * len(self.slots)
        for slot, text, (before, after) in zip(self.slots, runs, fields, strict=True):
            was = slot.get()
            if not text and ((before and was[0].isspace()) or (after and was[-1].isspace())):
                text = " "  # an emptied run between fields (Page [7] of [9]) still parts them
            elif text:
                text = " " + text if before and _spaced(was[0], text[0]) else text
                text = text + " " if after and _spaced(was[-1], text[-1]) else text
            slot.set(text)


def _spaced(was: str, now: str) -> bool:
    """Whether a translated run's edge character ``now`` next to a field is set off by a space:
    where the run had one (``Figure `` [3]), or where a word now meets the field that punctuation
    met (``Figure `` [3] ``: sales`` -> ``Abbildung:`` [3] ``Umsatz``)."""
    return not now.isspace() and (was.isspace() or (now.isalnum() and not was.isalnum()))


class _Fields:
    """The complex fields (``w:fldChar`` begin, instruction, separate, result, end) open at the
    walk's place, innermost last, each as [the start of its instruction, whether it hides the
    text in it: its instruction does, and its result but a link's]; ``hiding`` counts those that
    do, so a paragraph of many nested fields is read in linear time."""

    def __init__(self) -> None:
        self.open: list[list] = []
        self.hiding = 0

    @property
    def hidden(self) -> bool:
        """Text here is a field's instruction or result, not the paragraph's words."""
        return self.hiding > 0

    def char(self, element: etree._Element) -> bool:
        """Follows a ``w:fldChar``; True where a result kept as it is starts (a placeholder)."""
        kind = _word_attribute(element, "fldCharType")
        if kind == "begin":
            self.open.append(["", True])
            self.hiding += 1
        elif kind == "separate" and self.open:
            if _LINK.match(self.open[-1][0]) and self.open[-1][1]:
                self.open[-1][1] = False
                self.hiding -= 1
            return self.hiding == 1 and self.open[-1][1] and not _LINK.match(self.open[-1][0])
        elif kind == "end" and self.open:  # an end without its begin: a field across paragraphs
            self.hiding -= self.open.pop()[1]
        return False

    def instruction(self, element: etree._Element) -> None:
        if self.open and len(self.open[-1][0]) < 64:  # enough to tell a link
            self.open[-1][0] += (element.text or "")[:64]


class _Collector:
    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.slots: list[Slot | Hyphenated] = []
        self.runs: list[str] = []
        self.joints: list[str] = []
        self.styles: list[str] = []
        self.edges: list[tuple[bool, bool]] = []  # Paragraph.fields
        self.pending = ""  # joints seen since the last run
        self.after_field = False  # a field's result since the last run
        self.complex = _Fields()
        self.readings: list[etree._Element] = []
        self.glued = False  # the last run ends in a hyphen element: a text right after it is its word's
        self.leading: list[etree._Element] = []  # hyphen elements with no run before them: the next word's (-5)
        self.words: dict[int, list[etree._Element]] = {}  # a run's index -> its word's glued elements

    def slot(self, slot: Slot) -> None:
        text = slot.get()
        if not text:
            return
        if self.glued and not self.pending:
            self.glue(slot.element)
            return
        self.glued = False
        if self.slots:
            self.joints.append(self.pending)
        self.pending = ""
        self.styles.append(self.style(slot))
        if self.leading:
            slot, self.leading = Hyphenated((*self.leading, slot.element)), []
        self.slots.append(slot)
        self.runs.append(slot.get())
        self.edges.append((self.after_field, False))
        self.after_field = False

    def glue(self, element: etree._Element) -> None:
        """``element`` (a hyphen, or the text after one) is part of the last run's word (appended: one
        ``Hyphenated`` once the paragraph ends, :meth:`done`, not a copy of all before per element)."""
        index = len(self.slots) - 1
        parts = self.words.get(index)
        if parts is None:
            last = self.slots[index]
            parts = self.words[index] = list(last.parts if isinstance(last, Hyphenated) else (last.element,))
        parts.append(element)
        self.runs[index] += HYPHENS[element.tag] if element.tag in HYPHENS else element.text or ""
        self.glued = element.tag in HYPHENS

    def done(self) -> list[Slot | Hyphenated]:
        self.slots[:] = [Hyphenated(tuple(self.words[i])) if i in self.words else s for i, s in enumerate(self.slots)]
        return self.slots

    def field(self) -> None:
        """A field's result, kept as it is: the model reads :data:`FIELD` in its place."""
        self.pending += FIELD
        self.leading = []  # a hyphen before a field is no word's: kept as it is
        self.after_field = True
        if self.edges:
            self.edges[-1] = (self.edges[-1][0], True)

    def style(self, slot: Slot) -> str:
        """How the slot's run looks, as a key ("" plain): its run properties but the unseen ones
        (OOXML), or the spans and links around it (ODF)."""
        if self.dialect.mixed:
            around = slot.element.getparent() if slot.tail else slot.element
            keys = []
            while around is not None and around.tag in self.dialect.inline:
                if around.tag not in _UNSTYLED:
                    keys.append(etree.QName(around).localname + _seen(around))
                around = around.getparent()
            return "".join(keys)
        run = slot.element.getparent()
        props = next((c for c in run if isinstance(c.tag, str) and etree.QName(c).localname == "rPr"), None)
        key = "" if props is None else _seen(props)
        parent = run.getparent()
        return key + (f"link{sorted(parent.attrib.items())}" if parent is not None and parent.tag in HYPERLINK else "")

    def joint(self, element: etree._Element) -> None:
        text = self.dialect.joints[element.tag]
        if element.tag == f"{TEXT}s":  # <text:s text:c="3"/>: three spaces
            count = element.get(f"{TEXT}c", "1")
            text *= int(count) if count.isdigit() and 0 < int(count) < 1000 else 1
        self.pending += text
        self.leading = []  # a hyphen before a tab or break is no word's: kept as it is

    def walk(self, element: etree._Element) -> None:
        d = self.dialect
        if d.mixed:
            self.slot(Slot(element))
        for child in element:
            tag = child.tag
            if tag in d.paragraphs or tag in d.removed or not isinstance(tag, str):  # nested; deleted; comment, PI
                pass
            elif tag in FIELD_CHAR:
                if self.complex.char(child):
                    self.field()
            elif tag in INSTRUCTION:
                self.complex.instruction(child)
            elif tag in d.joints:
                if not self.complex.hidden:
                    self.joint(child)
            elif tag in d.texts:
                if child.getparent().tag in d.run_parents and not self.complex.hidden:
                    self.slot(Slot(child, escaped=d.escaped))
            elif tag in d.hyphens:
                if self.complex.hidden:
                    pass
                elif self.slots and not self.pending:
                    self.glue(child)
                else:  # -5 at a paragraph's start or after a tab: the word after it is the hyphen's
                    self.leading.append(child)
            elif tag in d.readings:
                self.readings += child.iter(*d.texts) if d.texts else [child]  # ODF: the reading is its text
            elif tag in d.fields:
                if _LINK.match(_word_attribute(child, "instr")):
                    self.walk(child)
                elif not self.complex.hidden:
                    self.field()
            elif not d.mixed or tag in d.inline:
                self.walk(child)
            if d.mixed:
                self.slot(Slot(child, tail=True))


def paragraph(element: etree._Element, dialect: Dialect) -> Paragraph | None:
    """The paragraph ``element`` (its own runs: not those of paragraphs inside it), or None when
    it has nothing to translate."""
    collector = _Collector(dialect)
    collector.walk(element)
    if not collector.runs:
        return None
    unit = Unit(tuple(collector.runs), tuple(collector.joints), tuple(collector.styles))
    found = Paragraph(tuple(collector.done()), unit, tuple(collector.edges), tuple(collector.readings))
    return found if unit.text.strip() else None


def paragraphs(root: etree._Element, dialect: Dialect) -> Iterator[tuple[etree._Element, Paragraph]]:
    """The paragraphs of ``root`` (``root`` included) with something to translate, in document
    order, each with its element."""
    for element in root.iter(*dialect.paragraphs):
        found = paragraph(element, dialect)
        if found is not None:
            yield element, found


class ParagraphReader:
    """Collects paragraphs as a streamed part's paragraphs start and end (``archive.parse_xml_stream``):
    at the end of a paragraph not inside another (ODF nests them in frames and notes, OOXML in
    text boxes), it and the paragraphs inside it, in document order; their characters are counted
    as they come (``count``, the file's ``--max-file-chars``), so an inflated part stops at the limit;
    a text box's copy for older readers (``alternate_content``) counts with its twin, not again."""

    def __init__(self, dialect: Dialect, count: Callable[[int], None]) -> None:
        self.dialect, self.count = dialect, count
        self.found: list[Paragraph] = []
        self.elements: list[etree._Element] = []  # each found paragraph's element
        self.fallbacks: list[etree._Element | None] = []  # the mc:Fallback each is inside, if any
        self.depth = 0  # paragraphs open around the parser's position
        self.nested = False  # the open outermost paragraph has paragraphs inside

    def __call__(self, event: str, element: etree._Element) -> None:
        if event == "start":
            self.nested = self.nested or self.depth > 0
            self.depth += 1
            return
        self.depth -= 1
        if self.depth:
            return  # read with the paragraph it is in, in document order
        if self.nested:
            self.nested = False
            found = list(paragraphs(element, self.dialect))
        elif element.text is None and not len(element):
            return  # empty
        else:
            one = paragraph(element, self.dialect)
            found = [(element, one)] if one is not None else []
        for e, p in found:
            fallback = fallback_of(e)
            if fallback is None:
                self.count(len(p.unit.text))
            self.found.append(p)
            self.elements.append(e)
            self.fallbacks.append(fallback)
