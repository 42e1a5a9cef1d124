"""An .xlsx workbook as Excel writes it (shared strings, rich-text runs, a formula with its cached
text, numbers, a boolean, an inline string, a cell comment and a sheet name), and XLIFF 1.2 and
2.1 files as CAT tools write them, built in the test: no spreadsheet application, no fixture files.

A shared string is a plain text or a list of runs ``(text, bold)``.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

from tests.support.office_files import DECLARATION, _zip

S = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
PR = "http://schemas.openxmlformats.org/package/2006/relationships"
SHEET_NAME = "Sales Report"


def _string(value: str | list[tuple[str, bool]]) -> str:
    if isinstance(value, str):
        return f"<si><t>{escape(value)}</t></si>"
    bold, plain = '<rPr><b/><sz val="11"/></rPr>', '<rPr><sz val="11"/></rPr>'
    runs = "".join(f'<r>{bold if b else plain}<t xml:space="preserve">{escape(t)}</t></r>' for t, b in value)
    return f"<si>{runs}</si>"


def xlsx(shared: list[str | list[tuple[str, bool]]], cells: str, comment: str = "") -> bytes:
    """A workbook of one sheet named :data:`SHEET_NAME`; ``cells``: its ``<row>`` elements (a text
    cell points into ``shared`` by index: ``<c r="A1" t="s"><v>0</v></c>``); ``comment``: a note on A1."""
    types = (
        '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>'
        '<Override PartName="/xl/workbook.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
        '<Override PartName="/xl/worksheets/sheet1.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'
        '<Override PartName="/xl/sharedStrings.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/>'
        '<Override PartName="/xl/comments1.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.comments+xml"/>'
        "</Types>"
    )
    rels = (
        f'<Relationships xmlns="{PR}"><Relationship Id="rId1" '
        'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" '
        'Target="xl/workbook.xml"/></Relationships>'
    )
    workbook = (
        f'<workbook xmlns="{S}" xmlns:r="{R}"><sheets>'
        f'<sheet name="{SHEET_NAME}" sheetId="1" r:id="rId1"/></sheets></workbook>'
    )
    workbook_rels = (
        f'<Relationships xmlns="{PR}">'
        f'<Relationship Id="rId1" Type="{R}/worksheet" Target="worksheets/sheet1.xml"/>'
        f'<Relationship Id="rId2" Type="{R}/sharedStrings" Target="sharedStrings.xml"/></Relationships>'
    )
    sheet = f'<worksheet xmlns="{S}" xmlns:r="{R}"><sheetData>{cells}</sheetData></worksheet>'
    strings = f'<sst xmlns="{S}" count="{len(shared)}" uniqueCount="{len(shared)}">'
    strings += "".join(map(_string, shared)) + "</sst>"
    entries = [
        ("[Content_Types].xml", types),
        ("_rels/.rels", rels),
        ("xl/workbook.xml", DECLARATION + workbook),
        ("xl/_rels/workbook.xml.rels", workbook_rels),
        ("xl/worksheets/sheet1.xml", DECLARATION + sheet),
        ("xl/sharedStrings.xml", DECLARATION + strings),
    ]
    if comment:
        entries[4:4] = [
            (
                "xl/worksheets/_rels/sheet1.xml.rels",
                f'<Relationships xmlns="{PR}"><Relationship Id="rId1" Type="{R}/comments" '
                'Target="../comments1.xml"/></Relationships>',
            )
        ]
        entries.append(
            (
                "xl/comments1.xml",
                f'{DECLARATION}<comments xmlns="{S}"><authors><author>Ann</author></authors><commentList>'
                f'<comment ref="A1" authorId="0"><text><r><t>{escape(comment)}</t></r></text></comment>'
                "</commentList></comments>",
            )
        )
    return _zip(entries)


def xliff12(units: str, target_language: str = "") -> bytes:
    """An XLIFF 1.2 file of one ``<file>`` from English; ``units``: its ``<trans-unit>`` elements."""
    target = f' target-language="{target_language}"' if target_language else ""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">\n'
        f'  <file source-language="en"{target} datatype="plaintext" original="app.properties">\n'
        f"    <body>\n{units}\n    </body>\n  </file>\n</xliff>\n"
    ).encode()


def xliff21(units: str, target_language: str = "de") -> bytes:
    """An XLIFF 2.1 file from English; ``units``: its ``<unit>`` elements."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.1" '
        f'srcLang="en" trgLang="{target_language}">\n'
        f' <file id="f1">\n{units}\n </file>\n</xliff>\n'
    ).encode()
