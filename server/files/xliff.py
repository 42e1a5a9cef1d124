"""XLIFF files (.xlf, .xliff): each source segment translated into its target, the rest of the file as it was.

Versions read, by the root's namespace: XLIFF 2.x (``urn:oasis:names:tc:xliff:document:2.0``,
which 2.1 and 2.2 keep; what DeepL reads) and XLIFF 1.2 / 1.1 (``...:document:1.2``, the
version most tools still write; DeepL does not read it). Anything else is refused with a 400.

- 2.x: every ``<segment>`` of a ``<unit>``: its ``<source>`` is one text; its translation goes
  into the segment's ``<target>`` (created after the source where missing) and the segment's
  ``state`` becomes ``translated``; the root's ``trgLang`` is set to the target language.
- 1.2: every ``<trans-unit>`` (in groups too): its ``<source>`` is one text; its translation
  goes into its ``<target>`` (created after the source, or its ``<seg-source>``, where missing)
  with ``xml:lang``; each ``<file>``'s ``target-language`` is set to the target language. A
  unit segmented in its ``<seg-source>`` (``<mrk mtype="seg" mid="N">``: Okapi, memoQ, Trados)
  is translated segment by segment, each into the target's ``<mrk>`` of its ``mid`` (the target
  laid out as the seg-source where it has no such marks).

Which segments are translated is DeepL's rule: those whose state is ``initial`` or unset
(1.2: a target that is missing or empty, or whose ``state`` is ``new`` or
``needs-translation``); a segment already translated, reviewed or final is kept, unless the
file's target language is another than the one asked for: then every segment is translated
and the file's target language changed. A unit (or group, or file) with ``translate="no"`` is
never translated.

Inline elements keep their place as html's inline tags do: the source goes to the service's
html mode with each element that holds translatable text (1.2 ``<g>``, ``<mrk>``; 2.x
``<pc>``, ``<mrk>``) as an inline element around its text, and every other one (``<x/>``,
``<bx/>``, ``<ex/>``, ``<ph>``, ``<bpt>``, ``<ept>``, ``<it>``, ``<sc/>``, ``<ec/>``, a protected or
``translate="no"`` ``<mrk>``, whose content is code, not words) as one void element; the
translation's markup is then turned back into the source's elements, attributes and all.
The file's encoding, its XML declaration, doctype and namespace prefixes are kept (lxml);
entities are not resolved and no DTD is loaded, as for a package's parts (``archive``).
"""

from __future__ import annotations

import copy
import html
import re
from collections.abc import Sequence

from lxml import etree

from attnserve.contract.language_tags import matches, standard

from ..documents import HTML
from . import archive
from .extracted import Characters, Check, Extracted
from .refusals import FileRefused
from .run_placement import Placement
from .slots import xml_text

KIND = ".xliff"
MEDIA_TYPE = "application/xliff+xml"
V1 = ("urn:oasis:names:tc:xliff:document:1.2", "urn:oasis:names:tc:xliff:document:1.1")
V2 = "urn:oasis:names:tc:xliff:document:2.0"
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
PAIRED = frozenset({"g", "mrk", "pc"})  # inline elements whose content is text to translate
PROTECTED = frozenset({"protected"})  # 1.2 mrk types whose content is kept as it is
SEGMENT_MARK = "seg"  # 1.2 <mrk mtype="seg">: a segment of a unit's <seg-source>
TO_DO_V1 = frozenset({"new", "needs-translation"})  # 1.2 target states that ask for a translation
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, remove_blank_text=False)
_STANDALONE = re.compile(r"""standalone\s*=\s*["'](yes|no)["']""")
_MARKUP = re.compile(r"<b id=(\d+)>|</b>|<img id=(\d+)>")


def _paired(element: etree._Element) -> bool:
    if not isinstance(element.tag, str) or etree.QName(element).localname not in PAIRED:
        return False
    return element.get("translate") != "no" and element.get("mtype") not in PROTECTED


class Segment:
    """One source and where its translation goes: the source as html for the service (:attr:`text`),
    the inline elements it numbered, and the element its target is written into."""

    def __init__(self, source: etree._Element, place: etree._Element, after: etree._Element) -> None:
        self.source, self.place, self.after = source, place, after  # target's parent, the element it follows
        self.inline: list[etree._Element] = []
        self.plain: list[str] = []
        self.text = self._html(source)

    def _html(self, element: etree._Element) -> str:
        out = [self._escape(element.text)]
        for child in element:
            n = len(self.inline)
            self.inline.append(child)
            out.append(f"<b id={n}>{self._html(child)}</b>" if _paired(child) else f"<img id={n}>")
            out.append(self._escape(child.tail))
        return "".join(out)

    def _escape(self, text: str | None) -> str:
        self.plain.append(text or "")
        return html.escape(text or "", quote=False)

    @property
    def characters(self) -> int:
        return sum(map(len, self.plain))

    def holder(self, target: etree._Element) -> etree._Element:
        """The element that says the target's language and state: the target itself."""
        return target

    def target(self) -> etree._Element:
        """The segment's target, its content emptied and its attributes kept (created after
        ``after``, indented as it is, where it has none)."""
        tag = etree.QName(self.source).namespace
        name = f"{{{tag}}}target" if tag else "target"
        found = self.place.find(name)
        if found is None:
            found, tail = etree.Element(name), self.after.tail
            before = self.after.getprevious()
            indent = self.place.text if before is None else before.tail  # what the source is indented by
            self.after.addnext(found)
            self.after.tail, found.tail = (indent if indent and not indent.strip() else tail), tail
        found.text = None
        for child in list(found):
            found.remove(child)
        return found

    def write(self, translation: str, target: etree._Element) -> None:
        """``translation`` (the html mode's) as ``target``'s content, its markup back as the
        source's inline elements (a void one copied whole, a paired one with its new content)."""
        open_ = [target]
        last: etree._Element | None = None  # the element whose tail text goes to next
        at = 0

        def text(part: str) -> None:
            part = xml_text(html.unescape(part))
            if not part:
                return
            if last is None:
                open_[-1].text = (open_[-1].text or "") + part
            else:
                last.tail = (last.tail or "") + part

        for m in _MARKUP.finditer(translation):
            text(translation[at : m.start()])
            at = m.end()
            if m.group() == "</b>":
                if len(open_) > 1:
                    last = open_.pop()
                continue
            n = int(m.group(1) or m.group(2))
            if n >= len(self.inline):
                continue
            original = self.inline[n]
            if m.group(1) is not None:
                made = etree.SubElement(open_[-1], original.tag, dict(original.attrib))
                open_.append(made)
                last = None
            else:
                made = copy.deepcopy(original)
                made.tail = None
                open_[-1].append(made)
                last = made
        text(translation[at:])


def _parse(data: bytes) -> etree._ElementTree:
    archive.Tags(KIND).add(data)  # at most MAX_TAGS tags: a file of a million placeholders is not parsed
    try:
        return etree.fromstring(data, _PARSER).getroottree()
    except etree.XMLSyntaxError as exc:
        raise FileRefused(f"the file is not a valid XLIFF file (not well-formed XML: {exc})") from None


def _serialized(tree: etree._ElementTree, data: bytes) -> bytes:
    """The tree in the file's encoding, with an XML declaration saying standalone only where the file's did."""
    encoding = tree.docinfo.encoding or "UTF-8"
    head = data[:512].decode(encoding, errors="ignore")
    said = _STANDALONE.search(head.split("?>", 1)[0]) if head.lstrip("\ufeff").startswith("<?xml") else None
    standalone = None if said is None else said.group(1) == "yes"
    return etree.tostring(tree, xml_declaration=True, encoding=encoding, standalone=standalone)


class MarkedSegment(Segment):
    """A 1.2 ``<seg-source>``'s segment (``<mrk mtype="seg" mid="N">``: how Okapi, memoQ and Trados
    segment a unit), translated into the target's ``<mrk>`` of the same ``mid``; a target without
    them is laid out as the seg-source first (its marks emptied), so the tool that segmented the
    file reads its segments back."""

    def holder(self, target: etree._Element) -> etree._Element:
        return next((a for a in target.iterancestors() if etree.QName(a).localname == "target"), target)

    def target(self) -> etree._Element:
        name = etree.QName(self.after).namespace
        found = self.place.find(f"{{{name}}}target" if name else "target")
        unit_target = found if found is not None else super().target()
        marks = [m for m in unit_target.iter(self.source.tag) if m.get("mtype") == SEGMENT_MARK]
        if not marks:  # laid out as the seg-source, each segment's mark empty
            unit_target.text = self.after.text
            for child in list(unit_target):
                unit_target.remove(child)
            for child in self.after:
                unit_target.append(copy.deepcopy(child))
            marks = [m for m in unit_target.iter(self.source.tag) if m.get("mtype") == SEGMENT_MARK]
            for mark in marks:
                mark.text = None
                for inner in list(mark):
                    mark.remove(inner)
        mark = next((m for m in marks if m.get("mid") == self.source.get("mid")), None)
        if mark is None:
            mark = etree.SubElement(
                unit_target, self.source.tag, {"mtype": SEGMENT_MARK, "mid": self.source.get("mid", "")}
            )
        mark.text = None
        for inner in list(mark):
            mark.remove(inner)
        return mark


def _skipped(element: etree._Element) -> bool:
    """Whether the nearest ``translate`` of the element and its ancestors says no."""
    for around in (element, *element.iterancestors()):
        said = around.get("translate")
        if said is not None:
            return said.strip().lower() == "no"
    return False


def _same(target: str, declared: str | None) -> bool:
    """Whether the file's declared target language is the one asked for (no target asked: yes)."""
    return not target or bool(declared and matches(target, [declared]))


def _segments_v2(root: etree._Element, target: str) -> list[Segment]:
    again = not _same(target, root.get("trgLang"))
    found = []
    for segment in root.iter(f"{{{V2}}}segment"):
        source = segment.find(f"{{{V2}}}source")
        if source is None or _skipped(segment):
            continue
        if again or segment.get("state", "initial") == "initial":
            found.append(Segment(source, segment, source))
    return found


def _segments_v1(root: etree._Element, ns: str, target: str) -> list[Segment]:
    found = []
    for file in root.iter(f"{{{ns}}}file" if ns else "file"):
        again = not _same(target, file.get("target-language"))
        for unit in file.iter(f"{{{ns}}}trans-unit" if ns else "trans-unit"):
            source = unit.find(f"{{{ns}}}source" if ns else "source")
            if source is None or _skipped(unit):
                continue
            done = unit.find(f"{{{ns}}}target" if ns else "target")
            empty = done is None or not "".join(done.itertext()).strip()
            if again or empty or done.get("state") in TO_DO_V1:
                after = unit.find(f"{{{ns}}}seg-source" if ns else "seg-source")
                marks = [] if after is None else [m for m in after.iter(f"{{{ns}}}mrk" if ns else "mrk")]
                marks = [m for m in marks if m.get("mtype") == SEGMENT_MARK]
                if marks:
                    found += (MarkedSegment(mark, unit, after) for mark in marks)
                else:
                    found.append(Segment(source, unit, source if after is None else after))
    return found


def read_xliff(data: bytes, max_file_bytes: int, chars: Characters, target_language: str = "") -> Extracted:
    """The file's source segments to translate (see the module docstring), each one text in the html mode."""
    tree = _parse(data)
    root = tree.getroot()
    ns = etree.QName(root).namespace or ""
    if etree.QName(root).localname != "xliff" or not (
        ns in (*V1, V2) or (not ns and root.get("version", "")[:2] == "1.")
    ):
        raise FileRefused("the file is not an XLIFF file this server reads: XLIFF 1.2 or 2.x (an <xliff> root)")
    segments = _segments_v2(root, target_language) if ns == V2 else _segments_v1(root, ns, target_language)
    segments = [s for s in segments if "".join(s.plain).strip()]
    for segment in segments:
        chars.add(segment.characters)
    tag = (standard(target_language) or target_language) if target_language else ""

    def write(translations: Sequence[str], placement: Placement, check: Check) -> bytes:
        if tag and ns == V2:
            root.set("trgLang", tag)
        elif tag:
            for file in root.iter(f"{{{ns}}}file" if ns else "file"):
                file.set("target-language", tag)
        for n, (segment, translation) in enumerate(zip(segments, translations)):
            if n % 256 == 0:
                check()
            target = segment.target()
            holder = segment.holder(target)
            if tag and (ns != V2 or holder.get(XML_LANG) is not None):
                holder.set(XML_LANG, tag)
            (segment.place if ns == V2 else holder).set("state", "translated")
            segment.write(translation, target)
        return _serialized(tree, data)

    texts = tuple(s.text for s in segments)
    return Extracted(texts, write, HTML, f"{MEDIA_TYPE}; charset={tree.docinfo.encoding or 'UTF-8'}")
