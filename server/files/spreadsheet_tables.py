"""The header cells of an .xlsx workbook's tables (Excel's "Format as Table", ECMA-376 Part 1
§ 18.5): their text is the table's column names, which ``xl/tables/tableN.xml`` repeats
(``<tableColumn name=...>``) and formulas refer to (``=SUM(Sales[Amount])``). Excel requires
the two to match: a header cell whose text no longer equals its column's name makes Excel
report the workbook as damaged and "repair" it. So, as sheet and defined names, they are
not translated: this module finds which strings they show, by the worksheets' relationships
to their table parts, each table's range, and the header row's cells (a worksheet is read
only up to its tables' last header row)."""

from __future__ import annotations

import posixpath
import re
import zipfile
from dataclasses import dataclass, field

from lxml import etree

from . import archive
from .refusals import FileRefused

KIND = ".xlsx"
_NAMESPACES = (
    "http://schemas.openxmlformats.org/spreadsheetml/2006/main",
    "http://purl.oclc.org/ooxml/spreadsheetml/main",
)
_TABLE_RELATION = re.compile(r".*/relationships/table")
_PR = "{http://schemas.openxmlformats.org/package/2006/relationships}"
_CELL = re.compile(r"\$?([A-Z]{1,3})\$?([0-9]{1,7})")
_OPTIONS = {"resolve_entities": False, "no_network": True, "load_dtd": False, "huge_tree": False}


@dataclass
class Headers:
    """The strings table header cells show: shared strings by index, inline strings by worksheet
    and cell reference (``A1``)."""

    shared: set[int] = field(default_factory=set)
    inline: dict[str, set[str]] = field(default_factory=dict)


def _column(letters: str) -> int:
    n = 0
    for ch in letters:
        n = n * 26 + ord(ch) - 64
    return n


def _letters(n: int) -> str:
    out = ""
    while n:
        n, r = divmod(n - 1, 26)
        out = chr(65 + r) + out
    return out


def _header_cells(package: zipfile.ZipFile, table: str) -> set[str]:
    """The cell references of the table part's header row ("" for none)."""
    root = archive.parse_xml(archive.read(package, table, KIND), table, KIND).getroot()
    if root.get("headerRowCount", "1") == "0":
        return set()
    first, _, last = root.get("ref", "").partition(":")
    start, end = _CELL.fullmatch(first), _CELL.fullmatch(last or first)
    if start is None or end is None:
        return set()
    row, columns = start.group(2), range(_column(start.group(1)), _column(end.group(1)) + 1)
    return {f"{_letters(c)}{row}" for c in columns} if len(columns) <= 16384 else set()


def _tables(package: zipfile.ZipFile, sheet: str) -> list[str]:
    """The table parts the worksheet's relationships name."""
    rels = posixpath.join(posixpath.dirname(sheet), "_rels", posixpath.basename(sheet) + ".rels")
    if rels not in package.namelist():
        return []
    root = archive.parse_xml(archive.read(package, rels, KIND), rels, KIND).getroot()
    found = []
    for relation in root.iter(f"{_PR}Relationship"):
        if _TABLE_RELATION.fullmatch(relation.get("Type", "")) and relation.get("TargetMode") != "External":
            target = relation.get("Target", "")
            name = target.lstrip("/") if target.startswith("/") else posixpath.join(posixpath.dirname(sheet), target)
            name = posixpath.normpath(name)
            if name in package.namelist():
                found.append(name)
    return found


def _scan(package: zipfile.ZipFile, sheet: str, cells: set[str], headers: Headers) -> None:
    """Records what the worksheet's ``cells`` show, reading it up to the last of their rows."""
    last = max(int(_CELL.fullmatch(c).group(2)) for c in cells)  # type: ignore[union-attr]
    tags = [f"{{{ns}}}{name}" for ns in _NAMESPACES for name in ("c", "row")]
    try:
        with package.open(sheet) as part:
            for _, element in etree.iterparse(part, events=("end",), tag=tags, **_OPTIONS):
                if etree.QName(element).localname == "row":
                    row = element.get("r", "")
                    if row.isdigit() and int(row) >= last:
                        return
                    element.clear()
                elif element.get("r") in cells:
                    kind, value = element.get("t"), element.findtext("{*}v")
                    if kind == "s" and value is not None and value.strip().isdigit():
                        headers.shared.add(int(value))
                    elif kind == "inlineStr":
                        headers.inline.setdefault(sheet, set()).add(element.get("r"))
    except etree.XMLSyntaxError as exc:
        raise FileRefused(f"the {KIND} package's part {sheet!r} is not well-formed XML: {exc}") from None
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise FileRefused(f"the {KIND} package's entry {sheet!r} does not read: {exc}") from None


def table_headers(package: zipfile.ZipFile, sheets: list[str]) -> Headers:
    """What the header cells of the tables of ``sheets`` (worksheet part names) show."""
    headers = Headers()
    for sheet in sheets:
        cells = set().union(*(_header_cells(package, table) for table in _tables(package, sheet)))
        if cells:
            _scan(package, sheet, cells, headers)
    return headers
