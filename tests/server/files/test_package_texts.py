"""Text of office packages and books outside their body paragraphs: an EPUB 2 book's table of
contents (toc.ncx), hyphens Word keeps as elements inside a word, OpenDocument ruby, a deck's
comments. The "translation" swaps the case of every letter, so a test sees which characters were
replaced."""

from __future__ import annotations

import pytest
from lxml import etree

from attnserve.server import files
from attnserve.server.files import jobs
from tests.server.files.test_adversarial_translations import w_paragraph, w_part, w_run
from tests.server.files.test_formats import LIMIT, entries, swapped, xml
from tests.support import office_files as office

NCX_NS = "http://www.daisy.org/z3986/2005/ncx/"
NCX = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<!DOCTYPE ncx PUBLIC "-//NISO//DTD ncx 2005-1//EN" "http://www.daisy.org/z3986/2005/ncx-2005-1.dtd">\n'
    f'<ncx xmlns="{NCX_NS}" version="2005-1"><head><meta name="dtb:uid" content="urn:uuid:1"/></head>'
    "<docTitle><text>The Long Walk</text></docTitle><docAuthor><text>Mary Rose</text></docAuthor><navMap>"
    '<navPoint id="p1" playOrder="1"><navLabel><text>Chapter One &amp; the Road</text></navLabel>'
    '<content src="chapter0.xhtml"/><navPoint id="p2" playOrder="2"><navLabel><text>At Home</text></navLabel>'
    '<content src="chapter0.xhtml#home"/></navPoint></navPoint></navMap>'
    '<pageList><pageTarget id="pg7" type="normal" value="7"><navLabel><text>vii</text></navLabel>'
    '<content src="chapter0.xhtml#pg7"/></pageTarget></pageList></ncx>'
)


def epub2(ncx_name: str) -> bytes:
    """An EPUB 2 book whose NCX the manifest names ``ncx_name`` (any name: the spine's toc points
    at it by id), with a stray toc.ncx the manifest does not list."""
    parts = entries(office.epub(["<p>First chapter.</p>"]))
    item = f'<item id="ncx" href="{ncx_name}" media-type="application/x-dtbncx+xml"/>'
    parts["OEBPS/content.opf"] = (
        parts["OEBPS/content.opf"]
        .replace(b'version="3.0"', b'version="2.0"')
        .replace(b"<manifest>", f"<manifest>{item}".encode())
        .replace(b"<spine>", b'<spine toc="ncx">')
    )
    return office._zip([*parts.items(), (f"OEBPS/{ncx_name}", NCX), ("OEBPS/toc.ncx", NCX)], stored_first=True)


def test_an_epub2_table_of_contents_is_translated_and_its_author_kept():
    data = epub2("nav/book.ncx")
    extracted = files.read("book.epub", data, LIMIT)
    assert extracted.format == "html"
    # the title and each entry's label, in the html mode as a page's text (its & escaped)
    assert extracted.texts[:3] == ("The Long Walk", "Chapter One &amp; the Road", "At Home")
    assert "First chapter." in extracted.texts[3] and len(extracted.texts) == 4
    out = entries(swapped(extracted))
    toc = etree.fromstring(out["OEBPS/nav/book.ncx"])
    assert [t.text for t in toc.iter(f"{{{NCX_NS}}}text")] == [
        "tHE lONG wALK",
        "Mary Rose",  # a person's name
        "cHAPTER oNE & THE rOAD",
        "aT hOME",
        "vii",  # the printed book's page number
    ]
    assert out["OEBPS/nav/book.ncx"].startswith(b"<?xml") and b"<!DOCTYPE ncx PUBLIC" in out["OEBPS/nav/book.ncx"]
    assert out["OEBPS/toc.ncx"] == NCX.encode()  # not in the manifest: not the book's
    assert [content.get("src") for content in toc.iter(f"{{{NCX_NS}}}content")] == [
        "chapter0.xhtml",
        "chapter0.xhtml#home",
        "chapter0.xhtml#pg7",
    ]
    # the page's text (its <title> and paragraph, not its markup) and the labels'
    counted = len("Chapter 0" + "First chapter.") + len("The Long Walk" + "Chapter One & the Road" + "At Home")
    # billed as counted: the label's & is one character, though the html mode is sent &amp;
    assert extracted.characters == counted == jobs.read_text("book.epub", data, LIMIT).characters
    files.read("book.epub", data, LIMIT, max_chars=counted)
    with pytest.raises(files.TooManyCharacters):  # the labels count against --max-file-chars
        files.read("book.epub", data, LIMIT, max_chars=counted - 1)


W = f"{{{office.W}}}"
E_MAIL = {
    "in its run": "<w:r><w:t>e</w:t><w:noBreakHyphen/><w:t>mail</w:t></w:r>",
    "a run of its own": "<w:r><w:t>e</w:t></w:r><w:r><w:noBreakHyphen/></w:r><w:r><w:t>mail</w:t></w:r>",
}


def shown(paragraph: etree._Element) -> str:
    """The paragraph's words as Word shows them, a non-breaking hyphen element as U+2011."""
    return "".join(
        "\u2011" if e.tag == f"{W}noBreakHyphen" else e.text or "" for e in paragraph.iter(f"{W}t", f"{W}noBreakHyphen")
    )


@pytest.mark.parametrize("written", E_MAIL.values(), ids=E_MAIL)
def test_docx_a_word_with_a_hyphen_element_reaches_the_model_whole(written):
    # Ctrl+Shift+- in Word: <w:noBreakHyphen/>, a hyphen no line breaks at; Ctrl+-: <w:softHyphen/>
    body = w_paragraph(w_run("Send an "), written, w_run(" today.", "<w:b/>"))
    body += w_paragraph("<w:r><w:t>co</w:t><w:softHyphen/><w:t>operate</w:t></w:r>")
    data = office._zip([("word/document.xml", w_part("document", f"<w:body>{body}</w:body>"))])
    extracted = files.read("a.docx", data, LIMIT)
    assert extracted.texts == ("Send an e\u2011mail today.", "cooperate")
    out = xml(extracted.write(["Schick heute eine E\u2011Mail, bitte.", "kooperieren"]), "word/document.xml")
    first, second = out.iter(f"{W}p")
    assert shown(first) == "Schick heute eine E\u2011Mail, bitte."
    assert len(list(first.iter(f"{W}noBreakHyphen"))) == 1
    assert "".join(first.find(f".//{W}b/../..").itertext()).strip()  # the bold run keeps words, not all on one run
    assert shown(second) == "kooperieren" and second.find(f".//{W}softHyphen") is None


TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"


@pytest.mark.parametrize("kind", ["odt", "odp"])
def test_opendocument_ruby_bases_are_read_in_the_sentence_and_readings_emptied_with_their_words(kind):
    # Writer's Asian phonetic guide: かんじ (text:ruby-text) shown over 漢字 (text:ruby-base)
    ruby = (
        '<text:ruby text:style-name="Ru1"><text:ruby-base>漢字</text:ruby-base>'
        "<text:ruby-text>かんじ</text:ruby-text></text:ruby>"
    )
    data = office.odt([[("この", "")]]) if kind == "odt" else office.odp([[[("この", "")]]])
    parts = entries(data)
    parts["content.xml"] = parts["content.xml"].replace("この".encode(), f"この{ruby}を読む。".encode())
    extracted = files.read(f"a.{kind}", office._zip(list(parts.items()), stored_first=True), LIMIT)
    assert extracted.texts == ("この漢字を読む。",)
    out = xml(extracted.write(["Read this kanji."]), "content.xml")
    paragraph = next(p for p in out.iter(f"{TEXT}p") if p.find(f".//{TEXT}ruby") is not None)
    assert "".join(paragraph.itertext()) == "Read this kanji."  # no かんじ over words that are gone
    assert out.find(f".//{TEXT}ruby").get(f"{TEXT}style-name") == "Ru1"


P188 = "http://schemas.microsoft.com/office/powerpoint/2018/8/main"
LEGACY_COMMENTS = (
    f'{office.DECLARATION}<p:cmLst xmlns:p="{office.P}"><p:cm authorId="0" dt="2024-01-02T03:04:05" idx="1">'
    '<p:pos x="10" y="10"/><p:text>Please check the totals.</p:text></p:cm></p:cmLst>'
)
MODERN_COMMENTS = (
    f'{office.DECLARATION}<p188:cmLst xmlns:a="{office.A}" xmlns:p188="{P188}">'
    '<p188:cm id="{C1}" authorId="{A1}" created="2024-01-02T03:04:05"><p188:txBody><a:bodyPr/>'
    "<a:p><a:r><a:t>Is this </a:t></a:r><a:r><a:rPr b='1'/><a:t>final</a:t></a:r><a:r><a:t>?</a:t></a:r></a:p>"
    '</p188:txBody><p188:replyLst><p188:reply id="{R1}" authorId="{A2}" created="2024-01-02T04:00:00">'
    "<p188:txBody><a:bodyPr/><a:p><a:r><a:t>Yes, it is.</a:t></a:r></a:p></p188:txBody></p188:reply>"
    "</p188:replyLst></p188:cm></p188:cmLst>"
)


def test_pptx_comments_are_translated_as_a_docx_s_are():
    # PowerPoint 365's threaded comments and their replies, and the older ones; their authors are
    # in commentAuthors.xml / authors.xml, which stay as they are
    authors = (
        f'{office.DECLARATION}<p:cmAuthorLst xmlns:p="{office.P}"><p:cmAuthor id="0" name="Ann Lee"/></p:cmAuthorLst>'
    )
    parts = {
        "ppt/comments/comment1.xml": LEGACY_COMMENTS,
        "ppt/comments/modernComment_256_6F1D3E2A.xml": MODERN_COMMENTS,
        "ppt/commentAuthors.xml": authors,
    }
    data = office._zip([*entries(office.pptx([[[("Sales grew.", "")]]])).items(), *parts.items()])
    extracted = files.read("deck.pptx", data, LIMIT)
    assert extracted.texts == ("Sales grew.", "Please check the totals.", "Is this final?", "Yes, it is.")
    out = entries(swapped(extracted))
    assert etree.fromstring(out["ppt/comments/comment1.xml"]).findtext(f"{{{office.P}}}cm/{{{office.P}}}text") == (
        "pLEASE CHECK THE TOTALS."
    )
    modern = etree.fromstring(out["ppt/comments/modernComment_256_6F1D3E2A.xml"])
    assert [t.text or "" for t in modern.iter(f"{{{office.A}}}t")] == ["iS THIS ", "FINAL?", "", "yES, IT IS."]
    assert out["ppt/commentAuthors.xml"] == authors.encode()


def test_docx_a_hyphen_with_no_word_before_it_is_the_next_words():
    # -5 at a paragraph's start, or after a tab: the hyphen has no word before it to join
    body = w_paragraph('<w:r><w:noBreakHyphen/><w:t xml:space="preserve">5 degrees</w:t></w:r>')
    body += w_paragraph(w_run("Low:"), "<w:r><w:tab/></w:r><w:r><w:noBreakHyphen/></w:r><w:r><w:t>12</w:t></w:r>")
    data = office._zip([("word/document.xml", w_part("document", f"<w:body>{body}</w:body>"))])
    extracted = files.read("a.docx", data, LIMIT)
    assert extracted.texts == ("\u20115 degrees", "Low:\t\u201112")
    out = xml(extracted.write(["\u20115 Grad", "Tief:\t\u201112"]), "word/document.xml")
    first, second = out.iter(f"{W}p")
    assert shown(first) == "\u20115 Grad"  # one hyphen, before its number
    assert shown(second) == "Tief:\u201112" and len(list(second.iter(f"{W}noBreakHyphen"))) == 1


def field(instruction: str, result: str) -> str:
    """A complex field's runs: begin, its instruction, separate, ``result``, end."""
    return (
        '<w:r><w:fldChar w:fldCharType="begin"/></w:r>'
        f'<w:r><w:instrText xml:space="preserve">{instruction}</w:instrText></w:r>'
        f'<w:r><w:fldChar w:fldCharType="separate"/></w:r>{result}<w:r><w:fldChar w:fldCharType="end"/></w:r>'
    )


def toc_entry(anchor: str, words: str, page: str) -> str:
    page_number = field(f" PAGEREF {anchor} \\h ", f"<w:r><w:t>{page}</w:t></w:r>")
    return f'<w:hyperlink w:anchor="{anchor}">{w_run(words)}<w:r><w:tab/></w:r>{page_number}</w:hyperlink>'


def test_docx_every_entry_of_a_table_of_contents_is_translated_with_the_headings():
    # Word and LibreOffice begin the TOC field in its first entry's paragraph and end it in the last's
    toc = " TOC \\o &quot;1-3&quot; \\h \\z \\u "
    begin = (
        f'<w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText xml:space="preserve">{toc}</w:instrText></w:r>'
    )
    body = w_paragraph(begin, '<w:r><w:fldChar w:fldCharType="separate"/></w:r>', toc_entry("_Toc1", "Our plan", "1"))
    body += w_paragraph(toc_entry("_Toc2", "What it costs", "2"), '<w:r><w:fldChar w:fldCharType="end"/></w:r>')
    body += w_paragraph(w_run("Our plan")) + w_paragraph(w_run("What it costs"))
    data = office._zip([("word/document.xml", w_part("document", f"<w:body>{body}</w:body>"))])
    extracted = files.read("a.docx", data, LIMIT)
    assert extracted.texts == ("Our plan", "What it costs", "Our plan", "What it costs")
    out = xml(swapped(extracted), "word/document.xml")
    assert [t.text for t in out.iter(f"{W}t")] == ["oUR PLAN", "1", "wHAT IT COSTS", "2", "oUR PLAN", "wHAT IT COSTS"]
    assert [t.text for t in out.iter(f"{W}instrText")] == [
        toc.replace("&quot;", '"'),
        " PAGEREF _Toc1 \\h ",
        " PAGEREF _Toc2 \\h ",
    ]


def test_docx_tracked_deletions_and_moves_are_read_as_the_document_reads_once_accepted():
    who = 'w:author="A" w:date="2026-01-01T00:00:00Z"'
    moved_away = f'<w:moveFrom w:id="1" {who}><w:r><w:t>Apples are red.</w:t></w:r></w:moveFrom>'
    body = w_paragraph(w_run("Pears are green. "), moved_away)
    moved_here = f'<w:moveTo w:id="2" {who}><w:r><w:t xml:space="preserve">Apples are red. </w:t></w:r></w:moveTo>'
    body += w_paragraph(moved_here, w_run("Plums are blue."))
    # a deletion as some writers keep it, in w:t rather than w:delText; an insertion is text
    deleted, inserted = (
        f'<w:del w:id="3" {who}>{w_run("old ")}</w:del>',
        f'<w:ins w:id="4" {who}>{w_run("new ")}</w:ins>',
    )
    body += w_paragraph(w_run("We sell "), deleted, inserted, w_run("cars."))
    data = office._zip([("word/document.xml", w_part("document", f"<w:body>{body}</w:body>"))])
    extracted = files.read("a.docx", data, LIMIT)
    assert extracted.texts == ("Pears are green. ", "Apples are red. Plums are blue.", "We sell new cars.")
    out = xml(swapped(extracted), "word/document.xml")
    assert ["".join(e.itertext()) for e in out.iter(f"{W}moveFrom", f"{W}del")] == ["Apples are red.", "old "]
    assert "".join(out.find(f".//{W}ins").itertext()) == "NEW "
