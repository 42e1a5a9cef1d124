"""A worksheet's inline strings (``<is>`` of a ``t="inlineStr"`` cell: what openpyxl and pandas
write for every text cell), read and written without building the worksheet's tree.

A worksheet is mostly numbers: a sheet of 60,000 rows of measurements under a row of headings
is 17 MB of XML, 2,000,000 tags and 400 MB as an lxml tree, for a few words. So the sheet is
scanned with expat (no tree; namespaces resolved; a DTD refused, as Excel never writes one),
which gives each ``<is>`` element's byte range; only those elements are parsed (lxml, each with
its cell's reference and the sheet's namespace declarations around it) and only their tags
count against ``archive.MAX_TAGS``. The translated sheet is the original's bytes with each
string's range replaced by its element written again. A sheet not in UTF-8 (never seen: every
writer uses it) is left to the tree route (``None``)."""

from __future__ import annotations

import re
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from xml.parsers import expat

from lxml import etree

from . import archive
from .refusals import FileRefused

KIND = ".xlsx"
_MAIN = ("http://schemas.openxmlformats.org/spreadsheetml/2006/main", "http://purl.oclc.org/ooxml/spreadsheetml/main")
_STRING = frozenset(f"{ns} is" for ns in _MAIN)
_CELL = frozenset(f"{ns} c" for ns in _MAIN)
_ROW = frozenset(f"{ns} row" for ns in _MAIN)
_REFERENCE = re.compile(r"\$?([A-Z]{1,3})\$?([0-9]{1,7})")
_DECLARED = re.compile(rb"""\A(?:\xef\xbb\xbf)?(?:<\?xml[^>]*?encoding\s*=\s*["']([^"']*)["'])?""")
_DECLARATION = re.compile(rb' xmlns(?::([\w.-]+))?="([^"<&]*)"')
_OPTIONS = {"resolve_entities": False, "no_network": True, "load_dtd": False}


@dataclass
class InlineStrings:
    """A worksheet's bytes and its inline strings: ``elements[i]`` (each a child of a wrapper
    carrying its cell's ``r``) stands at bytes ``spans[i]``."""

    data: bytes
    spans: list[tuple[int, int]]
    elements: list[etree._Element]
    namespaces: dict[str, str]  # declared in the sheet around the strings: prefix ("" default) -> URI

    def write(self, edits: Sequence[tuple[int, int, bytes]] = ()) -> bytes:
        """The sheet with its strings written again, and ``edits`` (byte ranges outside them) made."""
        strings = [
            (start, end, self._written(e, self.data[start:end])) for (start, end), e in zip(self.spans, self.elements)
        ]
        return splice(self.data, sorted([*strings, *edits]))

    def _written(self, element: etree._Element, was: bytes) -> bytes:
        """The element as XML, without the namespace declarations lxml adds to it for the ones
        in scope in the sheet (which the string did not have)."""
        text = etree.tostring(element, encoding="UTF-8", with_tail=False)
        first = text.find(b">") + 1

        def inherited(m: re.Match) -> bytes:
            prefix, uri = (m.group(1) or b"").decode(), m.group(2).decode()
            return b"" if self.namespaces.get(prefix) == uri and m.group() not in was else m.group()

        return _DECLARATION.sub(inherited, text[:first]) + text[first:]


def column(letters: str) -> int:
    """A column's number (A: 1) from its letters."""
    n = 0
    for ch in letters:
        n = n * 26 + ord(ch) - 64
    return n


def letters(n: int) -> str:
    """A column's letters from its number."""
    out = ""
    while n:
        n, r = divmod(n - 1, 26)
        out = chr(65 + r) + out
    return out


class Position:
    """Where a worksheet's cells are: ``r`` of a row and of a cell are optional (ECMA-376 Part 1
    § 18.3.1.73, § 18.3.1.4), and one left out is the row after the previous, the column after
    the previous cell's."""

    def __init__(self) -> None:
        self.row, self.column = 0, 0

    def started_row(self, r: str | None) -> None:
        self.row = int(r) if r and r.isdigit() else self.row + 1
        self.column = 0

    def cell(self, r: str | None) -> str:
        """The cell's reference (``A1``), its own if it has one."""
        found = _REFERENCE.fullmatch(r or "")
        self.column = column(found.group(1)) if found else self.column + 1
        return r if r else f"{letters(self.column)}{self.row}"


def splice(data: bytes, edits: Sequence[tuple[int, int, bytes]]) -> bytes:
    """``data`` with each byte range ``start:end`` of ``edits`` (in order, apart) replaced."""
    out, at = [], 0
    for start, end, written in edits:
        out += (data[at:start], written)
        at = end
    out.append(data[at:])
    return b"".join(out)


def utf8(data: bytes) -> bool:
    """Whether a part that starts with ``data`` is in UTF-8 (what every writer uses)."""
    declared = _DECLARED.match(data)
    encoding = declared.group(1) if declared else None
    return not data.startswith((b"\xff\xfe", b"\xfe\xff", b"<\x00", b"\x00<")) and (
        not encoding or encoding.lower().replace(b"_", b"-") == b"utf-8"
    )


class _Scan:
    """The expat handlers: byte ranges of the ``<is>`` elements, their cells, the namespaces declared."""

    def __init__(self, parser: expat.XMLParserType, data: bytes) -> None:
        self.parser, self.data = parser, data
        self.spans: list[tuple[int, int]] = []
        self.cells: list[str] = []
        self.namespaces: dict[str, str] = {}
        self.cell, self.start, self.position = "", -1, Position()

    def declared(self, prefix: str | None, uri: str) -> None:
        self.namespaces.setdefault(prefix or "", uri)

    def started(self, name: str, attributes: dict[str, str]) -> None:
        if name in _ROW:
            self.position.started_row(attributes.get("r"))
        elif name in _CELL:
            self.cell = self.position.cell(attributes.get("r"))
        elif name in _STRING and self.start < 0:
            self.start = self.parser.CurrentByteIndex

    def ended(self, name: str) -> None:
        if name in _STRING and self.start >= 0:
            end = self.data.find(b">", self.start) + 1  # the start tag's end (<is> has no attributes)
            if self.data[end - 2 : end] != b"/>":  # not <is/>: its end tag, where expat is
                end = self.data.find(b">", self.parser.CurrentByteIndex) + 1
            self.spans.append((self.start, end))
            self.cells.append(self.cell)
            self.start = -1

    def doctype(self, *_: object) -> None:
        raise FileRefused(f"the {KIND} package's worksheet declares a DTD (a workbook never does)")


def _scan(data: bytes, name: str) -> _Scan:
    parser = expat.ParserCreate(namespace_separator=" ")
    scan = _Scan(parser, data)
    parser.StartNamespaceDeclHandler = scan.declared
    parser.StartElementHandler = scan.started
    parser.EndElementHandler = scan.ended
    parser.StartDoctypeDeclHandler = scan.doctype
    try:
        parser.Parse(data, True)
    except expat.ExpatError as exc:
        raise FileRefused(f"the {KIND} package's part {name!r} is not well-formed XML: {exc}") from None
    return scan


def read(
    package: zipfile.ZipFile, name: str, tags: archive.Tags, seen: Callable[[str, etree._Element], None]
) -> InlineStrings | None:
    """The worksheet ``name``'s inline strings, ``seen("end", string)`` called for each in order;
    None for a sheet not in UTF-8."""
    data = archive.read(package, name, KIND)
    if not utf8(data):
        return None
    scan = _scan(data, name)
    declarations = b"".join(
        b' xmlns%s="%s"' % (b":" + p.encode() if p else b"", uri.replace("&", "&amp;").replace('"', "&quot;").encode())
        for p, uri in scan.namespaces.items()
    )
    parser = etree.XMLParser(**_OPTIONS)
    elements = []
    for (start, end), cell in zip(scan.spans, scan.cells):
        fragment = data[start:end]
        tags.add(fragment)
        reference = cell.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").encode()
        try:
            wrapper = etree.fromstring(b'<cell r="%s"%s>%s</cell>' % (reference, declarations, fragment), parser)
        except etree.XMLSyntaxError as exc:
            raise FileRefused(f"the {KIND} package's part {name!r} is not well-formed XML: {exc}") from None
        etree.cleanup_namespaces(wrapper)
        elements.append(wrapper[0])
        seen("end", wrapper[0])
    return InlineStrings(data, scan.spans, elements, scan.namespaces)
