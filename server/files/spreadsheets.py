""".xlsx workbooks, by the zip + XML route of ``packages`` (lxml; every entry but the translated
parts written back with the same content, name, order and compression).

What a spreadsheet shows as words is in three places (ECMA-376 Part 1 § 18.4, § 18.3.1.53, § 18.7):

- the shared strings (``xl/sharedStrings.xml``): one ``<si>`` per distinct text of the
  workbook, which every cell holding that text points to, so a text used by many cells is
  translated once; a rich-text string's runs (``<r>`` with ``<rPr>``: bold, colour, font) are
  placed as a .docx paragraph's runs are (``paragraphs``, ``run_placement``);
- inline strings (``<is>`` of a ``t="inlineStr"`` cell) in the worksheets, which some writers
  use instead; a worksheet without one is not parsed (it is only searched for the word; one
  with a table is read up to the table's header row);
- cell comments (the notes Excel shows on hover): the parts ``[Content_Types].xml`` declares
  comments, whatever their names (Excel's ``xl/comments1.xml``, openpyxl's
  ``xl/comments/comment1.xml``).

A string's ``_xHHHH_`` escapes (``_x000D_``: a carriage return) reach the model as the characters
they stand for, and its translation is written back escaped where it must be (``xstring``).

Not translated: formulas (``<f>``), numbers, dates, booleans and errors (``<v>``), a formula's
cached text result (``<v>`` of a ``t="str"`` cell, below), a text with no letter in it (an id
or a year typed as text: the model could only damage it), sheet names and defined names
(``xl/workbook.xml``: formulas refer to sheets by name), a table's header cells (its column
names, which formulas refer to and Excel requires to match the table's part:
``spreadsheet_tables``; other cells showing the same shared string are, and so is a totals row's
label, written in the table's part as well), charts, drawings' text
boxes, headers and footers, and threaded comments (``xl/threadedComments``).

A cached result is what Excel shows until it recalculates the formula, which it does on open
only when ``calcPr`` in ``xl/workbook.xml`` asks (``fullCalcOnLoad``) or an older calculation
engine saved the workbook (``calcId``): so ``=UPPER(A1)`` over a translated A1 shows its text
in the source language until the sheet is recalculated (F9, or an edit of a cell it uses).
``fullCalcOnLoad`` is not set: a formula comparing cells with a text literal of its own
(``=COUNTIF(A:A,"Paid")``) would count the translated cells no more.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Callable, Sequence
from copy import deepcopy as copy_element

from lxml import etree

from . import archive, inline_strings
from .extracted import Characters, Check, Extracted
from .paragraphs import SPREADSHEET, Paragraph, paragraph
from .refusals import FileRefused
from .run_placement import Placement
from .spreadsheet_tables import Edit, Headers, Label, relabel, table_headers

KIND = ".xlsx"
MEDIA_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
SHARED = "xl/sharedStrings.xml"
SHEETS = re.compile(r"xl/worksheets/sheet\d+\.xml")
COMMENTS = re.compile(r"xl/comments\d*\.xml")
_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.{}+xml".format
SHARED_TYPE, COMMENTS_TYPE, SHEET_TYPE = _TYPE("sharedStrings"), _TYPE("comments"), _TYPE("worksheet")
INLINE = b"inlineStr"  # the cell type of an inline string: a worksheet without it has none


def _mentions(package: zipfile.ZipFile, name: str, word: bytes) -> bool:
    """Whether the entry holds ``word``, read in chunks (a word split between two chunks included)."""
    try:
        with package.open(name) as part:
            carried = b""
            while chunk := part.read(archive.CHUNK):
                if word in carried + chunk:
                    return True
                carried = chunk[-len(word) :]
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise FileRefused(f"the {KIND} package's entry {name!r} does not read: {exc}") from None
    return False


class _Strings:
    """Collects the strings of the streamed part ``name`` as each ends, their characters counted as
    they come; ``kept(string, n)``: whether the part's n-th string is left as it is (a table's
    column name); the shared strings that a table's header cells and others show are each kept as
    they were (``copies``) for the header cells when translated; ``labelled``: the translated
    strings that tables' totals rows show as labels, by label."""

    def __init__(self, chars: Characters, name: str, headers: Headers) -> None:
        self.chars, self.kept, self.headers = chars, _kept(name, headers), headers
        self.inline_labels = headers.inline_labels.get(name, {})
        self.found: list[Paragraph] = []
        self.copies: dict[int, etree._Element] = {}
        self.labelled: dict[Label, etree._Element] = {}
        self.seen = 0

    def __call__(self, event: str, element: etree._Element) -> None:
        if event != "end":
            return
        n, self.seen = self.seen, self.seen + 1
        if self.kept(element, n):
            return
        shared = etree.QName(element).localname == "si"
        copy = copy_element(element) if shared and n in self.headers.elsewhere else None
        found = paragraph(element, SPREADSHEET)
        if found is not None and any(ch.isalpha() for ch in found.unit.text):
            self.chars.add(len(found.unit.text))
            self.found.append(found)
            if copy is not None:
                self.copies[n] = copy
            self.labelled |= dict.fromkeys(self.headers.labels.get(n, []) if shared else self._labels(element), element)

    def _labels(self, string: etree._Element) -> list[Label]:
        """The totals row's label an inline string is, if one (its wrapper carries the cell's reference)."""
        cell = string.getparent()
        label = self.inline_labels.get(cell.get("r", "")) if cell is not None else None
        return [label] if label is not None else []


def _shown(string: etree._Element) -> str:
    """A string's text as written (``_xHHHH_`` escapes as they are, as in ``totalsRowLabel``)."""
    return "".join(t.text or "" for t in [*string.iterfind("{*}t"), *string.iterfind("{*}r/{*}t")])


def _parts(package: zipfile.ZipFile, tags: archive.Tags) -> tuple[list[str], list[str]]:
    """(the parts that hold strings, in the zip's order: shared strings, comments, and the
    worksheets that have inline strings; every worksheet)."""
    names = package.namelist()
    if "xl/workbook.xml" not in names:
        raise FileRefused(f"the file is not a valid {KIND}: it has no xl/workbook.xml")
    declared = archive.overrides(package, KIND, tags)  # a part is what its content type says, whatever its name
    wanted, sheets = [], []
    for name in names:
        kind = declared.get(name, "")
        if name == SHARED or COMMENTS.fullmatch(name) or kind in (SHARED_TYPE, COMMENTS_TYPE):
            wanted.append(name)
        elif SHEETS.fullmatch(name) or kind == SHEET_TYPE:
            sheets.append(name)
            if _mentions(package, name, INLINE):
                wanted.append(name)
    return wanted, sheets


def _kept(name: str, headers: Headers) -> Callable[[etree._Element, int], bool]:
    """Which strings of the part ``name`` are tables' column names (``spreadsheet_tables``): the
    n-th ``<si>`` of the shared strings, an inline string by its cell."""
    cells = headers.inline.get(name, set())

    def kept(string: etree._Element, n: int) -> bool:
        if etree.QName(string).localname == "si":
            return n in headers.shared and n not in headers.elsewhere
        cell = string.getparent()
        return etree.QName(string).localname == "is" and cell is not None and cell.get("r") in cells

    return kept


def read_xlsx(data: bytes, max_file_bytes: int, chars: Characters) -> Extracted:
    """The workbook's strings (see the module docstring), each one text, in the zip's order of parts."""
    package = archive.open_zip(data, max_file_bytes, KIND)
    tags = archive.Tags(KIND)
    trees: dict[str, etree._ElementTree | inline_strings.InlineStrings] = {}
    found: list[Paragraph] = []
    wanted, sheets = _parts(package, tags)
    headers = table_headers(package, sheets, tags)
    copies: dict[str, dict[int, etree._Element]] = {}  # shared strings part -> header strings as they were
    labelled: dict[Label, etree._Element] = {}  # a totals row's label -> the string its cell shows
    for name in wanted:
        strings = _Strings(chars, name, headers)
        tree = inline_strings.read(package, name, tags, strings) if name in sheets else None
        if tree is None:
            tree = archive.parse_xml_stream(package, name, KIND, SPREADSHEET.paragraphs, strings, tags)
        if strings.found:
            trees[name] = tree
            found += strings.found
        if strings.copies:
            copies[name] = strings.copies
        labelled |= strings.labelled

    def write(translations: Sequence[str], placement: Placement, check: Check) -> bytes:
        for n, (string, translation) in enumerate(zip(found, translations)):
            if n % 256 == 0:
                check()
            string.write(placement(string.unit, translation))
        edits: dict[str, list[Edit]] = {}
        for name, kept in copies.items():
            if isinstance(strings := trees[name], etree._ElementTree):
                edits = headers.repoint(strings, kept)
        replaced = {}
        for name, tree in trees.items():
            check()
            if isinstance(tree, inline_strings.InlineStrings):
                replaced[name] = tree.write(edits.get(name, []))
            else:
                replaced[name] = archive.serialize_xml(tree)
        for name, made in edits.items():
            if made and name not in trees:
                replaced[name] = inline_strings.splice(archive.read(package, name, KIND), made)
        replaced |= relabel(package, {label: _shown(string) for label, string in labelled.items()})
        return archive.rewrite(package, replaced, KIND, check)

    units = tuple(s.unit for s in found)
    return Extracted(tuple(u.text for u in units), write, media_type=MEDIA_TYPE, units=units)
