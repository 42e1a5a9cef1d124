"""Small office packages built in the test: .docx, .pptx, .odt, .odp and .epub with styled runs
and an image, each as its application writes it (the parts and namespaces of the specs), so
the file tests need no office suite and no fixture files.

A paragraph is a list of runs; a run is ``(text, style)`` with style ``"b"`` (bold), ``"i"``
(italic) or ``""`` (and, in a .docx, a field: see :func:`docx`).
"""

from __future__ import annotations

import io
import zipfile
from xml.sax.saxutils import escape

Paragraph = list[tuple[str, str]]
PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
    b"\x00\x00\x00\rIDATx\x9cc\xf8\xcf\xc0\xf0\x1f\x00\x05\x00\x01\xff\x89\x99=\x1d\x00\x00\x00\x00IEND\xaeB`\x82"
)
W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
A = "http://schemas.openxmlformats.org/drawingml/2006/main"
P = "http://schemas.openxmlformats.org/presentationml/2006/main"
ODF_NS = (
    'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
    'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
    'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" '
    'xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0" '
    'xmlns:xlink="http://www.w3.org/1999/xlink" office:version="1.3"'
)
DECLARATION = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'


def _zip(entries: list[tuple[str, bytes | str]], stored_first: bool = False) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as package:
        for i, (name, data) in enumerate(entries):
            method = zipfile.ZIP_STORED if (stored_first and i == 0) or name.endswith(".png") else zipfile.ZIP_DEFLATED
            package.writestr(zipfile.ZipInfo(name, (2024, 1, 2, 3, 4, 6)), data, compress_type=method)
    return out.getvalue()


def docx(
    paragraphs: list[Paragraph], footer: list[Paragraph] | None = None, comments: list[Paragraph] | None = None
) -> bytes:
    """A run styled ``"field INSTRUCTION"`` is a simple field (``w:fldSimple``) showing its text,
    one styled ``"complex INSTRUCTION"`` a complex field (``w:fldChar`` begin, ``w:instrText``,
    separate, the text, end), as Word writes a figure's number, a cross-reference or a page
    number; ``footer``: the paragraphs of ``word/footer1.xml``; ``comments``: one reviewer's comment
    (``word/comments.xml``) per paragraph, as Word writes it."""

    def run(text: str, style: str) -> str:
        props = {"b": "<w:rPr><w:b/></w:rPr>", "i": "<w:rPr><w:i/></w:rPr>"}.get(style, "")
        shown = f'<w:r>{props}<w:t xml:space="preserve">{escape(text)}</w:t></w:r>'
        kind, _, instruction = style.partition(" ")
        if kind == "field":
            return f'<w:fldSimple w:instr=" {escape(instruction, {chr(34): "&quot;"})} ">{shown}</w:fldSimple>'
        if kind == "complex":
            char = '<w:r><w:fldChar w:fldCharType="{}"/></w:r>'.format
            code = f'<w:r><w:instrText xml:space="preserve"> {escape(instruction)} </w:instrText></w:r>'
            return f"{char('begin')}{code}{char('separate')}{shown}{char('end')}"
        return shown

    def body(paragraphs: list[Paragraph]) -> str:
        return "".join(
            f'<w:p><w:pPr><w:pStyle w:val="Normal"/></w:pPr>{"".join(run(*r) for r in p)}</w:p>' for p in paragraphs
        )

    document = f'{DECLARATION}<w:document xmlns:w="{W}"><w:body>{body(paragraphs)}<w:sectPr/></w:body></w:document>'
    footers = [("word/footer1.xml", f'{DECLARATION}<w:ftr xmlns:w="{W}">{body(footer)}</w:ftr>')] if footer else []
    notes = "".join(
        f'<w:comment w:id="{n}" w:author="Ann" w:initials="A">{body([p])}</w:comment>'
        for n, p in enumerate(comments or [])
    )
    footers += [("word/comments.xml", f'{DECLARATION}<w:comments xmlns:w="{W}">{notes}</w:comments>')] if notes else []
    return _zip(
        [
            (
                "[Content_Types].xml",
                f'{DECLARATION}<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>',
            ),
            ("_rels/.rels", f"{DECLARATION}<Relationships/>"),
            ("word/document.xml", document),
            *footers,
            ("word/styles.xml", f'{DECLARATION}<w:styles xmlns:w="{W}"/>'),
            ("word/media/image1.png", PNG),
        ]
    )


def pptx(slides: list[list[Paragraph]]) -> bytes:
    def run(text: str, style: str) -> str:
        props = {"b": '<a:rPr b="1"/>', "i": '<a:rPr i="1"/>'}.get(style, '<a:rPr lang="en-US"/>')
        return f"<a:r>{props}<a:t>{escape(text)}</a:t></a:r>"

    entries: list[tuple[str, bytes | str]] = [("[Content_Types].xml", f"{DECLARATION}<Types/>")]
    for n, paragraphs in enumerate(slides, 1):
        text = "".join(f"<a:p>{''.join(run(*r) for r in p)}</a:p>" for p in paragraphs)
        slide = (
            f'{DECLARATION}<p:sld xmlns:a="{A}" xmlns:p="{P}"><p:cSld><p:spTree><p:sp><p:txBody><a:bodyPr/>'
            f"{text}</p:txBody></p:sp></p:spTree></p:cSld></p:sld>"
        )
        entries.append((f"ppt/slides/slide{n}.xml", slide))
    entries.append(("ppt/media/image1.png", PNG))
    return _zip(entries)


def _odf(paragraphs: list[Paragraph], mimetype: str, body: str, header: str = "", footer: str = "") -> bytes:
    def run(text: str, style: str) -> str:
        return f'<text:span text:style-name="{style.upper()}">{escape(text)}</text:span>' if style else escape(text)

    text = "".join(f'<text:p text:style-name="P1">{"".join(run(*r) for r in p)}</text:p>' for p in paragraphs)
    master = "".join(
        f'<style:{kind}><text:p text:style-name="{kind.title()}">{escape(words)}</text:p></style:{kind}>'
        for kind, words in (("header", header), ("footer", footer))
        if words
    )
    styles = (
        f"{DECLARATION}<office:document-styles {ODF_NS}><office:master-styles>"
        f'<style:master-page style:name="Standard">{master}</style:master-page>'
        "</office:master-styles></office:document-styles>"
    )
    content = (
        f"{DECLARATION}<office:document-content {ODF_NS}><office:body><office:{body}>"
        f'<draw:frame><draw:image xlink:href="Pictures/image1.png"/></draw:frame>{text}'
        f"</office:{body}></office:body></office:document-content>"
    )
    return _zip(
        [
            ("mimetype", mimetype),
            ("content.xml", content),
            ("styles.xml", styles),
            ("Pictures/image1.png", PNG),
            ("META-INF/manifest.xml", f"{DECLARATION}<manifest/>"),
        ],
        stored_first=True,
    )


def odt(paragraphs: list[Paragraph], header: str = "", footer: str = "") -> bytes:
    """``header``, ``footer``: the words of the page style's header and footer, in ``styles.xml``."""
    return _odf(paragraphs, "application/vnd.oasis.opendocument.text", "text", header, footer)


def odp(slides: list[list[Paragraph]]) -> bytes:
    """Each slide's paragraphs in a frame of a ``draw:page``, as Impress writes them."""
    pages = []
    for n, paragraphs in enumerate(slides, 1):
        text = "".join(
            "<text:p>" + "".join(
                f'<text:span text:style-name="{s.upper()}">{escape(t)}</text:span>' if s else escape(t) for t, s in p
            ) + "</text:p>"
            for p in paragraphs
        )  # fmt: skip
        pages.append(
            f'<draw:page draw:name="page{n}"><draw:frame><draw:text-box>{text}</draw:text-box></draw:frame></draw:page>'
        )
    content = (
        f"{DECLARATION}<office:document-content {ODF_NS}><office:body><office:presentation>{''.join(pages)}"
        "</office:presentation></office:body></office:document-content>"
    )
    return _zip(
        [
            ("mimetype", "application/vnd.oasis.opendocument.presentation"),
            ("content.xml", content),
            ("Pictures/image1.png", PNG),
        ],
        stored_first=True,
    )


def epub(pages: list[str]) -> bytes:
    """``pages``: the body html of each chapter."""
    container = (
        '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
        '<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
        "</rootfiles></container>"
    )
    items = "".join(
        f'<item id="c{n}" href="chapter{n}.xhtml" media-type="application/xhtml+xml"/>' for n in range(len(pages))
    )
    opf = (
        '<?xml version="1.0" encoding="UTF-8"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
        f'<manifest>{items}<item id="img" href="image1.png" media-type="image/png"/></manifest>'
        "<spine>" + "".join(f'<itemref idref="c{n}"/>' for n in range(len(pages))) + "</spine></package>"
    )
    entries: list[tuple[str, bytes | str]] = [
        ("mimetype", "application/epub+zip"),
        ("META-INF/container.xml", container),
        ("OEBPS/content.opf", opf),
    ]
    for n, body in enumerate(pages):
        entries.append(
            (
                f"OEBPS/chapter{n}.xhtml",
                '<?xml version="1.0" encoding="UTF-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml"><head>'
                f"<title>Chapter {n}</title></head><body>{body}</body></html>",
            )
        )
    entries.append(("OEBPS/image1.png", PNG))
    return _zip(entries, stored_first=True)


def zip_bomb(inflated_bytes: int) -> bytes:
    """A .docx whose document.xml inflates to ``inflated_bytes`` (zeros compress ~1000:1)."""
    return _zip([("[Content_Types].xml", "<Types/>"), ("word/document.xml", b"\0" * inflated_bytes)])


def many_entries(count: int) -> bytes:
    return _zip([("word/document.xml", f'<w:document xmlns:w="{W}"/>')] + [(f"x/{i}", b"") for i in range(count)])


def multipart(fields: dict[str, str], filename: str, content: bytes) -> tuple[bytes, str]:
    """(body, content type) of a LibreTranslate ``/translate_file`` form."""
    boundary = "attnserve-test-boundary-7f3a"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode() for k, v in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n".encode()
        + content
        + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"
