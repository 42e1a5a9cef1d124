"""Zip packages: .docx, .pptx, .odt, .odp and .epub, by the zip + XML route (lxml).

Why not python-docx, python-pptx, odfpy and ebooklib: each reads a whole package into its own
object model and writes every part it understood back in its own spelling, and each reads
only its own format (python-docx skips the runs inside hyperlinks and text boxes; ebooklib
rebuilds the OPF). Here one path serves all five: the zip's directory is checked before
anything is inflated (``archive``), the XML parts that hold text are parsed with lxml
(which the libraries above use underneath), their runs' character data is replaced
(``paragraphs``) and every other entry (images, styles, fonts, relationships, settings) is
written back with the same content, name, order and compression.

- .docx: the body, headers, footers, footnotes, endnotes and comments (``word/*.xml``);
- .pptx: every slide, its speaker notes and its comments (``ppt/comments/``: PowerPoint's modern
  threaded ones in DrawingML paragraphs, the older ones plain text), as a .docx's comments are;
- .docx and .pptx: the titles of their charts and the words of their SmartArt graphics (DrawingML);
- .odt / .odp: ``content.xml`` (body text, tables, frames, notes, slides); an .odt's headers and
  footers (its master pages in ``styles.xml``);
- .epub: every XHTML page (OPF manifest media type ``application/xhtml+xml``), each one
  document in the service's ``html`` mode, as a .html file is, its characters its text, not its
  markup (``text_files.html_characters``), its tags counted first; EPUB 2's table of contents (the
  manifest's ``application/x-dtbncx+xml`` item, ``toc.ncx``), each entry's label and the book's
  title one text (its author, a person's name, kept).
"""

from __future__ import annotations

import html
import posixpath
import re
import urllib.parse
import zipfile
from collections.abc import Sequence

from lxml import etree

from ..documents import HTML
from . import archive, text_files
from .alternate_content import twins
from .extracted import Characters, Check, Extracted
from .paragraphs import (
    DRAWING,
    OPENDOCUMENT,
    PRESENTATION_COMMENT,
    WORDPROCESSING,
    Dialect,
    Paragraph,
    ParagraphReader,
)
from .refusals import FileRefused
from .run_placement import Placement
from .slots import xml_text
from .text_files import decode

DOCX_PARTS = re.compile(r"word/(document|header\d*|footer\d*|footnotes|endnotes|comments)\.xml")
PPTX_PARTS = re.compile(r"ppt/(slides/slide|notesSlides/notesSlide)\d+\.xml")
# DrawingML text inside a document or deck: a chart's title and axis titles (c:rich), a SmartArt
# graphic's words (its data model and the drawing shown from it, kept alike)
CHARTS = r"(charts/chart|diagrams/data|diagrams/drawing)\d+\.xml"
DOCX_DRAWINGS, PPTX_DRAWINGS = re.compile(f"word/{CHARTS}"), re.compile(f"ppt/{CHARTS}")
# a deck's reviewers' comments, as a document's (word/comments.xml): PowerPoint 365's threaded ones
# (modernComment_<slide id>_<hash>.xml, DrawingML paragraphs) and the older ones (commentN.xml, plain text)
MODERN_COMMENTS, COMMENTS = (
    re.compile(r"ppt/comments/modernComment_\w+\.xml"),
    re.compile(r"ppt/comments/comment\d+\.xml"),
)
ODF_PARTS = re.compile(r"content\.xml")
# a text document's headers and footers are in its master pages, in styles.xml (ODF 1.3 § 16.10);
# a presentation's master pages hold layout placeholders, not its slides' words
ODT_PARTS = re.compile(r"content\.xml|styles\.xml")
MEDIA_TYPES = {
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ".odt": "application/vnd.oasis.opendocument.text",
    ".odp": "application/vnd.oasis.opendocument.presentation",
    ".epub": "application/epub+zip",
}


def _office(
    data: bytes,
    max_file_bytes: int,
    chars: Characters,
    kind: str,
    parts: re.Pattern,
    required: str,
    dialect: Dialect,
    others: Sequence[tuple[re.Pattern, Dialect]] = (),
) -> Extracted:
    """The paragraphs of the package's text parts (``parts`` in ``dialect``, each of ``others`` in
    its own), in the zip's order of parts, each part parsed as it is inflated and its
    paragraphs' characters counted as they end (``ParagraphReader``)."""
    package = archive.open_zip(data, max_file_bytes, kind)
    dialects = {n: dialect for n in package.namelist() if parts.fullmatch(n)}
    if required not in dialects:
        raise FileRefused(f"the file is not a valid {kind}: it has no {required}")
    for pattern, other in others:
        dialects.update((n, other) for n in package.namelist() if pattern.fullmatch(n))
    names = [n for n in package.namelist() if n in dialects]  # the zip's order
    tags = archive.Tags(kind)
    trees: dict[str, etree._ElementTree] = {}
    found: list[tuple[str, Paragraph]] = []
    elements: list[etree._Element] = []
    fallbacks: list[etree._Element | None] = []
    for name in names:
        reader = ParagraphReader(dialects[name], chars.add)
        trees[name] = archive.parse_xml_stream(package, name, kind, dialects[name].paragraphs, reader, tags)
        found += [(name, p) for p in reader.found]
        elements += reader.elements
        fallbacks += reader.fallbacks
    # a text box's copy for older readers is written with its twin's translation, not translated again
    twin = twins(elements, fallbacks, [p.unit.text for _, p in found])
    kept = [i for i in range(len(found)) if i not in twin]
    for i in kept:
        if fallbacks[i] is not None:  # a copy with no twin is a text of its own: it counts as one
            chars.add(len(found[i][1].unit.text))
    text_of = {i: k for k, i in enumerate(kept)}

    def write(translations: Sequence[str], placement: Placement, check: Check) -> bytes:
        for n, (_, paragraph) in enumerate(found):
            if n % 256 == 0:
                check()
            paragraph.write(placement(paragraph.unit, translations[text_of[twin.get(n, n)]]))
        changed = {name for name, _ in found}
        replaced = {}
        for name in changed:
            check()
            replaced[name] = archive.serialize_xml(trees[name])
        return archive.rewrite(package, replaced, kind, check)

    units = tuple(found[i][1].unit for i in kept)
    return Extracted(tuple(u.text for u in units), write, media_type=MEDIA_TYPES[kind], units=units)


def read_docx(data: bytes, max_file_bytes: int, chars: Characters) -> Extracted:
    others = [(DOCX_DRAWINGS, DRAWING)]
    return _office(data, max_file_bytes, chars, ".docx", DOCX_PARTS, "word/document.xml", WORDPROCESSING, others)


def read_pptx(data: bytes, max_file_bytes: int, chars: Characters) -> Extracted:
    package = archive.open_zip(data, max_file_bytes, ".pptx")
    slide = next((n for n in package.namelist() if n.startswith("ppt/slides/slide")), "ppt/slides/slide1.xml")
    others = [(PPTX_DRAWINGS, DRAWING), (MODERN_COMMENTS, DRAWING), (COMMENTS, PRESENTATION_COMMENT)]
    return _office(data, max_file_bytes, chars, ".pptx", PPTX_PARTS, slide, DRAWING, others)


def read_odt(data: bytes, max_file_bytes: int, chars: Characters) -> Extracted:
    return _office(data, max_file_bytes, chars, ".odt", ODT_PARTS, "content.xml", OPENDOCUMENT)


def read_odp(data: bytes, max_file_bytes: int, chars: Characters) -> Extracted:
    return _office(data, max_file_bytes, chars, ".odp", ODF_PARTS, "content.xml", OPENDOCUMENT)


CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"
OPF = "{http://www.idpf.org/2007/opf}"
NCX = "{http://www.daisy.org/z3986/2005/ncx/}"
PAGE, TOC = "application/xhtml+xml", "application/x-dtbncx+xml"  # OPF 2.0.1 § 1.4.1.2: the NCX by type, any name


def epub_items(package: zipfile.ZipFile, tags: archive.Tags) -> dict[str, str]:
    """The book's XHTML pages and NCX, entry -> media type in manifest order (an entry the manifest
    lists twice once), from META-INF/container.xml -> the OPF's manifest, both counted in ``tags``."""
    entries = set(package.namelist())
    container = archive.read(package, "META-INF/container.xml", ".epub")
    rootfile = archive.parse_xml(container, "container", ".epub", tags).getroot().find(f".//{CONTAINER}rootfile")
    opf_name = rootfile.get("full-path", "") if rootfile is not None else ""
    if opf_name not in entries:
        raise FileRefused(f"the file is not a valid .epub: its container names no package document ({opf_name!r})")
    opf = archive.parse_xml(archive.read(package, opf_name, ".epub"), opf_name, ".epub", tags)
    base = posixpath.dirname(opf_name)
    items: dict[str, str] = {}
    for item in opf.getroot().iter(f"{OPF}item"):
        if item.get("media-type") in (PAGE, TOC) and item.get("href"):
            # an href is a URL: "Chapter%201.xhtml" names the entry "Chapter 1.xhtml"
            href = urllib.parse.unquote(item.get("href", "").partition("#")[0])
            name = posixpath.normpath(posixpath.join(base, href))
            if name in entries:
                items.setdefault(name, item.get("media-type", ""))
    return items


def ncx_labels(tree: etree._ElementTree) -> list[etree._Element]:
    """The ``text`` elements of an NCX a reader shows as words: the book's title and every label
    of its navigation map and lists (not ``docAuthor``, a person's name, nor a ``pageTarget``'s
    label, the number of a page of the printed book)."""
    root = tree.getroot()
    labels = [*root.findall(f"{NCX}docTitle/{NCX}text")]
    for label in root.iter(f"{NCX}navLabel"):
        if label.getparent() is not None and label.getparent().tag != f"{NCX}pageTarget":
            labels += label.findall(f"{NCX}text")
    return [t for t in labels if (t.text or "").strip()]


def read_epub(data: bytes, max_file_bytes: int, chars: Characters) -> Extracted:
    package = archive.open_zip(data, max_file_bytes, ".epub")
    if "META-INF/container.xml" not in package.namelist():
        raise FileRefused("the file is not a valid .epub: it has no META-INF/container.xml")
    texts: list[str] = []
    pages: list[tuple[str, int, str]] = []  # (entry, its text's index, its encoding)
    tocs: dict[str, tuple[etree._ElementTree, list[etree._Element], int]] = {}  # entry -> tree, labels, first index
    # the NCX are parsed whole and kept for the translation: their tags, with the OPF's, count
    # against the package's limit, as a .docx's parts' do (a page is text, bounded by its characters)
    tags, page_tags = archive.Tags(".epub"), text_files.page_tags(".epub", chars)
    source = 0  # bytes of the pages: their html goes to the service whole, as a .html file's does
    for name, media_type in epub_items(package, tags).items():
        if media_type == TOC:
            tree = archive.parse_xml(archive.read(package, name, ".epub"), name, ".epub", tags)
            tocs[name] = (tree, ncx_labels(tree), len(texts))
            for label in tocs[name][1]:
                chars.add(len(label.text))
                texts.append(html.escape(label.text, quote=False))  # the html mode's text, as a page's
            continue
        source += package.getinfo(name).file_size
        if source > max_file_bytes:  # before the page is inflated
            raise FileRefused(
                f"the .epub file's pages are more than {max_file_bytes:,} bytes of html; this server reads at "
                "most that many (--max-file-bytes)"
            )
        text, encoding = decode(archive.read(package, name, ".epub"), ".epub page")
        if text.strip():
            if chars.counting:
                page_tags.add(text)  # before the page is parsed for its characters of text
                chars.add(text_files.html_characters(text))
            pages.append((name, len(texts), encoding))
            texts.append(text)

    def write(translations: Sequence[str], placement: Placement, check: Check) -> bytes:
        replaced = {name: encoding.encode(translations[at]) for name, at, encoding in pages}
        for name, (tree, labels, at) in tocs.items():
            for n, label in enumerate(labels):
                label.text = xml_text(html.unescape(translations[at + n]))
            replaced[name] = archive.serialize_xml(tree)
        return archive.rewrite(package, replaced, ".epub", check)

    return Extracted(tuple(texts), write, HTML, MEDIA_TYPES[".epub"])
