"""The file formats without a model: what is read for translation from each format, and what a
translation written back looks like (same paragraphs, slides, runs and styles; images and the
other entries of a package as they were). The "translation" here swaps the case of every
letter, so a test sees exactly which characters were replaced."""

from __future__ import annotations

import codecs
import io
import zipfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

from attnserve.server import files
from attnserve.server.files import FileRefused, Unit, jobs, place, place_aligned, run_at, run_placement, styled_spans
from tests.server.files.test_adversarial_translations import HYPERLINK, w_paragraph, w_part, w_run
from tests.support import office_files as office

LIMIT = 1 << 20  # --max-file-bytes of these tests


def swapped(extracted: files.Extracted) -> bytes:
    return extracted.write([t.swapcase() for t in extracted.texts])


def entries(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as package:
        return {info.filename: package.read(info) for info in package.infolist()}


def xml(data: bytes, part: str) -> etree._Element:
    return etree.fromstring(entries(data)[part])


W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
STYLED = [[("Hello ", ""), ("big", "b"), (" world.", "")], [("Plain paragraph.", "")], [("", "")]]


def test_docx_paragraphs_runs_and_styles_come_back_with_the_translation():
    data = office.docx(STYLED)
    extracted = files.read("report.docx", data, LIMIT)
    assert extracted.texts == ("Hello big world.", "Plain paragraph.")  # the empty paragraph is not sent
    out = swapped(extracted)
    before, after = entries(data), entries(out)
    assert list(after) == list(before)  # same entries, same order
    assert {n: d for n, d in after.items() if n != "word/document.xml"} == {
        n: d for n, d in before.items() if n != "word/document.xml"
    }
    paragraphs = xml(out, "word/document.xml").iter(f"{W}p")
    runs = [[("".join(r.itertext()), r.find(f"{W}rPr/{W}b") is not None) for r in p.iter(f"{W}r")] for p in paragraphs]
    assert runs == [
        [("hELLO ", False), ("BIG ", True), ("WORLD.", False)],
        [("pLAIN PARAGRAPH.", False)],
        [("", False)],
    ]


MC_DOCUMENT = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    ' xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006"'
    ' xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape"'
    ' xmlns:v="urn:schemas-microsoft-com:vml" mc:Ignorable="wps"><w:body>'
    "<w:p><w:r><w:t>The report is ready.</w:t></w:r></w:p>"
    '<w:p><w:r><mc:AlternateContent><mc:Choice Requires="wps"><w:drawing><wps:wsp><wps:txbx><w:txbxContent>'
    "<w:p><w:r><w:t>Read me first.</w:t></w:r></w:p><w:p><w:r><w:t>Then the rest.</w:t></w:r></w:p>"
    "</w:txbxContent></wps:txbx></wps:wsp></w:drawing></mc:Choice>"
    "<mc:Fallback><w:pict><v:shape><v:textbox><w:txbxContent>"
    "<w:p><w:r><w:t>Read me first.</w:t></w:r></w:p><w:p><w:r><w:t>Then the rest.</w:t></w:r></w:p>"
    "</w:txbxContent></v:textbox></v:shape></w:pict></mc:Fallback></mc:AlternateContent></w:r></w:p>"
    "<w:sectPr/></w:body></w:document>"
)


def with_document(document: str) -> bytes:
    """A .docx whose word/document.xml is ``document``."""
    data = office.docx([[("x", "")]])
    with zipfile.ZipFile(io.BytesIO(data)) as package, zipfile.ZipFile(out := io.BytesIO(), "w") as rewritten:
        for info in package.infolist():
            rewritten.writestr(info, document if info.filename == "word/document.xml" else package.read(info))
    return out.getvalue()


def test_a_docx_text_box_word_keeps_twice_is_translated_and_counted_once():
    """Word writes a text box as a DrawingML shape and again as VML for older readers
    (mc:AlternateContent): its words are one text, counted once against --max-file-chars and in
    billed_characters, and both copies carry the translation."""
    data = with_document(MC_DOCUMENT)
    extracted = files.read("report.docx", data, LIMIT)
    assert extracted.texts == ("The report is ready.", "Read me first.", "Then the rest.")
    assert extracted.characters == len("The report is ready.Read me first.Then the rest.")
    with pytest.raises(files.TooManyCharacters):  # each text box's words once: 48 characters
        files.read("report.docx", data, LIMIT, max_chars=47)
    files.read("report.docx", data, LIMIT, max_chars=48)
    texts = [t.text for t in xml(swapped(extracted), "word/document.xml").iter(f"{W}t")]
    assert texts == ["tHE REPORT IS READY.", *["rEAD ME FIRST.", "tHEN THE REST."] * 2]
    # a copy edited apart from its shape (other words) is a text of its own, counted and billed as one
    edited = with_document(
        MC_DOCUMENT.replace(
            "Then the rest.</w:t></w:r></w:p></w:txbxContent></v:textbox>",
            "Then more.</w:t></w:r></w:p></w:txbxContent></v:textbox>",
        )
    )
    extracted = files.read("report.docx", edited, LIMIT)
    assert extracted.texts == ("The report is ready.", "Read me first.", "Then the rest.", "Then more.")
    assert extracted.characters == 58 == jobs.read_text("report.docx", edited, LIMIT).characters
    with pytest.raises(files.TooManyCharacters):
        files.read("report.docx", edited, LIMIT, max_chars=57)


def test_docx_keeps_the_edge_spaces_word_would_drop():
    out = swapped(files.read("a.docx", office.docx([[("One ", ""), ("two", "b")]]), LIMIT))
    first = next(xml(out, "word/document.xml").iter(f"{W}t"))
    assert first.text == "oNE " and first.get("{http://www.w3.org/XML/1998/namespace}space") == "preserve"


def test_docx_comments_are_translated_as_word_shows_them_beside_the_text():
    data = office.docx([[("The budget is final.", "")]], comments=[[("Please check ", ""), ("the totals", "b")]])
    extracted = files.read("report.docx", data, LIMIT)
    assert extracted.texts == ("The budget is final.", "Please check the totals")
    comment = xml(swapped(extracted), "word/comments.xml").find(f"{W}comment")
    assert [t.text for t in comment.iter(f"{W}t")] == ["pLEASE CHECK ", "THE TOTALS"]
    assert comment.get(f"{W}author") == "Ann"


def test_docx_ruby_readings_are_not_read_into_the_sentence_and_are_emptied_with_their_words():
    # furigana over 漢字: the model reads the base alone (not "かんじ漢字"), and the reading of a
    # word the translation replaced is not left over the translation
    ruby = (
        f"<w:r><w:ruby><w:rubyPr/><w:rt>{w_run('かんじ')}</w:rt><w:rubyBase>{w_run('漢字')}</w:rubyBase></w:ruby></w:r>"
    )
    paragraph = w_paragraph(w_run("この"), ruby, w_run("を読む。"))
    data = office._zip([("word/document.xml", w_part("document", f"<w:body>{paragraph}</w:body>"))])
    extracted = files.read("a.docx", data, LIMIT)
    assert extracted.texts == ("この漢字を読む。",)
    out = xml(extracted.write(["Read this kanji."]), "word/document.xml")
    assert "".join(t.text or "" for t in out.iter(f"{W}t")) == "Read this kanji."
    assert [t.text or "" for t in out.find(f".//{W}rt").iter(f"{W}t")] == [""]


def strict(data: bytes) -> bytes:
    """The package in Strict Open XML, as Word and PowerPoint save it as "Strict Open XML"."""
    namespaces = {
        office.W: "http://purl.oclc.org/ooxml/wordprocessingml/main",
        office.A: "http://purl.oclc.org/ooxml/drawingml/main",
        office.P: "http://purl.oclc.org/ooxml/presentationml/main",
    }
    out = {}
    for name, part in entries(data).items():
        for transitional, spelled in namespaces.items():
            part = part.replace(transitional.encode(), spelled.encode())
        out[name] = part
    return office._zip(list(out.items()))


def test_strict_open_xml_documents_and_decks_are_read_and_written_as_transitional_ones():
    paragraphs = [[("Hello ", ""), ("big", "b"), (" world.", "")], [("Page ", ""), ("7", "complex PAGE")]]
    extracted = files.read("report.docx", strict(office.docx(paragraphs)), LIMIT)
    assert extracted.texts == ("Hello big world.", "Page ")
    out = etree.fromstring(entries(swapped(extracted))["word/document.xml"])
    strict_w = "{http://purl.oclc.org/ooxml/wordprocessingml/main}"
    assert [t.text for t in out.iter(f"{strict_w}t")] == ["hELLO ", "BIG ", "WORLD.", "pAGE ", "7"]
    extracted = files.read("deck.pptx", strict(office.pptx([[[("Title ", "b"), ("slide", "")]]])), LIMIT)
    assert extracted.texts == ("Title slide",)
    out = etree.fromstring(entries(swapped(extracted))["ppt/slides/slide1.xml"])
    assert [t.text for t in out.iter("{http://purl.oclc.org/ooxml/drawingml/main}t")] == ["tITLE ", "SLIDE"]


def test_docx_an_absolute_tab_parts_a_headers_words_as_a_tab_does():
    # Word's "Blank (Three Columns)" header: left and right parts around positional tabs
    tab = '<w:r><w:ptab w:relativeTo="margin" w:alignment="right" w:leader="none"/></w:r>'
    header = w_part("hdr", w_paragraph(w_run("Annual report"), tab, w_run("Confidential")))
    data = office._zip([("word/document.xml", w_part("document", "<w:body/>")), ("word/header1.xml", header)])
    extracted = files.read("a.docx", data, LIMIT)
    assert extracted.texts == ("Annual report\tConfidential",)
    out = xml(extracted.write(["Jahresbericht\tVertraulich"]), "word/header1.xml")
    assert [t.text for t in out.iter(f"{W}t")] == ["Jahresbericht", "Vertraulich"]


def test_docx_field_results_keep_their_numbers_and_the_words_around_them_are_translated():
    # Word shows a field's stored result and does not compute it again on opening
    paragraphs = [
        [("Figure ", ""), ("3", "field SEQ Figure \\* ARABIC"), (": sales on Monday.", "")],
        [("As shown in Figure ", ""), ("3", "complex REF _Ref1 \\h"), (" on page 12.", "")],
        [("See ", ""), ("our site", 'complex HYPERLINK "https://example.com"'), (".", "")],  # a link's own words
    ]
    data = office.docx(
        paragraphs, footer=[[("Page ", ""), ("7", "complex PAGE"), (" of ", ""), ("9", "field NUMPAGES")]]
    )
    extracted = files.read("report.docx", data, LIMIT)
    assert extracted.texts == (
        "Figure  : sales on Monday.",
        "As shown in Figure   on page 12.",
        "See our site.",
        "Page   of ",
    )
    out = extracted.write(
        ["Abbildung: Umsatz am Montag.", "Siehe dazu Abbildung auf Seite 12.", "Siehe unsere Seite.", "Seite von"]
    )
    document, footer = xml(out, "word/document.xml"), xml(out, "word/footer1.xml")
    shown = ["".join(t.text or "" for t in p.iter(f"{W}t")) for p in [*document.iter(f"{W}p"), *footer.iter(f"{W}p")]]
    assert shown == [
        "Abbildung: 3 Umsatz am Montag.",
        "Siehe dazu Abbildung 3 auf Seite 12.",
        "Siehe unsere Seite.",
        "Seite 7 von 9",
    ]
    assert [i.text for i in document.iter(f"{W}instrText")] == [" REF _Ref1 \\h ", ' HYPERLINK "https://example.com" ']


def with_parts(data: bytes, parts: dict[str, str]) -> bytes:
    return office._zip([*entries(data).items(), *parts.items()])


CHART = (
    f'<c:chartSpace xmlns:c="http://schemas.openxmlformats.org/drawingml/2006/chart" xmlns:a="{office.A}"><c:chart>'
    "<c:title><c:tx><c:rich><a:bodyPr/><a:p><a:r><a:t>Sales by region</a:t></a:r></a:p></c:rich></c:tx></c:title>"
    '<c:plotArea><c:barChart><c:ser><c:tx><c:strRef><c:f>Sheet1!$B$1</c:f><c:strCache><c:pt idx="0">'
    "<c:v>Sales</c:v></c:pt></c:strCache></c:strRef></c:tx></c:ser></c:barChart></c:plotArea></c:chart></c:chartSpace>"
)
SMARTART = (
    '<dgm:dataModel xmlns:dgm="http://schemas.openxmlformats.org/drawingml/2006/diagram" '
    f'xmlns:a="{office.A}"><dgm:ptLst><dgm:pt modelId="1"><dgm:t><a:bodyPr/><a:p><a:r><a:t>Plan the work</a:t>'
    "</a:r></a:p></dgm:t></dgm:pt></dgm:ptLst></dgm:dataModel>"
)


def test_chart_titles_and_smartart_words_are_translated_in_documents_and_decks():
    # the chart's series name comes from its embedded workbook's cells (the cache), not its words
    data = with_parts(office.docx([[("Body.", "")]]), {"word/charts/chart1.xml": CHART})
    extracted = files.read("report.docx", data, LIMIT)
    assert extracted.texts == ("Body.", "Sales by region")
    chart = xml(swapped(extracted), "word/charts/chart1.xml")
    assert [t.text for t in chart.iter(f"{A}t")] == ["sALES BY REGION"]
    assert chart.findtext(".//{*}v") == "Sales"
    parts = {"ppt/charts/chart1.xml": CHART, "ppt/diagrams/data1.xml": SMARTART}
    extracted = files.read("deck.pptx", with_parts(office.pptx([[[("Title", "")]]]), parts), LIMIT)
    assert extracted.texts == ("Title", "Sales by region", "Plan the work")
    assert [t.text for t in xml(swapped(extracted), "ppt/diagrams/data1.xml").iter(f"{A}t")] == ["pLAN THE WORK"]


def test_pptx_every_slide_and_its_runs():
    data = office.pptx([[[("Title ", "b"), ("slide", "")]], [[("Second slide text.", "i")]]])
    extracted = files.read("deck.pptx", data, LIMIT)
    assert extracted.texts == ("Title slide", "Second slide text.")
    out = swapped(extracted)
    assert entries(out)["ppt/media/image1.png"] == office.PNG
    slide1 = [(t.text, t.getparent().find(f"{A}rPr").get("b")) for t in xml(out, "ppt/slides/slide1.xml").iter(f"{A}t")]
    assert slide1 == [("tITLE ", "1"), ("SLIDE", None)]
    assert [t.text for t in xml(out, "ppt/slides/slide2.xml").iter(f"{A}t")] == ["sECOND SLIDE TEXT."]


@pytest.mark.parametrize("kind", ["odt", "odp"])
def test_opendocument_spans_keep_their_styles_and_mimetype_stays_first_and_stored(kind):
    paragraphs = [[("Before ", ""), ("styled", "b"), (" after.", "")], [("Second.", "")]]
    data = office.odt(paragraphs) if kind == "odt" else office.odp([paragraphs])
    extracted = files.read(f"file.{kind}", data, LIMIT)
    assert extracted.texts == ("Before styled after.", "Second.")
    out = swapped(extracted)
    with zipfile.ZipFile(io.BytesIO(out)) as package:
        first = package.infolist()[0]
        assert (first.filename, first.compress_type) == ("mimetype", zipfile.ZIP_STORED)
    assert entries(out)["Pictures/image1.png"] == office.PNG
    spans = [(s.get(f"{TEXT}style-name"), s.text) for s in xml(out, "content.xml").iter(f"{TEXT}span")]
    assert spans == [("B", "STYLED ")]
    first_paragraph = next(xml(out, "content.xml").iter(f"{TEXT}p"))
    assert "".join(first_paragraph.itertext()) == "bEFORE STYLED AFTER."


def test_odt_page_headers_and_footers_are_translated():
    # Writer keeps them in the page style (styles.xml), shown on every page above and below the body
    data = office.odt([[("Body text.", "")]], header="Quarterly report", footer="Company confidential")
    extracted = files.read("file.odt", data, LIMIT)
    assert extracted.texts == ("Body text.", "Quarterly report", "Company confidential")
    styles = xml(swapped(extracted), "styles.xml")
    assert [p.text for p in styles.iter(f"{TEXT}p")] == ["qUARTERLY REPORT", "cOMPANY CONFIDENTIAL"]


def test_odp_slide_footers_are_translated():
    # Impress declares the footer once in content.xml; every slide showing a footer shows it
    data = office.odp([[[("Slide text.", "")]]])
    footer = (
        b'<presentation:footer-decl xmlns:presentation="urn:oasis:names:tc:opendocument:xmlns:presentation:1.0" '
        b'presentation:name="ftr1">Company confidential</presentation:footer-decl>'
    )
    parts = entries(data)
    parts["content.xml"] = parts["content.xml"].replace(b"<office:presentation>", b"<office:presentation>" + footer)
    extracted = files.read("deck.odp", office._zip(list(parts.items()), stored_first=True), LIMIT)
    assert extracted.texts == ("Company confidential", "Slide text.")
    out = xml(swapped(extracted), "content.xml")
    assert out.findtext(".//{*}footer-decl") == "cOMPANY CONFIDENTIAL"


def test_opendocument_spaces_tabs_and_breaks_stay_where_they_are():
    content = (
        '<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
        'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body><office:text>'
        '<text:p>One<text:s text:c="2"/>two<text:tab/>three<text:line-break/>four</text:p>'
        "</office:text></office:body></office:document-content>"
    )
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as package:
        package.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        package.writestr("content.xml", content)
    extracted = files.read("a.odt", data.getvalue(), LIMIT)
    assert extracted.texts == ("One  two\tthree\nfour",)
    paragraph = next(xml(swapped(extracted), "content.xml").iter(f"{TEXT}p"))
    assert [child.tag.split("}")[1] for child in paragraph] == ["s", "tab", "line-break"]
    assert [paragraph.text, *(c.tail for c in paragraph)] == ["oNE", "TWO", "THREE", "FOUR"]


def test_epub_pages_named_with_spaces_or_other_scripts_are_translated():
    # the manifest's hrefs are URLs, percent-encoded as Sigil and Calibre write them
    renamed = {"OEBPS/chapter0.xhtml": "OEBPS/Kapitel 1.xhtml", "OEBPS/chapter1.xhtml": "OEBPS/第二章.xhtml"}
    hrefs = {
        b'href="chapter0.xhtml"': b'href="Kapitel%201.xhtml"',
        b'href="chapter1.xhtml"': b'href="%E7%AC%AC%E4%BA%8C%E7%AB%A0.xhtml"',
    }
    parts = []
    for name, part in entries(office.epub(["<p>First chapter.</p>", "<p>Second chapter.</p>"])).items():
        for before, after in hrefs.items():
            part = part.replace(before, after) if name.endswith(".opf") else part
        parts.append((renamed.get(name, name), part))
    extracted = files.read("book.epub", office._zip(parts, stored_first=True), LIMIT)
    assert [t[t.index("<p>") :] for t in extracted.texts] == [
        "<p>First chapter.</p></body></html>",
        "<p>Second chapter.</p></body></html>",
    ]
    assert b"sECOND CHAPTER." in entries(swapped(extracted))["OEBPS/第二章.xhtml"]


def test_epub_pages_are_html_documents_and_the_rest_is_kept():
    data = office.epub(["<h1>Chapter one</h1><p>It was <b>late</b>.</p>", '<p><img src="image1.png"/></p>'])
    extracted = files.read("book.epub", data, LIMIT)
    assert extracted.format == "html"
    assert len(extracted.texts) == 2 and "<b>late</b>" in extracted.texts[0]
    translated = extracted.write([t.replace("Chapter one", "Kapitel eins") for t in extracted.texts])
    after = entries(translated)
    assert b"<h1>Kapitel eins</h1>" in after["OEBPS/chapter0.xhtml"]
    assert after["OEBPS/chapter1.xhtml"] == entries(data)["OEBPS/chapter1.xhtml"]
    assert after["OEBPS/content.opf"] == entries(data)["OEBPS/content.opf"]


def test_srt_cues_are_one_sentence_put_back_on_as_many_lines():
    data = (
        b"1\r\n00:00:01,000 --> 00:00:02,500\r\nIt is three o'clock\r\nin the afternoon.\r\n\r\n"
        b"2\r\n00:00:03,000 --> 00:00:04,000\r\nBye.\r\n\r\n"
    )
    extracted = files.read("movie.srt", data, LIMIT)
    assert extracted.texts == ("It is three o'clock in the afternoon.", "Bye.")
    out = extracted.write(["Es ist drei Uhr am Nachmittag.", "Tschüss."]).decode()
    assert out == (
        "1\r\n00:00:01,000 --> 00:00:02,500\r\nEs ist drei\r\nUhr am Nachmittag.\r\n\r\n"
        "2\r\n00:00:03,000 --> 00:00:04,000\r\nTschüss.\r\n\r\n"
    )


def test_srt_lines_ended_by_a_carriage_return_alone_stay_so():
    # classic Mac line endings, as old subtitle tools save them: a cue's second line is no LF
    data = (
        b"1\r00:00:01,000 --> 00:00:02,500\rIt is three o'clock\rin the afternoon.\r\r"
        b"2\r00:00:03,000 --> 00:00:04,000\rBye.\r"
    )
    out = files.read("movie.srt", data, LIMIT).write(["Es ist drei Uhr am Nachmittag.", "Tschüss."]).decode()
    assert out == (
        "1\r00:00:01,000 --> 00:00:02,500\rEs ist drei\rUhr am Nachmittag.\r\r"
        "2\r00:00:03,000 --> 00:00:04,000\rTschüss.\r"
    )


def test_srt_styling_tags_go_to_the_html_mode_and_position_overrides_stay_in_front():
    data = (
        "1\n00:00:01,000 --> 00:00:02,000\n<i>It is late.</i>\n\n"
        "2\n00:00:03,000 --> 00:00:04,000\n{\\an8}Tom & Jerry <3\nsay bye.\n\n"
        '3\n00:00:05,000 --> 00:00:06,000\n<font color="#ff0000">Run!</font>\n\n'
    )
    extracted = files.read("movie.srt", data.encode(), LIMIT)
    assert extracted.format == "html"  # one format a file: every cue, so a plain one's & and < are escaped
    assert extracted.texts == (
        "<i>It is late.</i>",
        "Tom &amp; Jerry &lt;3 say bye.",
        '<font color="#ff0000">Run!</font>',
    )
    out = extracted.write(
        ["<i>Es ist spät.</i>", "Tom &amp; Jerry &lt;3 sagen tschüss.", '<font color="#ff0000">Lauf!</font>']
    )
    assert out.decode() == (
        "1\n00:00:01,000 --> 00:00:02,000\n<i>Es ist spät.</i>\n\n"
        "2\n00:00:03,000 --> 00:00:04,000\n{\\an8}Tom & Jerry <3\nsagen tschüss.\n\n"
        '3\n00:00:05,000 --> 00:00:06,000\n<font color="#ff0000">Lauf!</font>\n\n'
    )
    # billed as counted against --max-file-chars: an escaped & or < is the one character the cue shows
    counted = len("<i>It is late.</i>" + "Tom & Jerry <3 say bye." + '<font color="#ff0000">Run!</font>')
    assert extracted.characters == counted == jobs.read_text("movie.srt", data.encode(), LIMIT).characters
    files.read("movie.srt", data.encode(), LIMIT, max_chars=counted)
    plain = files.read("plain.srt", b"1\n00:00:01,000 --> 00:00:02,000\n{\\an8}Tom & Jerry\n", LIMIT)
    assert (plain.format, plain.texts) == ("text", ("Tom & Jerry",))


def test_markdown_is_one_document_after_its_front_matter():
    data = b"---\ntitle: A page\n---\n# Title\n\n- first item\n"
    extracted = files.read("notes.md", data, LIMIT)
    assert extracted.texts == ("# Title\n\n- first item\n",) and extracted.format == "markdown"
    assert extracted.write(["# Titel\n\n- erster Punkt\n"]) == b"---\ntitle: A page\n---\n# Titel\n\n- erster Punkt\n"
    toml = files.read("hugo.md", b"+++\ntitle = 'A'\n+++\nText.\n", LIMIT)
    assert toml.texts == ("Text.\n",) and toml.write(["Text DE.\n"]) == b"+++\ntitle = 'A'\n+++\nText DE.\n"
    assert files.read("rule.md", b"---\nNot closed.\n", LIMIT).texts == ("---\nNot closed.\n",)  # a rule, then text


def test_txt_and_html_are_one_document_each_and_a_bom_is_kept():
    txt = files.read("a.txt", "\ufeffLine one.\n\nLine two.\n".encode(), LIMIT)
    assert txt.texts == ("Line one.\n\nLine two.\n",) and txt.format == "text"
    assert txt.write(["X"]) == "\ufeffX".encode()
    page = files.read("a.html", b"<p>Hi</p>", LIMIT)
    assert page.format == "html" and page.texts == ("<p>Hi</p>",)


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be", "utf-8"])
def test_a_unicode_file_with_a_byte_order_mark_comes_back_in_its_own_encoding(codec):
    """What Windows tools save as "Unicode" (Notepad, Excel's Unicode text, subtitle editors):
    UTF-16 with a byte-order mark. The translation is written as the file was."""
    sent = "\ufeff1\r\n00:00:01,000 --> 00:00:02,000\r\nGrüße, Monday.\r\n\r\n"
    srt = files.read("sub.srt", sent.encode(codec), LIMIT)
    assert srt.texts == ("Grüße, Monday.",) and srt.media_type.endswith("charset=" + codec[:6])
    assert srt.write(["Montag."]) == sent.replace("Grüße, Monday.", "Montag.").encode(codec)
    txt = files.read("a.txt", "\ufeffLine one.\n".encode(codec), LIMIT)
    assert txt.texts == ("Line one.\n",) and txt.write(["Zeile."]) == "\ufeffZeile.".encode(codec)


@pytest.mark.parametrize(
    ("name", "data", "words"),
    [
        ("report.pdf", b"%PDF-1.7", "not a readable PDF"),
        ("old.doc", b"\xd0\xcf\x11\xe0", "save it as .docx"),
        ("image.png", office.PNG, "file format not supported"),
        ("noext", b"text", "file format not supported"),
        ("broken.docx", office.docx(STYLED)[:200], "not a valid .docx"),
        ("fake.docx", b"PK\x03\x04 this is not a zip", "not a valid .docx"),
        ("nodoc.docx", office.pptx([[[("x", "")]]]), "no word/document.xml"),
        ("empty.txt", b"", "empty file"),
        ("blank.txt", b"   \n\n", "no text to translate"),
        ("latin1.txt", "Grüße".encode("latin-1"), "not UTF-8 text .invalid start byte at byte 2.: save it as UTF-8"),
        ("utf16-no-mark.txt", "Grüße".encode("utf-16-le"), "not UTF-8 text"),
        ("odd.txt", codecs.BOM_UTF16_LE + b"G\x00r", "not UTF-16 text as its byte-order mark says"),
        ("bad.srt", b"1\nnot a timestamp\nHello\n", "SubRip"),
        (  # read as text, cue 2 would be merged into cue 1 and its own text lost
            "typo.srt",
            b"1\n00:00:01,000 --> 00:00:02,000\nHi.\n\n2\n00:00:03,000 -> 00:00:04,000\nBye.\n\n",
            r"SubRip subtitles: line 6 \('00:00:03,000 -> 00:00:04,000'\), after the index line '2', is not a timing",
        ),
        ("no-container.epub", office.docx(STYLED), "META-INF/container.xml"),
    ],
)
def test_bad_files_are_refused_with_a_reason(name, data, words):
    with pytest.raises(FileRefused, match=words) as caught:
        files.read(name, data, LIMIT)
    assert caught.value.status == "INVALID_ARGUMENT"
    if "not supported" in words or "layout" in words:
        assert ".docx" in str(caught.value) and ".epub" in str(caught.value)  # names what is supported


def test_a_zip_bomb_and_a_zip_of_many_entries_are_refused_from_the_directory():
    bomb = office.zip_bomb(8 * LIMIT)  # a few KB that inflate past 4 x the file limit
    assert len(bomb) < LIMIT // 20
    with pytest.raises(FileRefused, match=r"unpacks to 8,388,6\d\d bytes; this server unpacks at most 4,194,304"):
        files.read("bomb.docx", bomb, LIMIT)
    with pytest.raises(FileRefused, match="10,001 entries"):
        files.read("many.docx", office.many_entries(10_000), LIMIT)


def test_a_docx_of_100000_empty_paragraphs_has_no_text_to_translate():
    with pytest.raises(FileRefused, match="no text to translate"):
        files.read("empty.docx", office.docx([[("", "")]] * 100_000), 64 << 20)


def test_an_entity_bomb_in_a_part_is_not_expanded():
    lol = (
        '<?xml version="1.0"?><!DOCTYPE w [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
        '<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]>'
        f'<w:document xmlns:w="{W[1:-1]}"><w:body><w:p><w:r><w:t>x &c; y</w:t></w:r></w:p></w:body></w:document>'
    )
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as package:
        package.writestr("word/document.xml", lol)
    extracted = files.read("lol.docx", data.getvalue(), LIMIT)
    assert sum(map(len, extracted.texts)) < 20


# ------------------------------------------------------------------ placement


def test_placement_by_proportion_of_words():
    unit = Unit(("The quick ", "brown", " fox jumps."), ("", ""))
    assert place(unit, "Der schnelle braune Fuchs springt.") == ["Der schnelle ", "braune ", "Fuchs springt."]


def test_placement_puts_everything_on_the_first_run_when_unsure():
    split_word = Unit(("H", "ello world"), ("",))
    assert place(split_word, "Hallo Welt") == ["Hallo Welt", ""]
    too_few_words = Unit(("one ", "two ", "three"), ("", ""))
    assert place(too_few_words, "eins zwei") == ["eins zwei", "", ""]


def test_placement_empties_runs_without_words_and_respects_fixed_joints():
    unit = Unit(("Name", ":", " value here"), ("", ""))
    assert place(unit, "Name: Wert hier") == ["Name: ", "", "Wert hier"]
    tabbed = Unit(("left", "right side"), ("\t",))
    assert place(tabbed, "links rechte Seite") == ["links", "rechte Seite"]  # the tab stays between them


def test_aligned_placement_gives_each_run_the_words_it_covers():
    unit = Unit(("Monday, ", "March", " 3, 2025"), ("", ""))
    german = "Montag, 3. März 2025"
    assert place(unit, german) == ["Montag, ", "3. ", "März 2025"]  # by proportion: the bold run gets "3."
    # the words each run covers (documents.placement.covered_ranges): Montag run 0, März run 1
    assert place_aligned(unit, german, [0, 1, 1, 2]) == ["Montag, ", "3. März ", "2025"]
    # 3. is covered by the last run, which cannot come before the bold one: it stays with Montag,
    # as html's "Montag, 3. <b>März</b> 2025" leaves it outside the bold
    assert place_aligned(unit, german, [0, 2, 1, 2]) == ["Montag, 3. ", "März ", "2025"]
    assert place_aligned(unit, german, [None] * 4) == place(unit, german)  # nothing to go by
    assert place_aligned(unit, german, None) == place(unit, german)
    assert place_aligned(unit, german, [0, 1]) == place(unit, german)  # not one preference per word


def test_a_run_that_covers_no_word_is_emptied_and_keeps_its_style():
    # "on <b>Friday, January 9, 2026</b> at <i>3:45 PM</i>": "um" is linked to 3:45, so the plain
    # " at " run covers nothing; every run having a word put 2026 there and took the bold off it
    unit = Unit(("on ", "Friday, January 9, 2026", " at ", "3:45 PM"), ("", "", ""))
    german = "am Freitag, 9. Januar 2026 um 15:45 Uhr"
    wanted = ["am ", "Freitag, 9. Januar 2026 ", "", "um 15:45 Uhr"]
    assert place_aligned(unit, german, [0, 1, 1, 1, 1, 3, 3, 3]) == wanted
    # a word no run covers goes to a run that covers none (plain text outside every element)
    assert place_aligned(unit, german, [0, 1, 1, 1, None, 3, 3, 3]) == [
        "am ",
        "Freitag, 9. Januar ",
        "2026 ",
        "um 15:45 Uhr",
    ]
    unit = Unit(("We met ", "on Monday"), ("",))
    assert place_aligned(unit, "Wir trafen uns am Montag", [1, 1, 1, 1, 1]) == ["", "Wir trafen uns am Montag"]
    assert place_aligned(unit, "Wir trafen uns am Montag", [0, 0, 0, 1, 1]) == ["Wir trafen uns ", "am Montag"]


def test_aligned_placement_keeps_the_unsure_cases():
    split_word = Unit(("H", "ello world"), ("",))
    assert place_aligned(split_word, "Hallo Welt", [0, 1]) == ["Hallo Welt", ""]
    tabbed = Unit(("left", "right side"), ("\t",))
    assert place_aligned(tabbed, "links rechte Seite", [0, 1, 1]) == ["links", "rechte Seite"]


def test_run_at_maps_characters_to_runs_and_joints():
    unit = Unit(("ab", "c"), ("\t",))
    assert unit.text == "ab\tc" and run_at(unit) == [0, 0, None, 1]


@given(st.lists(st.one_of(st.none(), st.integers(0, 5)), min_size=1, max_size=40), st.integers(1, 6))
@settings(max_examples=300, deadline=None)
def test_the_numpy_segmentation_of_long_paragraphs_is_the_loop_one(wants, m):
    # long paragraphs take the vectorised recurrence (run_placement._SMALL): the same split, ties included
    wants = [w if w is None or w < m else None for w in wants]
    assert run_placement._segment_numpy(wants, m) == run_placement._segment_loop(wants, m)


def test_a_note_inside_a_paragraph_is_read_on_its_own_after_it_in_document_order():
    content = (
        '<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
        'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body><office:text>'
        "<text:p>Before.</text:p>"
        "<text:p>Main text<text:note><text:note-body><text:p>The note.</text:p><text:p>Its second line."
        "</text:p></text:note-body></text:note> goes on.</text:p>"
        "<text:h>After.</text:h></office:text></office:body></office:document-content>"
    )
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as package:
        package.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        package.writestr("content.xml", content)
    extracted = files.read("a.odt", data.getvalue(), LIMIT)
    assert extracted.texts == ("Before.", "Main text goes on.", "The note.", "Its second line.", "After.")
    out = etree.tostring(xml(swapped(extracted), "content.xml")).decode()
    assert (
        "<text:p>mAIN TEXT <text:note><text:note-body><text:p>tHE NOTE.</text:p><text:p>iTS SECOND LINE.</text:p>"
        in out
    )
    assert "</text:note>GOES ON.</text:p><text:h>aFTER.</text:h>" in out


def test_runs_that_look_alike_are_one_styled_stretch_and_unseen_properties_are_plain():
    """What a paragraph's sentences are segmented at (``run_placement.styled_spans``): Word splits runs
    at edits and marks their language, which no reader sees; bold and a link are seen."""
    paragraph = w_paragraph(
        w_run("Monday, ", '<w:lang w:val="en-US"/>'),
        w_run("March", "<w:b/>"),
        w_run(" 3", '<w:b/><w:lang w:val="en-GB"/><w:noProof/>'),
        w_run(", 2025 at ", ""),
        "<w:hyperlink r:id='rId9'>" + w_run("3:45 PM", HYPERLINK) + "</w:hyperlink>",
    )
    source = office._zip([("word/document.xml", w_part("document", f"<w:body>{paragraph}</w:body>"))])
    (unit,) = files.read("a.docx", source, 1 << 20).units
    text = unit.text
    assert styled_spans(unit) == ((text.index("March"), text.index(", 2025")), (text.index("3:45"), len(text)))
    (slide,) = files.read("a.pptx", office.pptx([[[("Monday", ""), (", ", "b"), ("March 3", "")]]]), 1 << 20).units
    assert styled_spans(slide) == ((6, 8),)  # the plain runs' lang="en-US" is not a style
