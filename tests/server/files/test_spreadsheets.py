""".xlsx workbooks without a model (``server/files/spreadsheets.py``): the cells' text is translated
(shared strings once, rich-text runs with their formatting, inline strings, comments), formulas,
numbers, booleans, cached formula results and sheet names are not, and the workbook opens in
openpyxl with every other entry as it was. The "translation" swaps the case of every letter."""

from __future__ import annotations

import io
import re
import zipfile

import openpyxl
import pytest
from lxml import etree
from openpyxl.cell.rich_text import CellRichText, TextBlock
from openpyxl.cell.text import InlineFont
from openpyxl.comments import Comment
from openpyxl.worksheet.table import Table

from attnserve.server import files
from attnserve.server.files import FileRefused, TooManyCharacters, archive
from tests.support import localization_files as sheets
from tests.support import office_files as office

LIMIT = 1 << 20
CELLS = (
    '<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1" t="s"><v>1</v></c><c r="C1" t="s"><v>0</v></c></row>'
    '<row r="2"><c r="A2"><v>1234.5</v></c><c r="B2" t="b"><v>1</v></c><c r="C2" t="s"><v>2</v></c></row>'
    '<row r="3"><c r="A3" t="str"><f>UPPER(A1)</f><v>QUARTERLY SALES</v></c>'
    '<c r="B3"><f>SUM(A2:A2)</f><v>1234.5</v></c><c r="C3" t="s"><v>3</v></c></row>'
    '<row r="4"><c r="A4" t="inlineStr"><is><t>Open the report</t></is></c></row>'
)
SHARED = ["Quarterly sales", [("Total for ", False), ("March", True), (" only", False)], "2025", "Notes here"]


def swapped(extracted: files.Extracted) -> bytes:
    return extracted.write([t.swapcase() for t in extracted.texts])


def workbook(data: bytes) -> openpyxl.Workbook:
    return openpyxl.load_workbook(io.BytesIO(data), rich_text=True)


def test_cells_strings_are_translated_and_formulas_numbers_and_sheet_names_are_not():
    data = sheets.xlsx(SHARED, CELLS, comment="Check the totals")
    extracted = files.read("sales.xlsx", data, LIMIT)
    # in the zip's order of parts; each shared string once though two cells show it; "2025" typed
    # as text is no words to translate
    assert extracted.texts == (
        "Open the report", "Quarterly sales", "Total for March only", "Notes here", "Check the totals"
    )  # fmt: skip
    out = swapped(extracted)
    book = workbook(out)
    assert book.sheetnames == [sheets.SHEET_NAME]
    sheet = book[sheets.SHEET_NAME]
    assert sheet["A1"].value == sheet["C1"].value == "qUARTERLY SALES"
    assert sheet["A2"].value == 1234.5 and sheet["B2"].value is True and sheet["C2"].value == "2025"
    assert sheet["A3"].value == "=UPPER(A1)" and sheet["B3"].value == "=SUM(A2:A2)"
    assert sheet["C3"].value == "nOTES HERE" and sheet["A4"].value == "oPEN THE REPORT"
    assert sheet["A1"].comment.text == "cHECK THE TOTALS"
    with zipfile.ZipFile(io.BytesIO(out)) as package:
        assert b"<v>QUARTERLY SALES</v>" in package.read("xl/worksheets/sheet1.xml")  # the cached result
    before, after = office_entries(data), office_entries(out)
    assert list(after) == list(before)
    changed = {"xl/sharedStrings.xml", "xl/worksheets/sheet1.xml", "xl/comments1.xml"}
    assert {n: d for n, d in after.items() if n not in changed} == {n: d for n, d in before.items() if n not in changed}


def office_entries(data: bytes) -> dict[str, tuple[bytes, int]]:
    with zipfile.ZipFile(io.BytesIO(data)) as package:
        return {i.filename: (package.read(i), i.compress_type) for i in package.infolist()}


def test_a_rich_text_cell_keeps_its_runs_and_their_formatting():
    out = swapped(files.read("sales.xlsx", sheets.xlsx(SHARED, CELLS), LIMIT))
    rich = workbook(out)[sheets.SHEET_NAME]["B1"].value
    assert isinstance(rich, CellRichText)
    assert [(str(b.text), b.font.b) if isinstance(b, TextBlock) else (b, None) for b in rich] == [
        ("tOTAL FOR ", False),
        ("mARCH ", True),
        ("ONLY", False),
    ]


def test_a_workbook_written_by_openpyxl_with_inline_strings_reopens_translated():
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Budget"
    sheet["A1"] = "Travel costs"
    sheet["A2"] = 12
    sheet["A3"] = "=A2*2"
    sheet["B1"] = CellRichText(["Paid ", TextBlock(InlineFont(b=True), "late"), " again"])
    sent = io.BytesIO()
    book.save(sent)
    out = swapped(files.read("budget.xlsx", sent.getvalue(), LIMIT))
    again = workbook(out)["Budget"]
    assert again["A1"].value == "tRAVEL COSTS" and again["A2"].value == 12 and again["A3"].value == "=A2*2"
    assert [str(b.text) if isinstance(b, TextBlock) else b for b in again["B1"].value] == ["pAID ", "LATE ", "AGAIN"]


TOTALS = (
    ' totalsRowCount="1"',
    '<tableColumn id="1" name="Item" totalsRowLabel="Total"/>'
    '<tableColumn id="2" name="Amount" totalsRowFunction="sum"/>',
)


def with_table(data: bytes, ref: str, totals: tuple[str, str] = ("", "")) -> bytes:
    """The workbook of ``sheets.xlsx`` with a table (Excel's "Format as Table") over ``ref`` of its
    sheet; ``totals``: the table's attributes and columns for one with a totals row (``TOTALS``)."""
    attributes, columns = totals
    columns = columns or '<tableColumn id="1" name="Item"/><tableColumn id="2" name="Amount"/>'
    table = (
        f'<table xmlns="{sheets.S}" id="1" name="Sales" displayName="Sales" ref="{ref}"{attributes}>'
        f'<autoFilter ref="{ref}"/><tableColumns count="2">{columns}</tableColumns></table>'
    )
    rels = (
        f'<Relationships xmlns="{sheets.PR}"><Relationship Id="rId1" Type="{sheets.R}/table" '
        'Target="../tables/table1.xml"/></Relationships>'
    )
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as package:
        for info in source.infolist():
            part = source.read(info)
            if info.filename == "xl/worksheets/sheet1.xml":
                part = part.replace(
                    b"</sheetData>", b'</sheetData><tableParts count="1"><tablePart r:id="rId1"/></tableParts>'
                )
            package.writestr(info, part)
        package.writestr("xl/worksheets/_rels/sheet1.xml.rels", rels)
        package.writestr("xl/tables/table1.xml", table)
    return out.getvalue()


# the table "Sales" (A1:B2 and down) of the tests below: its header row (shared strings 0 and 1,
# "Item" and "Amount") and a row of "Fresh apples" (2) and 3
SALES = (
    '<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1" t="s"><v>1</v></c></row>'
    '<row r="2"><c r="A2" t="s"><v>2</v></c><c r="B2"><v>3</v></c></row>'
)


def test_a_tables_column_names_stay_as_they_are_so_excel_opens_the_workbook():
    # Excel reports a workbook whose table header cells differ from the table's column names
    # as damaged; formulas refer to them (=SUM(Sales[Amount])), as to sheet names
    cells = SALES + '<row r="4"><c r="B4"><f>SUM(Sales[Amount])</f><v>3</v></c></row>'
    data = with_table(sheets.xlsx(["Item", "Amount", "Fresh apples"], cells), "A1:B2")
    extracted = files.read("sales.xlsx", data, LIMIT)
    assert extracted.texts == ("Fresh apples",)
    sheet = workbook(swapped(extracted))[sheets.SHEET_NAME]
    assert [c.name for c in sheet.tables["Sales"].tableColumns] == [sheet["A1"].value, sheet["B1"].value]
    assert (sheet["A1"].value, sheet["A2"].value, sheet["B4"].value) == ("Item", "fRESH APPLES", "=SUM(Sales[Amount])")
    # openpyxl writes each cell's text inline
    book = openpyxl.Workbook()
    for row in [["Item", "Amount"], ["Fresh apples", 3], ["Item", None]]:
        book.active.append(row)
    book.active.add_table(Table(displayName="Sales", ref="A1:B2"))
    sent = io.BytesIO()
    book.save(sent)
    extracted = files.read("sales.xlsx", sent.getvalue(), LIMIT)
    assert extracted.texts == ("Fresh apples", "Item")  # A3 is no header
    sheet = workbook(swapped(extracted)).active
    assert [c.name for c in sheet.tables["Sales"].tableColumns] == [sheet["A1"].value, sheet["B1"].value]


@pytest.mark.parametrize("inline", [False, True], ids=["shared strings only", "an inline string too"])
def test_a_header_text_other_cells_show_too_is_translated_there_and_kept_in_the_header(inline):
    # a header cell's text is a shared string any cell may show ("Amount" as a label further down):
    # the header cells are given their own copy of it, and the other cells show its translation
    label = '<c r="A5" t="inlineStr"><is><t>Checked by</t></is></c>' if inline else '<c r="A5"><v>7</v></c>'
    cells = (
        SALES
        + '<row r="4"><c r="A4" t="s"><v>1</v></c><c r="B4"><f>SUM(Sales[Amount])</f><v>3</v></c></row>'
        + f'<row r="5">{label}<c r="B5" t="s"><v>1</v></c></row>'
    )
    data = with_table(sheets.xlsx(["Item", "Amount", "Fresh apples"], cells), "A1:B2")
    extracted = files.read("sales.xlsx", data, LIMIT)
    assert extracted.texts == ("Checked by",) * inline + ("Amount", "Fresh apples")
    out = swapped(extracted)
    with zipfile.ZipFile(io.BytesIO(out)) as package:
        assert package.testzip() is None
        parts = {n: etree.fromstring(package.read(n)) for n in package.namelist() if n.endswith((".xml", ".rels"))}
    strings = parts["xl/sharedStrings.xml"]
    # one copy, for "Amount" only ("Item" is no other cell's text); as many references as before
    assert [t.text for t in strings.iter(f"{{{sheets.S}}}t")] == ["Item", "aMOUNT", "fRESH APPLES", "Amount"]
    assert (strings.get("count"), strings.get("uniqueCount")) == ("3", "4")
    sheet = workbook(out)[sheets.SHEET_NAME]
    assert [c.name for c in sheet.tables["Sales"].tableColumns] == [sheet["A1"].value, sheet["B1"].value]
    assert (sheet["A1"].value, sheet["B1"].value) == ("Item", "Amount")
    assert (sheet["A4"].value, sheet["B5"].value, sheet["A5"].value) == (
        "aMOUNT",
        "aMOUNT",
        "cHECKED BY" if inline else 7,
    )
    assert sheet["B4"].value == "=SUM(Sales[Amount])"
    before, after = (office_entries(d)["xl/worksheets/sheet1.xml"][0] for d in (data, out))
    assert after == before.replace(b'r="B1" t="s"><v>1<', b'r="B1" t="s"><v>3<').replace(
        b"Checked by", b"cHECKED BY"
    )  # only the header cell points elsewhere


def test_header_cells_without_their_reference_are_known_by_their_place():
    # r= of a cell (and of a row) may be left out: the cell is then the column after the previous
    # one, the row the one after the previous; such header cells were translated, as any cell
    cells = (
        '<row r="1"><c t="s"><v>0</v></c><c t="inlineStr"><is><t>Amount</t></is></c></row>'
        '<row><c t="s"><v>1</v></c><c><v>3</v></c></row>'
        '<row r="4"><c r="B4" t="s"><v>0</v></c></row>'
    )
    data = with_table(sheets.xlsx(["Item", "Fresh apples"], cells), "A1:B2")
    extracted = files.read("sales.xlsx", data, LIMIT)
    assert extracted.texts == ("Item", "Fresh apples")  # B4 shows "Item" too: it is translated there
    sheet = workbook(swapped(extracted))[sheets.SHEET_NAME]
    assert [c.name for c in sheet.tables["Sales"].tableColumns] == [sheet["A1"].value, sheet["B1"].value]
    assert (sheet["A1"].value, sheet["B1"].value, sheet["A2"].value, sheet["B4"].value) == (
        "Item",
        "Amount",
        "fRESH APPLES",
        "iTEM",
    )


@pytest.mark.parametrize("inline", [False, True], ids=["a shared string", "an inline string"])
def test_a_totals_row_label_is_translated_in_its_cell_and_in_the_table(inline):
    # the label a table's totals row shows ("Total") is also the table's (totalsRowLabel, ECMA-376
    # Part 1 § 18.5.1.3: any text, the cell's): both are translated, so they still match
    label = '<c r="A3" t="inlineStr"><is><t>Total</t></is></c>' if inline else '<c r="A3" t="s"><v>3</v></c>'
    cells = (
        SALES
        + f'<row r="3">{label}<c r="B3"><f>SUBTOTAL(109,Sales[Amount])</f><v>3</v></c></row>'
        + '<row r="5"><c r="A5" t="s"><v>3</v></c></row>'
    )
    data = with_table(sheets.xlsx(["Item", "Amount", "Fresh apples", "Total"], cells), "A1:B3", TOTALS)
    extracted = files.read("sales.xlsx", data, LIMIT)
    assert extracted.texts == ("Total",) * inline + ("Fresh apples", "Total")
    sheet = workbook(swapped(extracted))[sheets.SHEET_NAME]
    item, amount = sheet.tables["Sales"].tableColumns
    assert (item.totalsRowLabel, sheet["A3"].value, sheet["A5"].value) == ("tOTAL", "tOTAL", "tOTAL")
    assert (amount.totalsRowLabel, amount.totalsRowFunction, sheet["B3"].value) == (
        None,
        "sum",
        "=SUBTOTAL(109,Sales[Amount])",
    )
    assert [item.name, amount.name] == [sheet["A1"].value, sheet["B1"].value] == ["Item", "Amount"]


def test_a_sheet_of_numbers_with_inline_headings_is_read_without_its_tree(monkeypatch):
    # openpyxl and pandas write every text cell inline: a sheet of 60,000 rows of measurements
    # under its headings (2,000,000 tags, a 400 MB tree) was refused at the tag limit; only the
    # strings' tags count now (the limit is a hundredth here: the same path, a hundredth the size)
    monkeypatch.setattr(archive, "MAX_TAGS", 20_000)
    book = openpyxl.Workbook(write_only=True)
    sheet = book.create_sheet("Data")
    sheet.append(["Temperature", "Pressure", "Wind & rain", "Station <north>"])
    for i in range(2_000):  # 40,000 tags
        sheet.append([i * 0.5, i, 3.25, -i])
    sheet.append(["Average of all rows"])
    sent = io.BytesIO()
    book.save(sent)
    extracted = files.read("weather.xlsx", sent.getvalue(), LIMIT)
    assert extracted.texts == ("Temperature", "Pressure", "Wind & rain", "Station <north>", "Average of all rows")
    out = swapped(extracted)
    rows = list(workbook(out)["Data"].iter_rows(values_only=True))
    assert rows[0] == ("tEMPERATURE", "pRESSURE", "wIND & RAIN", "sTATION <NORTH>")
    assert rows[1:3] == [(0, 0, 3.25, 0), (0.5, 1, 3.25, -1)] and rows[-1][0] == "aVERAGE OF ALL ROWS"
    before, after = (office_entries(data)["xl/worksheets/sheet1.xml"][0] for data in (sent.getvalue(), out))
    strings = re.compile(rb"<is>.*?</is>")
    assert strings.sub(b"", before) == strings.sub(b"", after)  # every other byte as it was


def test_a_note_written_by_openpyxl_is_translated_with_its_cell():
    # openpyxl names the comments part xl/comments/comment1.xml, Excel xl/comments1.xml: the
    # package's content types say which part it is
    book = openpyxl.Workbook()
    book.active["A1"] = "Travel costs"
    book.active["A1"].comment = Comment("Check the receipts", "Ann")
    sent = io.BytesIO()
    book.save(sent)
    extracted = files.read("budget.xlsx", sent.getvalue(), LIMIT)
    assert extracted.texts == ("Travel costs", "Check the receipts")
    cell = workbook(swapped(extracted)).active["A1"]
    assert (cell.value, cell.comment.text, cell.comment.author) == ("tRAVEL COSTS", "cHECK THE RECEIPTS", "Ann")


def test_a_workbook_without_words_an_invalid_one_and_one_over_the_limits_are_refused():
    with pytest.raises(FileRefused, match="no text to translate"):
        files.read("n.xlsx", sheets.xlsx(["2025"], '<row r="1"><c r="A1" t="s"><v>0</v></c></row>'), LIMIT)
    with pytest.raises(FileRefused, match="not a valid .xlsx.*xl/workbook.xml"):
        files.read("w.xlsx", office.docx([[("Hello", "")]]), LIMIT)
    with pytest.raises(FileRefused, match="not a valid .xlsx"):
        files.read("w.xlsx", b"not a zip at all", LIMIT)
    with pytest.raises(FileRefused, match="unpacks to"):
        files.read("bomb.xlsx", office.zip_bomb(8 * LIMIT), LIMIT)
    with pytest.raises(TooManyCharacters):
        files.read("sales.xlsx", sheets.xlsx(SHARED, CELLS), LIMIT, max_chars=20)
    with pytest.raises(FileRefused, match="binary Excel format: save it as .xlsx"):
        files.read("old.xls", b"\xd0\xcf\x11\xe0", LIMIT)


def test_escaped_characters_reach_the_model_decoded_and_go_back_escaped():
    """A cell's ``_xHHHH_`` escapes (ECMA-376 Part 1, 22.9.2.19 ST_Xstring: Excel writes a carriage
    return as ``_x000D_``, and a literal ``_x0041_`` as ``_x005F_x0041_``) are characters to the
    model, and its translation goes back escaped where it must be, so the cells read as translated."""
    shared = ["First line_x000D_\nsecond line", "Type _x005F_x0041_ in the form"]
    cells = '<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1" t="s"><v>1</v></c></row>'
    extracted = files.read("codes.xlsx", sheets.xlsx(shared, cells), LIMIT)
    assert extracted.texts == ("First line\r\nsecond line", "Type _x0041_ in the form")  # what the model reads
    translations = ["Erste Zeile\r\nzweite Zeile", "Tippe _x0041_ ins Formular\x07"]  # a control character too
    out = extracted.write(translations)
    sheet = openpyxl.load_workbook(io.BytesIO(out))[sheets.SHEET_NAME]
    assert sheet["A1"].value == "Erste Zeile\r\nzweite Zeile"
    assert sheet["B1"].value == "Tippe _x0041_ ins Formular_x0007_"  # openpyxl leaves _x0007_ escaped
    with zipfile.ZipFile(io.BytesIO(out)) as package:
        assert "Tippe _x005F_x0041_ ins Formular_x0007_" in package.read("xl/sharedStrings.xml").decode()
    assert files.read("codes.de.xlsx", out, LIMIT).texts == tuple(translations)  # read back as written
