"""PDFs laid out as a word processor writes them (fpdf2, the bench extra): text boxes of wrapped
lines in a standard font, images, pages without text. For ``attnserve-bench files`` and the tests.

A box is placed by its top-left corner in points from the page's top-left, as fpdf2 does; the
rectangles returned are in PDF space (origin bottom-left), as PDFium reports bounds.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

A4 = (595.28, 841.89)


@dataclass(frozen=True)
class Box:
    text: str
    x: float
    y: float
    width: float
    size: float = 11.0
    style: str = ""  # fpdf2's: "B", "I", "BI"
    line_height: float = 1.3  # in sizes


@dataclass(frozen=True)
class Image:
    png: bytes
    x: float
    y: float
    width: float


Rect = tuple[float, float, float, float]  # left, bottom, right, top


def png(seed: int, size: tuple[int, int] = (24, 16)) -> bytes:
    """A small PNG whose pixels depend on ``seed`` (so no two pages share one image stream)."""
    from PIL import Image as Pil

    pixels = bytes((seed * 37 + i * 11) % 256 for i in range(size[0] * size[1] * 3))
    out = io.BytesIO()
    Pil.frombytes("RGB", size, pixels).save(out, "PNG")
    return out.getvalue()


def build(pages: list[list[Box | Image]]) -> tuple[bytes, list[list[Rect]]]:
    """(the PDF, each page's boxes' rectangles in the order given); a page with no boxes is empty
    or images only."""
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format=A4)
    pdf.core_fonts_encoding = "windows-1252"  # the standard fonts' WinAnsiEncoding: €, – and curly quotes
    pdf.set_auto_page_break(False)
    rects: list[list[Rect]] = []
    for items in pages:
        pdf.add_page()
        rects.append([])
        for item in items:
            if isinstance(item, Image):
                pdf.image(io.BytesIO(item.png), x=item.x, y=item.y, w=item.width)
                continue
            pdf.set_font("Helvetica", item.style, item.size)
            pdf.set_xy(item.x, item.y)
            pdf.multi_cell(item.width, item.size * item.line_height, item.text)
            rects[-1].append((item.x, A4[1] - pdf.get_y(), item.x + item.width, A4[1] - item.y))
    return bytes(pdf.output()), rects


def columns(paragraphs: list[str], size: float = 9.0, gap: float = 8.0) -> list[list[Box | Image]]:
    """``paragraphs`` in two columns a page, ``gap`` points between paragraphs, one image on the
    first page; a paragraph is never split across columns (its lines counted at 45 characters)."""
    margin, width = 56.0, 230.0
    left = (margin, margin + width + 23.0)
    line = size * 1.3
    pages: list[list[Box | Image]] = [[Image(png(0), margin, margin, 120.0)]]
    column, y = 0, margin + 90.0
    for text in paragraphs:
        height = line * (len(text) // 45 + 1)
        if y + height > A4[1] - margin:
            column, y = column + 1, margin
            if column == 2:
                pages.append([])
                column = 0
        pages[-1].append(Box(text, left[column], y, width, size))
        y += height + gap
    return pages
