"""The header cells of an .xlsx workbook's tables (Excel's "Format as Table", ECMA-376 Part 1
§ 18.5): their text is the table's column names, which ``xl/tables/tableN.xml`` repeats
(``<tableColumn name=...>``) and formulas refer to (``=SUM(Sales[Amount])``). Excel requires
the two to match: a header cell whose text no longer equals its column's name makes Excel
report the workbook as damaged and "repair" it. So, as sheet and defined names, they are
not translated: this module finds which strings they show, by the worksheets' relationships
to their table parts, each table's range, and the header row's cells (a worksheet is read
only up to its tables' last header or totals row; a cell without its reference, ``r``, is placed as
``inline_strings.Position`` says). Those parts' tags count against the package's
``archive.MAX_TAGS``, as its text parts' do.

A header's text is a shared string other cells may show too ("Total" as a column name and as a
label further down): those cells are translated, and the header cells are given a copy of the
string as it was, appended to the shared strings (``count`` unchanged: as many cells point into
them; ``uniqueCount`` one more), so only the header cells' ``<v>`` change in the worksheets. That
takes every worksheet read through once more (expat, no tree: its tags are not counted, as a
sheet's numbers are not by ``inline_strings``), only when a header is a shared string; a header
cell in a worksheet not in UTF-8 (never seen) keeps its string untranslated.

A totals row's label (``totalsRowLabel`` of a column, shown in its cell of the table's last row,
§ 18.5.1.3) is any text, as long as part and cell agree: the cell is translated, and its
translation written in the table part (``relabel``)."""

from __future__ import annotations

import bisect
import contextlib
import posixpath
import re
import zipfile
from copy import deepcopy
from dataclasses import dataclass, field
from xml.parsers import expat

from lxml import etree

from . import archive, inline_strings
from .refusals import FileRefused

KIND = ".xlsx"
_NAMESPACES = (
    "http://schemas.openxmlformats.org/spreadsheetml/2006/main",
    "http://purl.oclc.org/ooxml/spreadsheetml/main",
)
_TABLE_RELATION = re.compile(r".*/relationships/table")
_PR = "{http://schemas.openxmlformats.org/package/2006/relationships}"
_CELL = re.compile(r"\$?([A-Z]{1,3})\$?([0-9]{1,7})")
_C = frozenset(f"{ns} c" for ns in _NAMESPACES)
_V = frozenset(f"{ns} v" for ns in _NAMESPACES)
_ROW = frozenset(f"{ns} row" for ns in _NAMESPACES)
Edit = tuple[int, int, bytes]  # bytes start:end of a part replaced
_SCANNED = frozenset(f"{{{ns}}}{name}" for ns in _NAMESPACES for name in ("c", "row"))


Label = tuple[str, int]  # a totals row's label: the table part, its column's position in it
Row = tuple[int, int, int]  # a table's header row: its row, first and last column


@dataclass
class Headers:
    """The strings table header cells show: shared strings by index, inline strings by worksheet
    and cell reference (``A1``)."""

    shared: set[int] = field(default_factory=set)
    inline: dict[str, set[str]] = field(default_factory=dict)
    cells: dict[str, _Cells] = field(default_factory=dict)  # worksheet -> its header cells
    elsewhere: set[int] = field(default_factory=set)  # of ``shared``, those other cells show too
    # worksheet -> (start, end, string) of the value (``<v>``) of each header cell showing one of ``elsewhere``
    values: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)
    # the totals rows' label cells: shared string -> its labels; worksheet -> cell -> its label
    labels: dict[int, list[Label]] = field(default_factory=dict)
    inline_labels: dict[str, dict[str, Label]] = field(default_factory=dict)

    def repoint(self, strings: etree._ElementTree, copies: dict[int, etree._Element]) -> dict[str, list[Edit]]:
        """Appends ``copies`` (shared string -> a copy of it as it was) to the shared strings, and
        gives the byte edits that point each worksheet's header cells to them."""
        root = strings.getroot()
        moved = {}
        for n, copy in sorted(copies.items()):
            moved[n] = sum(1 for _ in root.iterchildren("{*}si"))
            root.append(deepcopy(copy))  # a copy again: a second write appends its own
        if moved and root.get("uniqueCount") is not None:
            root.set("uniqueCount", str(sum(1 for _ in root.iterchildren("{*}si"))))
        return {
            sheet: [(start, end, str(moved[n]).encode()) for start, end, n in values if n in moved]
            for sheet, values in self.values.items()
        }


class _Cells:
    """A worksheet's header rows as column ranges, each row's merged and sorted: a table is a few
    numbers whatever its width (its cells' references, 16,384 a row, made 300 tables of a 66 KB
    workbook 700 MB and 16 s), and a cell is looked up by bisection among its row's ranges."""

    def __init__(self, rows: list[Row]) -> None:
        spans: dict[int, list[tuple[int, int]]] = {}
        for row, first, last in sorted(rows):
            merged = spans.setdefault(row, [])
            if merged and first <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], last))
            else:
                merged.append((first, last))
        self.starts = {row: [a for a, _ in merged] for row, merged in spans.items()}
        self.ends = {row: [b for _, b in merged] for row, merged in spans.items()}
        self.last = max(spans, default=0)

    def __bool__(self) -> bool:
        return bool(self.starts)

    def __contains__(self, reference: object) -> bool:
        cell = _CELL.fullmatch(reference) if isinstance(reference, str) else None
        starts = self.starts.get(int(cell.group(2))) if cell else None
        if not cell or not starts:
            return False
        column = inline_strings.column(cell.group(1))
        at = bisect.bisect_right(starts, column) - 1
        return at >= 0 and column <= self.ends[int(cell.group(2))][at]


def _cells(package: zipfile.ZipFile, table: str, tags: archive.Tags) -> tuple[Row | None, dict[str, Label]]:
    """The table part's header row (None without one), and the cell references of its totals
    row's labels (``totalsRowLabel`` of a column without a ``totalsRowFunction``)."""
    root = archive.parse_xml(archive.read(package, table, KIND), table, KIND, tags).getroot()
    first, _, last = root.get("ref", "").partition(":")
    start, end = _CELL.fullmatch(first), _CELL.fullmatch(last or first)
    if start is None or end is None:
        return None, {}
    columns = range(inline_strings.column(start.group(1)), inline_strings.column(end.group(1)) + 1)
    if not columns or len(columns) > 16384:
        return None, {}
    header = (int(start.group(2)), columns[0], columns[-1]) if root.get("headerRowCount", "1") != "0" else None
    labels = {}  # by reference: one a <tableColumn>, whose tags count
    if root.get("totalsRowCount", "0") == "1":  # the last row of the table's range
        for n, column in enumerate(root.iterfind("{*}tableColumns/{*}tableColumn")):
            if n < len(columns) and column.get("totalsRowLabel") and column.get("totalsRowFunction", "none") == "none":
                labels[f"{inline_strings.letters(columns[n])}{end.group(2)}"] = (table, n)
    return header, labels


def relabel(package: zipfile.ZipFile, labels: dict[Label, str]) -> dict[str, bytes]:
    """The table parts with each label's ``totalsRowLabel`` the text its cell now shows (Excel
    shows the one and keeps the other, as a header cell and its column's name)."""
    parts = {}
    for table in sorted({table for table, _ in labels}):
        tree = archive.parse_xml(archive.read(package, table, KIND), table, KIND)
        columns = list(tree.getroot().iterfind("{*}tableColumns/{*}tableColumn"))
        for (part, n), text in labels.items():
            if part == table:
                columns[n].set("totalsRowLabel", text)
        parts[table] = archive.serialize_xml(tree)
    return parts


def _tables(package: zipfile.ZipFile, sheet: str, names: set[str], tags: archive.Tags) -> set[str]:
    """The table parts (of the package's ``names``) the worksheet's relationships name."""
    rels = posixpath.join(posixpath.dirname(sheet), "_rels", posixpath.basename(sheet) + ".rels")
    if rels not in names:
        return set()
    root = archive.parse_xml(archive.read(package, rels, KIND), rels, KIND, tags).getroot()
    found = set()
    for relation in root.iter(f"{_PR}Relationship"):
        if _TABLE_RELATION.fullmatch(relation.get("Type", "")) and relation.get("TargetMode") != "External":
            target = relation.get("Target", "")
            name = target.lstrip("/") if target.startswith("/") else posixpath.join(posixpath.dirname(sheet), target)
            name = posixpath.normpath(name)
            if name in names:
                found.add(name)
    return found


class _Rows:
    """A worksheet's tags counted in the package's ``tags`` down to its tables' last header row;
    below it, on the way to a totals row, only those since the last row ended (each row cleared and
    let go with its predecessors at its end), so a table of a million number rows over its totals
    row is read, and a part stuffed between two rows is refused as one stuffed above the headers."""

    def __init__(self, tags: archive.Tags) -> None:
        self.tags, self.below, self.since = tags, False, 0

    def add(self, chunk: bytes) -> None:
        if not self.below:
            self.tags.add(chunk)
            return
        self.since += chunk.count(b"<")
        if self.since > self.tags.limit:
            raise FileRefused(self.tags.refusal)


class _Done(Exception):
    """The worksheet's tables' last header or totals row has ended: the rest of it is not read."""


def _scan(
    package: zipfile.ZipFile, sheet: str, cells: _Cells, labels: dict[str, Label], headers: Headers, tags: archive.Tags
) -> None:
    """Records what the worksheet's header ``cells`` and totals ``labels`` show, reading it up to
    the last of their rows, its tags counted in ``tags`` (``_Rows``)."""
    last = max([cells.last, *(int(_CELL.fullmatch(c).group(2)) for c in labels)])  # type: ignore[union-attr]
    position, cell, rows = inline_strings.Position(), "", _Rows(tags)

    def seen(event: str, element: etree._Element) -> None:
        nonlocal cell
        row = etree.QName(element).localname == "row"
        if event == "start":
            if row:
                position.started_row(element.get("r"))
            else:
                cell = position.cell(element.get("r"))
        elif row:
            if position.row >= last:
                raise _Done
            element.clear()
            if position.row >= cells.last:  # below the header rows: the rows before let go
                rows.below, rows.since = True, 0
                while element.getprevious() is not None:
                    del element.getparent()[0]
        elif cell in labels:
            kind, value, label = element.get("t"), element.findtext("{*}v"), labels[cell]
            if kind == "s" and value is not None and value.strip().isdigit():
                headers.labels.setdefault(int(value), []).append(label)
            elif kind == "inlineStr":
                headers.inline_labels.setdefault(sheet, {})[cell] = label
        elif cell in cells:
            kind, value = element.get("t"), element.findtext("{*}v")
            if kind == "s" and value is not None and value.strip().isdigit():
                headers.shared.add(int(value))
            elif kind == "inlineStr":
                headers.inline.setdefault(sheet, set()).add(cell)

    with contextlib.suppress(_Done):
        archive.parse_xml_stream(package, sheet, KIND, _SCANNED, seen, rows)  # type: ignore[arg-type]


class _Uses:
    """The expat handlers that find which cells point to a header's shared string: the header
    cells (their ``<v>``'s byte range) and the others."""

    def __init__(self, parser: expat.XMLParserType, sheet: str, headers: Headers) -> None:
        self.parser, self.headers, self.cells = parser, headers, headers.cells.get(sheet, _Cells([]))
        self.values = headers.values.setdefault(sheet, [])
        self.shared, self.reading, self.cell, self.start = False, False, "", -1
        self.text: list[str] = []
        self.position = inline_strings.Position()

    def started(self, name: str, attributes: dict[str, str]) -> None:
        if name in _ROW:
            self.position.started_row(attributes.get("r"))
        elif name in _C:
            self.shared, self.cell = attributes.get("t") == "s", self.position.cell(attributes.get("r"))
        elif name in _V and self.shared:
            self.reading, self.start, self.text = True, -1, []

    def characters(self, text: str) -> None:
        if self.reading:
            if self.start < 0:
                self.start = self.parser.CurrentByteIndex
            self.text.append(text)

    def ended(self, name: str) -> None:
        if name not in _V or not self.reading:
            return
        self.reading, value = False, "".join(self.text).strip()
        n = int(value) if value.isdigit() else -1
        if n in self.headers.shared:
            if self.cell in self.cells:
                self.values.append((self.start, self.parser.CurrentByteIndex, n))
            else:
                self.headers.elsewhere.add(n)

    def doctype(self, *_: object) -> None:
        raise FileRefused(f"the {KIND} package's worksheet declares a DTD (a workbook never does)")


def _uses(package: zipfile.ZipFile, sheet: str, headers: Headers) -> bool:
    """Records which cells of the worksheet point to the headers' shared strings; False for a
    worksheet not in UTF-8 (whose header cells cannot be pointed elsewhere byte by byte)."""
    parser = expat.ParserCreate(namespace_separator=" ")
    uses = _Uses(parser, sheet, headers)
    parser.StartElementHandler, parser.EndElementHandler = uses.started, uses.ended
    parser.CharacterDataHandler, parser.StartDoctypeDeclHandler = uses.characters, uses.doctype
    try:
        with package.open(sheet) as part:
            chunk = part.read(archive.CHUNK)
            if not inline_strings.utf8(chunk):
                return False
            while chunk:
                parser.Parse(chunk, False)
                chunk = part.read(archive.CHUNK)
            parser.Parse(b"", True)
    except expat.ExpatError as exc:
        raise FileRefused(f"the {KIND} package's part {sheet!r} is not well-formed XML: {exc}") from None
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise FileRefused(f"the {KIND} package's entry {sheet!r} does not read: {exc}") from None
    return True


def table_headers(package: zipfile.ZipFile, sheets: list[str], tags: archive.Tags) -> Headers:
    """What the header cells of the tables of ``sheets`` (worksheet part names) show; the parts
    read for it (relationships, tables, worksheets up to their last header or totals row) count
    in ``tags``."""
    headers, names = Headers(), set(package.namelist())
    for sheet in sheets:
        found = [_cells(package, table, tags) for table in sorted(_tables(package, sheet, names, tags))]
        cells = _Cells([row for row, _ in found if row is not None])
        labels = {cell: label for _, labels in found for cell, label in labels.items()}
        if cells:
            headers.cells[sheet] = cells
        if cells or labels:
            _scan(package, sheet, cells, labels, headers, tags)
    if headers.shared:
        pinned = set()  # the strings of header cells in a worksheet not in UTF-8
        for sheet in sheets:
            if not _uses(package, sheet, headers):
                pinned |= {n for _, _, n in headers.values.pop(sheet, [])}
                if sheet in headers.cells:
                    pinned |= headers.shared  # its header cells' strings, unknown: the scan stopped
        headers.elsewhere -= pinned
    return headers
