"""An html document's characters are its text, not its markup: a .html file's and an EPUB
page's count against --max-file-chars and are billed as the html mode reads the page for the
model (text outside tags, scripts, styles and translate="no", references decoded, a source's
indentation one space), and their tags are bounded before the page is parsed for that count."""

from __future__ import annotations

import codecs

import pytest

from attnserve.server import files
from attnserve.server.files import jobs
from tests.server.files.test_formats import LIMIT, entries
from tests.support import office_files as office

STYLE = "p { margin: 0 0 1em 0; font-family: Georgia, serif; color: #333333; }\n" * 20
# its text: "Fish & chips at ACME." and "Served at noon." (36 characters); its markup: 40 times that
PAGE = (
    f'<!DOCTYPE html>\n<html lang="en">\n  <head>\n    <style>{STYLE}</style>\n'
    '    <script>if (a < b && c > d) { document.title = "Not this"; }</script>\n'
    "    <!-- a comment, not text -->\n  </head>\n  <body>\n"
    '    <p class="lead" style="font-weight: bold; text-decoration: underline">\n'
    '      Fish &amp; chips at <span translate="no">ACME</span>.\n    </p>\n'
    "    <p>Served at noon.</p>\n  </body>\n</html>\n"
)
TEXT = len("Fish & chips at .") + len("Served at noon.")


def test_an_html_page_counts_and_bills_its_text_not_its_markup():
    assert len(PAGE) > 10 * TEXT
    extracted = files.read("page.html", PAGE.encode(), LIMIT, max_chars=TEXT)  # its source is far over
    assert extracted.texts == (PAGE,)  # the whole page still goes to the html mode
    assert extracted.characters == TEXT == jobs.read_text("page.htm", PAGE.encode(), LIMIT, TEXT).characters
    with pytest.raises(files.TooManyCharacters):  # one character of text over
        files.read("page.html", PAGE.encode(), LIMIT, max_chars=TEXT - 1)


def test_an_html_page_in_utf16_counts_the_same_text():
    data = codecs.BOM_UTF16_LE + PAGE.encode("utf-16-le")
    assert files.read("page.html", data, LIMIT, max_chars=TEXT).characters == TEXT


def test_an_html_page_of_more_tags_than_the_limit_allows_is_refused_before_its_parse():
    page = "<p>Hi</p>" + "<b></b>" * 600
    with pytest.raises(files.FileRefused, match=r"more than 1,000 html tags.*--max-file-chars"):
        files.read("page.html", page.encode(), LIMIT, max_chars=1000)
    assert files.read("page.html", page.encode(), LIMIT, max_chars=1202).characters == 2


def book(pages: list[str]) -> bytes:
    return office.epub(pages)


def test_an_epub_page_counts_and_bills_its_text_not_its_markup():
    body = f'<div style="{STYLE}"><p class="first">Fish &amp; chips.</p>\n   <p>Served at noon.</p></div>'
    data = book([body])
    page = entries(data)["OEBPS/chapter0.xhtml"].decode()
    text = len("Chapter 0") + len("Fish & chips.") + len("Served at noon.")  # its <title>, then its body
    assert len(page) > 10 * text
    extracted = files.read("book.epub", data, LIMIT, max_chars=text)
    assert extracted.characters == text == jobs.read_text("book.epub", data, LIMIT, text).characters
    assert extracted.texts == (page,)  # the page goes whole to the html mode, as before
    with pytest.raises(files.TooManyCharacters):
        files.read("book.epub", data, LIMIT, max_chars=text - 1)


def test_an_epub_whose_pages_hold_more_tags_than_the_limit_allows_is_refused():
    data = book(["<p>Hi</p>" + "<br/>" * 400, "<p>Ho</p>" + "<br/>" * 400])
    with pytest.raises(files.FileRefused, match=r"\.epub file holds more than 500 html tags"):
        files.read("book.epub", data, LIMIT, max_chars=500)  # each page under it, the two over


def test_an_epub_whose_pages_are_more_html_than_the_file_limit_is_refused_before_they_are_inflated():
    data = book(["<p>Hi</p>" + " " * 40_000])  # compresses to far under its size
    assert len(data) < 20_000
    with pytest.raises(files.FileRefused, match=r"pages are more than 20,000 bytes of html.*--max-file-bytes"):
        files.read("book.epub", data, 20_000, max_chars=1000)


@pytest.mark.parametrize("kind", [".html", ".epub"])
def test_a_page_read_again_to_write_its_translation_is_not_parsed_again_for_its_count(monkeypatch, kind):
    data = PAGE.encode() if kind == ".html" else office.epub([PAGE])
    extracted = files.read(f"menu{kind}", data, LIMIT)
    parsed = []
    monkeypatch.setattr(files.text_files, "html_characters", lambda page: parsed.append(page) or 0)
    written = jobs.write_file(f"menu{kind}", data, LIMIT, [t.upper() for t in extracted.texts], None)
    assert parsed == [] and written  # counted when the file was read, not again for its writing
