"""Hostile files read within a file worker's budget: each attack of the hostile-input pass, at
its size there, ends in a result or the clear refusal inside a forked child limited to a few CPU
seconds (``tests.support.bounded``), where the readers it found took minutes or gigabytes."""

from __future__ import annotations

import io
import zipfile

import pytest

from attnserve.contract.deadline import Deadline
from attnserve.server import files
from attnserve.server.files import archive
from attnserve.server.shared.errors import DeadlineExceeded
from tests.support import localization_files as sheets
from tests.support import office_files as office
from tests.support.bounded import within

FILE_BYTES = 32 << 20  # --max-file-bytes' default
FILE_CHARS = 300_000  # --max-file-chars' default


def read(name: str, data: bytes, max_chars: int | None = FILE_CHARS) -> tuple[int, int]:
    extracted = files.read(name, data, FILE_BYTES, max_chars=max_chars)
    return len(extracted.texts), extracted.characters


def test_srt_of_a_long_line_of_digits_is_refused_at_once():
    # the srt library's timestamp pattern backtracks in cubic time: 2 KB of this took 65 s
    kind, (name, message) = within(read, "a.srt", b"1\n" + b"7" * 200_000)
    assert (kind, name) == ("error", "FileRefused") and "line 1 ('1') does not start a cue" in message


def test_srt_with_whitespace_inside_a_timing_line_reads_in_linear_time():
    spaced = b"1\n00:00:01,000" + b" " * 100_000 + b"--> 00:00:02,000\nHi\n\n"
    kind, (name, message) = within(read, "a.srt", spaced)
    assert (kind, name) == ("error", "FileRefused") and "SubRip" in message
    cues = b"".join(
        b"%d\n00:00:%02d,000 --> 00:00:%02d,500\nLine %d.\n\n" % (i, i % 60, i % 60, i) for i in range(20_000)
    )
    assert within(read, "a.srt", cues) == ("ok", (20_000, sum(len(f"Line {i}.") for i in range(20_000))))


def test_markdown_line_of_spaces_between_two_words_reads_in_linear_time():
    # the markers pattern's (.*?)(\s*)$ was quadratic: 40 KB of this froze the server 7 s
    line = b"a" + b" " * 200_000 + b"b"
    assert within(read, "a.md", line) == ("ok", (1, len(line)))
    rule = b"- " * 100_000 + b"-x"  # a thematic break's (\s*\1){2,}\s* and a table rule's [\s:|-]+\| overlap
    assert within(read, "b.md", rule + b"\n" + b"|" * 200_000 + b"x", None) == ("ok", (1, len(rule) + 200_002))
    front = b"---\n" + b"a: b\n" * 200_000  # a front matter block never closed
    assert within(read, "c.md", front, None) == ("ok", (1, len(front)))


def test_markdown_over_the_character_limit_stops_where_it_crosses_it():
    kind, (name, message) = within(read, "a.md", b"- item of a list\n" * 1_000_000, 1_000)
    assert (kind, name) == ("error", "TooManyCharacters")
    assert "more than 1,000 characters of text" in message and "--max-file-chars" in message


def paragraphs_docx(count: int) -> bytes:
    """A .docx whose document.xml is ``count`` one-letter paragraphs (35 bytes each, ~1,000:1 deflated)."""
    body = b"<w:p><w:r><w:t>a</w:t></w:r></w:p>" * count
    xml = b'<w:document xmlns:w="%s"><w:body>%s</w:body></w:document>' % (office.W.encode(), body)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as package:
        package.writestr("word/document.xml", xml)
    return out.getvalue()


def test_an_inflated_docx_stops_at_the_character_limit():
    # 1M paragraphs (35 MB inflated from 100 KB; the pass's 3.3M took 72 s and kept 1.7 GB) are
    # refused where the 20,001st character ends, after 700 KB of it, not after all were parsed
    data = paragraphs_docx(1_000_000)
    assert len(data) < 200_000
    kind, (name, message) = within(read, "big.docx", data, 20_000, cpu_seconds=10)
    assert (kind, name) == ("error", "TooManyCharacters") and "more than 20,000 characters" in message


def test_a_docx_of_millions_of_empty_elements_is_refused_at_the_tag_limit(monkeypatch):
    monkeypatch.setattr(archive, "MAX_TAGS", 200_000)  # of 2,000,000: the same path, a tenth of the time
    body = b"<w:p/>" * 3_000_000  # no text to count: the tags are
    xml = b'<w:document xmlns:w="%s"><w:body>%s</w:body></w:document>' % (office.W.encode(), body)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as package:
        package.writestr("word/document.xml", xml)
    kind, (name, message) = within(read, "empty.docx", out.getvalue(), cpu_seconds=10)
    assert (kind, name) == ("error", "FileRefused") and "more than 200,000 XML tags" in message


def test_a_word_of_100000_hyphen_elements_reads_and_writes_in_linear_time():
    # each hyphen element glued to its word built the word's run again: 20,000 (an 858-byte file) took 19 s
    run = b"<w:r><w:t>co</w:t>" + b"<w:softHyphen/><w:t>o</w:t><w:noBreakHyphen/>" * 50_000 + b"<w:t>p</w:t></w:r>"
    xml = b'<w:document xmlns:w="%s"><w:body><w:p>%s</w:p></w:body></w:document>' % (office.W.encode(), run)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as package:
        package.writestr("word/document.xml", xml)

    def read_and_write() -> tuple[str, bytes]:
        extracted = files.read("hyphens.docx", out.getvalue(), FILE_BYTES)
        (text,) = extracted.texts
        written = zipfile.ZipFile(io.BytesIO(extracted.write([text.upper()]))).read("word/document.xml")
        return text, written

    kind, (text, written) = within(read_and_write, cpu_seconds=10)
    assert kind == "ok" and text == "co" + "o\u2011" * 50_000 + "p"
    assert written.count(b"<w:noBreakHyphen/>") == 50_000 and b"softHyphen" not in written
    assert b"CO" + b"O</w:t><w:noBreakHyphen/><w:t>" * 49_999 in written


def test_an_epub_page_over_the_character_limit_in_text_is_refused_in_bounded_time():
    page = "<html><body><p>" + "word " * 100_000 + "</p></body></html>"
    kind, (name, _) = within(read, "book.epub", office.epub([page]), 10_000)
    assert (kind, name) == ("error", "TooManyCharacters")
    assert within(read, "book.epub", office.epub([page]), None)[0] == "ok"


def epub_of_ncx(ncx: bytes, count: int) -> bytes:
    """A book whose manifest lists ``count`` NCX tables of contents, each ``ncx``."""
    book = zipfile.ZipFile(io.BytesIO(office.epub(["<p>Hi</p>"])))
    parts = {name: book.read(name) for name in book.namelist()}
    item = b'<item id="n%d" href="t%d.ncx" media-type="application/x-dtbncx+xml"/>'
    items = b"".join(item % (i, i) for i in range(count))
    parts["OEBPS/content.opf"] = parts["OEBPS/content.opf"].replace(b"<manifest>", b"<manifest>" + items)
    return office._zip([*parts.items(), *((f"OEBPS/t{i}.ncx", ncx) for i in range(count))], stored_first=True)


def test_an_epub_of_many_tables_of_contents_of_empty_elements_is_refused_at_the_tag_limit(monkeypatch):
    # each NCX is parsed whole and kept: 30 of 300,000 empty elements (1.2 MB each, under the
    # characters' 4 bytes a character) from a 42 KB book kept 1.1 GB; they count as a .docx's parts
    monkeypatch.setattr(archive, "MAX_TAGS", 200_000)  # of 2,000,000: the same path, a tenth of the time
    ncx = b'<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/"><navMap>%s</navMap></ncx>' % (b"<a/>" * 80_000)
    kind, (name, message) = within(read, "tocs.epub", epub_of_ncx(ncx, 3), cpu_seconds=10)
    assert (kind, name) == ("error", "FileRefused") and "more than 200,000 XML tags" in message
    book = read("book.epub", office.epub(["<p>Hi</p>"]))  # its page; the NCX have no labels
    assert within(read, "toc.epub", epub_of_ncx(ncx, 2), cpu_seconds=10) == ("ok", book)  # under the limit: read


def test_a_paragraph_of_16000_bold_and_plain_runs_is_placed_in_linear_time_and_memory():
    # 16,000 runs with one word each: the alignment placement's words x runs table reached 8 GB;
    # above --max-aligned-runs the words are shared by proportion, one a run, in order
    runs = [(f"w{i} ", "b" if i % 2 else "") for i in range(16_000)]
    extracted = files.read("runs.docx", office.docx([runs]), FILE_BYTES)
    (unit,) = extracted.units
    translation = " ".join(f"W{i}" for i in range(16_000))
    preferred = list(range(16_000))  # each word aligned to its own run

    def placed() -> list[str]:
        return files.place_aligned(unit, translation, preferred)

    kind, out = within(placed, cpu_seconds=10)
    assert kind == "ok" and [r.split() for r in out] == [[f"W{i}"] for i in range(16_000)]


def test_many_words_on_runs_under_the_limit_are_placed_by_alignment_in_bounded_time():
    runs = tuple(f"part {i} " for i in range(250))  # 250 runs with words: under --max-aligned-runs
    unit = files.Unit(runs, ("",) * 249)
    words = [f"x{j}" for j in range(100_000)]  # a translation of 100,000 words: 25 M cells
    preferred = [j * 250 // 100_000 for j in range(100_000)]  # 400 words a run, in order

    def placed() -> list[str]:
        return files.place_aligned(unit, " ".join(words), preferred)

    kind, out = within(placed, cpu_seconds=10)
    assert kind == "ok" and [len(r.split()) for r in out] == [400] * 250


def test_writing_a_file_back_stops_at_its_deadline():
    extracted = files.read("long.docx", office.docx([[("A sentence.", "")]] * 2_000), FILE_BYTES)
    passed = Deadline.from_timeout(0.0, "the file's time limit of 600 s (--file-timeout-seconds)")
    with pytest.raises(DeadlineExceeded, match="file's time limit"):
        extracted.write(list(extracted.texts), deadline=passed)
    assert extracted.write(list(extracted.texts), deadline=Deadline.from_timeout(60.0, "a minute"))  # in time: the file


ITEM = '<row r="1"><c r="A1" t="s"><v>0</v></c></row>'  # A1: "Item"


def xlsx_with(tables: int, padded: str = "", padding: bytes = b"", cells: str = ITEM) -> bytes:
    """A workbook (shared string 0: "Item"; ``cells``: its sheet's rows) with ``tables`` tables on its
    sheet, the n-th's header row n + 2 across all 16,384 columns; ``padding`` put in the part ``padded``
    before its first tag's end."""
    book = zipfile.ZipFile(io.BytesIO(sheets.xlsx(["Item"], cells)))
    entries: dict[str, bytes | str] = {name: book.read(name) for name in book.namelist()}
    relation = '<Relationship Id="rId%d" Type="%s/table" Target="../tables/table%d.xml"/>'
    relations = "".join(relation % (n, sheets.R, n) for n in range(tables))
    entries["xl/worksheets/_rels/sheet1.xml.rels"] = f'<Relationships xmlns="{sheets.PR}">{relations}</Relationships>'
    table = '<table xmlns="{}" ref="A{}:XFD{}"></table>'.format
    entries.update((f"xl/tables/table{n}.xml", table(sheets.S, n + 2, n + 2)) for n in range(tables))
    if padded:
        part = entries[padded]
        part = part.encode() if isinstance(part, str) else part
        at = part.index(b">", part.index(b"<", part.index(b"?>") + 2 if b"?>" in part else 0)) + 1
        entries[padded] = part[:at] + padding + part[at:]
    return office._zip(list(entries.items()))


@pytest.mark.parametrize(
    "part",
    ["[Content_Types].xml", "xl/worksheets/_rels/sheet1.xml.rels", "xl/tables/table0.xml", "xl/worksheets/sheet1.xml"],
)
def test_an_xlsx_part_of_a_million_empty_elements_is_refused_at_the_tag_limit(monkeypatch, part):
    # [Content_Types].xml and the tables' parts were parsed whole, not counted, and the worksheet
    # up to its tables' header rows streamed uncounted: 5,000,000 empty elements (a 22 KB
    # workbook) took 650 MB each way; they count as the text parts do
    monkeypatch.setattr(archive, "MAX_TAGS", 200_000)  # of 2,000,000: the same path, a tenth of the time
    kind, (name, message) = within(read, "padded.xlsx", xlsx_with(1, part, b"<a/>" * 1_000_000), cpu_seconds=10)
    assert (kind, name) == ("error", "FileRefused") and "more than 200,000 XML tags" in message
    assert within(read, "table.xlsx", xlsx_with(1, part, b"<a/>" * 100_000)) == ("ok", (1, 4))  # under it: read


def test_an_xlsx_of_thousands_of_full_width_tables_reads_in_bounded_time_and_memory():
    # each table's header cells were listed by reference, 16,384 a table: 300 tables (66 KB) took
    # 700 MB and 16 s; a table is now its row's column range
    data = xlsx_with(2_000)
    assert len(data) < 1_000_000
    assert within(read, "tables.xlsx", data, cpu_seconds=10) == ("ok", (1, 4))


def test_an_xlsx_table_over_more_number_cells_than_the_tag_limit_is_read(monkeypatch):
    # a header's text shown by other cells takes the worksheet read through once more for them,
    # by expat and without a tree: its numbers count no more there than on the way to the header row
    monkeypatch.setattr(archive, "MAX_TAGS", 200_000)
    numbers = "".join(f'<row r="{r}"><c r="A{r}"><v>{r}</v></c></row>' for r in range(3, 100_003))
    header = '<row r="2"><c r="A2" t="s"><v>0</v></c></row>'  # the table's column name, as A1 shows it
    data = xlsx_with(1, cells=ITEM + header + numbers)
    assert within(read, "numbers.xlsx", data, cpu_seconds=10) == ("ok", (1, 4))  # A1 translated, A2 kept


def _totalled(between: str) -> bytes:
    """A workbook whose table (A2:A100003, "Item" its column) has a totals row labelled "Total"
    (shared string 1) below 100,000 number rows; ``between``: put between the first two of them."""
    book = zipfile.ZipFile(io.BytesIO(sheets.xlsx(["Item", "Total"], "")))
    entries: dict[str, bytes | str] = {name: book.read(name) for name in book.namelist()}
    numbers = [f'<row r="{r}"><c r="A{r}"><v>{r}</v></c></row>' for r in range(3, 100_003)]
    rows = (
        ITEM + '<row r="2"><c r="A2" t="s"><v>0</v></c></row>' + numbers[0] + between + "".join(numbers[1:])
        + '<row r="100003"><c r="A100003" t="s"><v>1</v></c></row>'
    )  # fmt: skip
    sheet = entries["xl/worksheets/sheet1.xml"]
    sheet = sheet.decode() if isinstance(sheet, bytes) else sheet
    entries["xl/worksheets/sheet1.xml"] = sheet.replace("<sheetData></sheetData>", f"<sheetData>{rows}</sheetData>")
    assert rows in entries["xl/worksheets/sheet1.xml"]
    relation = f'<Relationship Id="rId1" Type="{sheets.R}/table" Target="../tables/table1.xml"/>'
    entries["xl/worksheets/_rels/sheet1.xml.rels"] = f'<Relationships xmlns="{sheets.PR}">{relation}</Relationships>'
    entries["xl/tables/table1.xml"] = (
        f'<table xmlns="{sheets.S}" id="1" name="T" ref="A2:A100003" totalsRowCount="1"><tableColumns count="1">'
        '<tableColumn id="1" name="Item" totalsRowLabel="Total"/></tableColumns></table>'
    )
    return office._zip(list(entries.items()))


def test_an_xlsx_table_whose_totals_row_is_below_more_tags_than_the_limit_is_read_and_stuffing_is_not(monkeypatch):
    # the scan down to a totals row counted every number row's tags against the package's limit, so
    # a table of 170,000 rows x 3 columns with a totals label was refused; below the header rows
    # only a row's tags count, the rows before it let go
    monkeypatch.setattr(archive, "MAX_TAGS", 200_000)
    assert within(read, "totals.xlsx", _totalled(""), cpu_seconds=10) == ("ok", (2, 9))  # A1 and the label
    kind, (name, message) = within(read, "stuffed.xlsx", _totalled("<a/>" * 1_000_000), cpu_seconds=10)
    assert (kind, name) == ("error", "FileRefused") and "more than 200,000 XML tags" in message
