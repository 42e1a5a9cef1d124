"""What a PDF's pages hold, as PDFium sees them: page sizes, images (their streams' bytes and
bounds), text objects (text, bounds, font), paths' bounds and rendered text, for comparing a translated PDF
with its source page by page."""

from __future__ import annotations

import ctypes
import io
import re
import zlib
from dataclasses import dataclass

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from fontTools.ttLib import TTFont

from attnserve.server.files.pdf_blocks import text_of
from attnserve.server.files.pdf_fonts import base_name


@dataclass(frozen=True)
class Text:
    text: str
    bounds: tuple[float, float, float, float]  # left, bottom, right, top
    size: float
    font: str


@dataclass(frozen=True)
class Page:
    size: tuple[float, float]
    images: list[tuple[bytes, tuple[float, float, float, float]]]  # (raw stream data, bounds)
    texts: list[Text]
    text: str  # the page's text as PDFium extracts it
    paths: list[tuple[float, float, float, float]]  # bounds: lines, rules, borders, underlines


def _raw_image(obj) -> bytes:
    n = pdfium_c.FPDFImageObj_GetImageDataRaw(obj, None, 0)
    buffer = ctypes.create_string_buffer(n)
    pdfium_c.FPDFImageObj_GetImageDataRaw(obj, buffer, n)
    return buffer.raw


def pages(data: bytes) -> list[Page]:
    doc = pdfium.PdfDocument(data)
    out = []
    for index in range(len(doc)):
        page = doc[index]
        textpage = page.get_textpage()
        images, texts, paths = [], [], []
        for obj in page.get_objects(max_depth=1):
            bounds = tuple(round(v, 2) for v in obj.get_bounds())
            if obj.type == pdfium_c.FPDF_PAGEOBJ_PATH:
                paths.append(bounds)
            elif obj.type == pdfium_c.FPDF_PAGEOBJ_IMAGE:
                images.append((_raw_image(obj.raw), bounds))
            elif obj.type == pdfium_c.FPDF_PAGEOBJ_TEXT:
                size = ctypes.c_float()
                pdfium_c.FPDFTextObj_GetFontSize(obj.raw, size)
                font = base_name(pdfium_c.FPDFTextObj_GetFont(obj.raw))
                texts.append(Text(text_of(obj.raw, textpage.raw), bounds, size.value, font))
        out.append(Page(tuple(page.get_size()), images, texts, textpage.get_text_range(), paths))
        textpage.close()
        page.close()
    doc.close()
    return out


def links(data: bytes) -> list[tuple[str, list[str]]]:
    """Each link annotation of the first page: its target (its web address, or the page of its
    destination) and the text under each of its areas: its quadrilaterals, else its rectangle."""
    doc = pdfium.PdfDocument(data)
    page = doc[0]
    textpage = page.get_textpage()
    out = []
    for k in range(pdfium_c.FPDFPage_GetAnnotCount(page.raw)):
        annot = pdfium_c.FPDFPage_GetAnnot(page.raw, k)
        link = pdfium_c.FPDFAnnot_GetLink(annot)
        action = pdfium_c.FPDFLink_GetAction(link)
        if action:
            size = pdfium_c.FPDFAction_GetURIPath(doc.raw, action, None, 0)
            buffer = ctypes.create_string_buffer(size)
            pdfium_c.FPDFAction_GetURIPath(doc.raw, action, buffer, size)
            target = buffer.value.decode()
        else:
            target = f"page {pdfium_c.FPDFDest_GetDestPageIndex(doc.raw, pdfium_c.FPDFLink_GetDest(doc.raw, link))}"
        areas, quad = [], pdfium_c.FS_QUADPOINTSF()
        for n in range(pdfium_c.FPDFAnnot_CountAttachmentPoints(annot)):
            pdfium_c.FPDFAnnot_GetAttachmentPoints(annot, n, quad)
            areas.append((quad.x1, quad.y3, quad.x2, quad.y1))
        if not areas:
            rect = pdfium_c.FS_RECTF()
            pdfium_c.FPDFAnnot_GetRect(annot, rect)
            areas.append((rect.left, rect.bottom, rect.right, rect.top))
        out.append((target, [" ".join(textpage.get_text_bounded(*area).split()) for area in areas]))
        pdfium_c.FPDFPage_CloseAnnot(annot)
    textpage.close()
    page.close()
    doc.close()
    return out


def within(inner: tuple[float, float, float, float], outer: tuple[float, float, float, float], slack: float) -> bool:
    return (
        inner[0] >= outer[0] - slack
        and inner[1] >= outer[1] - slack
        and inner[2] <= outer[2] + slack
        and inner[3] <= outer[3] + slack
    )


def phrase_pages(count: int = 20) -> tuple[bytes, list[list[tuple[float, float, float, float]]], list[str]]:
    """(a ``count``-page PDF, each page's boxes' rectangles, every box's text in order): on each page
    a bold heading, a box of two phrases the bundled translator knows (examples/sentences.tsv,
    their numbers varied so no two pages are alike) and an image of its own."""
    from attnserve.benchmarks.pdfs import Box, Image, build, png

    layout, texts = [], []
    for n in range(count):
        heading = f"Monday, March {n + 1}, 2025"
        body = f"It is {n % 11 + 1}:30 AM. It costs €{n + 2},234.50."
        texts += [heading, body]
        layout.append([Box(heading, 56, 56, 260, 16, "B"), Box(body, 56, 110, 180), Image(png(n), 360, 56, 120)])
    data, rects = build(layout)
    return data, rects, texts


def assert_translated_in_place(source: bytes, result: bytes, rects, expected: list[str]) -> None:
    """``result`` is ``source`` with every box's text replaced by ``expected`` (in order), drawn
    from the box's top left corner down its left edge (into the free room beside and below it,
    where it needs some), over no other object, and inside the page's text area; the same pages,
    page sizes and images (their streams byte for byte)."""
    before, after = pages(source), pages(result)
    assert [p.size for p in after] == [p.size for p in before]
    assert [p.images for p in after] == [p.images for p in before]
    wanted = iter(expected)
    for number, (page, page_rects) in enumerate(zip(after, rects), 1):
        boxes = [in_box(page, rect, page_rects) for rect in page_rects]
        for rect, inside in zip(page_rects, boxes):
            got = " ".join(" ".join(t.text for t in inside).split())
            assert got == " ".join(next(wanted).split()), f"page {number}, box {rect}"
        assert sum(map(len, boxes)) == len(page.texts), f"page {number}"
        assert overlapping(page) == [], f"page {number}"
        if page.texts:  # (an accented capital reaches over the top of the source's letters)
            left, bottom, right, _ = text_area(before[number - 1])
            assert all(within(t.bounds, (left, bottom, right, page.size[1]), 2.0) for t in page.texts), number


def in_box(page: Page, rect, rects, slack: float = 2.0) -> list[Text]:
    """The text objects drawn from ``rect``: beginning at its left edge (or inside it), their top
    under its top, and under no other of ``rects`` that is nearer above them."""

    def owner(text: Text):
        left, _, _, top = text.bounds
        above = [r for r in rects if r[0] - slack <= left <= r[2] and top <= r[3] + slack]
        return min(above, key=lambda r: (r[3] - top, abs(r[0] - left)), default=None)

    return [t for t in page.texts if owner(t) == rect]


def overlapping(page: Page, slack: float = 0.5) -> list[tuple[str, tuple[float, float, float, float]]]:
    """(text, other object's bounds) for each text object that overlaps another object on the page
    (text, image, path) by more than ``slack`` points each way; an object it lies inside (a cell's
    frame, a shaded box) it does not overlap."""
    others = [t.bounds for t in page.texts] + [bounds for _, bounds in page.images] + page.paths
    found = []
    for n, text in enumerate(page.texts):
        a = text.bounds
        for m, b in enumerate(others):
            if m == n or within(a, b, 0.0):
                continue
            if min(a[2], b[2]) - max(a[0], b[0]) > slack and min(a[3], b[3]) - max(a[1], b[1]) > slack:
                found.append((text.text, b))
    return found


def text_area(page: Page) -> tuple[float, float, float, float]:
    """The rectangle of the page's text and its mirrored margins."""
    width, height = page.size
    left, bottom = min(t.bounds[0] for t in page.texts), min(t.bounds[1] for t in page.texts)
    right, top = max(t.bounds[2] for t in page.texts), max(t.bounds[3] for t in page.texts)
    return min(left, width - right), min(bottom, height - top), max(right, width - left), max(top, height - bottom)


def drawn_characters(data: bytes) -> list[str]:
    """Each text object's characters as the content stream draws them, left to right, decoded
    by its font's ToUnicode map: the code points drawn, before PDFium's text page reorders them
    and maps presentation forms back to letters. For a file whose text is in one CID font with
    hex strings, as PDFium writes a font it loaded (``FPDFText_LoadFont``)."""
    streams = []
    for match in re.finditer(rb"(?<!end)stream\r?\n", data):
        body = data[match.end() : data.index(b"endstream", match.end())]
        try:
            streams.append(zlib.decompress(body))
        except zlib.error:
            streams.append(body)
    (cmap,) = [s for s in streams if b"begincmap" in s]
    to_unicode = _cmap(cmap.decode("latin-1"))
    out = []
    for stream in streams:
        for array in re.findall(rb"\[((?:<[0-9A-Fa-f]*>|[-\d.\s])*)\]\s*TJ", stream):
            codes = "".join(re.findall(r"<([0-9A-Fa-f]*)>", array.decode()))
            out.append("".join(to_unicode[int(codes[i : i + 4], 16)] for i in range(0, len(codes), 4)))
    return out


def _unicode(hex_text: str) -> str:
    return bytes.fromhex(hex_text).decode("utf-16-be")


def _cmap(text: str) -> dict[int, str]:
    """A ToUnicode CMap's bfchar and bfrange entries as {code: text}."""
    out: dict[int, str] = {}
    for section in re.findall(r"beginbfchar(.*?)endbfchar", text, re.S):
        for code, target in re.findall(r"<(\w+)>\s*<(\w+)>", section):
            out[int(code, 16)] = _unicode(target)
    for section in re.findall(r"beginbfrange(.*?)endbfrange", text, re.S):
        for first, last, target in re.findall(r"<(\w+)>\s*<(\w+)>\s*(\[[^\]]*\]|<\w+>)", section):
            start, end = int(first, 16), int(last, 16)
            if target.startswith("["):
                for offset, each in enumerate(re.findall(r"<(\w+)>", target)):
                    out[start + offset] = _unicode(each)
            else:
                base = _unicode(target[1:-1])
                for offset in range(end - start + 1):
                    out[start + offset] = base[:-1] + chr(ord(base[-1]) + offset)
    return out


def _objects(data: bytes) -> dict[int, bytes]:
    """A PDF's objects by number, a stream's body decompressed (as PDFium writes a file: no object streams)."""
    out = {}
    for number, body in re.findall(rb"(?<![\d])(\d+) 0 obj\r?\n(.*?)endobj", data, re.S):
        found = re.search(rb"stream\r?\n(.*)endstream", body, re.S)
        if found:
            stream = found.group(1)
            try:
                stream = zlib.decompress(stream)
            except zlib.error:
                pass
            body = body[: found.start()] + b"stream\n" + stream
        out[int(number)] = body
    return out


def glyphs_drawn(data: bytes) -> list[tuple[str, str, str]]:
    """Each run of text a content stream draws in a font PDFium loaded (``FPDFText_LoadFont``: a
    Type0 font, Identity-H, its codes the glyph ids of its embedded TrueType program) as (its font's
    name, the characters its ToUnicode map gives for the codes, the ones of them drawn with a glyph
    that is not theirs in that program's Unicode map: its .notdef box, or another character's)."""
    objects = _objects(data)

    def ref(body: bytes, key: bytes) -> bytes:
        return objects[int(re.search(rb"/" + key + rb"\s*\[?\s*(\d+) 0 R", body).group(1))]

    fonts = {}
    for body in objects.values():
        for table in re.findall(rb"/Font\s*<<(.*?)>>", body, re.S):
            for name, number in re.findall(rb"/(\w+)\s+(\d+) 0 R", table):
                font = objects[int(number)]
                if b"/Type0" not in font:
                    continue
                program = TTFont(
                    io.BytesIO(
                        ref(ref(ref(font, b"DescendantFonts"), b"FontDescriptor"), b"FontFile2").split(b"stream\n", 1)[
                            1
                        ]
                    )
                )
                to_unicode = _cmap(ref(font, b"ToUnicode").split(b"stream\n", 1)[1].decode("latin-1"))
                base = re.search(rb"/BaseFont\s*/([^\s/<>\[\]]+)", font).group(1).decode()
                fonts[name] = (base, program.getBestCmap(), program.getGlyphOrder(), to_unicode)
    out = []
    for body in objects.values():
        for name, array in re.findall(rb"/(\w+)\s+[\d.]+\s+Tf[^\[]*?\[((?:<[0-9A-Fa-f]*>|[-\d.\s])*)\]\s*TJ", body):
            if name not in fonts:
                continue
            base, cmap, order, to_unicode = fonts[name]
            codes = "".join(re.findall(r"<([0-9A-Fa-f]*)>", array.decode()))
            gids = [int(codes[i : i + 4], 16) for i in range(0, len(codes), 4)]
            chars = [to_unicode.get(gid, "\ufffd") for gid in gids]
            wrong = [ch for gid, ch in zip(gids, chars) if gid == 0 or len(ch) == 1 and cmap.get(ord(ch)) != order[gid]]
            out.append((base, "".join(chars), "".join(wrong)))
    return out
