"""``attnserve-client translate --attention-map FILE.png``: one sentence's cross-attention as a
labelled heat map (source words across, target words down), drawn with Pillow, a dependency the
client has anyway (no matplotlib, no PyTorch).

A cell's darkness is the attention the target word (row) pays to the source word (column), on
one scale for the whole picture (the row maximum of the sentence is the darkest); the links the
server read from it (each target word's most attended source word) are outlined in red.
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from . import Alignment

CELL = 36  # pixels per word
MARGIN = 8
LINK = (200, 30, 30)


def _font() -> ImageFont.ImageFont:
    """DejaVu Sans where the system has it (Pillow's own default font has no umlauts), else
    Pillow's default."""
    try:
        return ImageFont.truetype("DejaVuSans.ttf", 14)
    except OSError:
        return ImageFont.load_default(size=14)


def _text_size(draw: ImageDraw.ImageDraw, text: str, font: ImageFont.ImageFont) -> tuple[int, int]:
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    return int(right - left), int(bottom - top)


def draw_attention_map(alignment: Alignment, path: Path | str) -> Path:
    """Write the heat map of ``alignment`` to ``path`` (PNG); returns the path."""
    source, target = alignment.source.split(), alignment.target.split()
    if not source or not target:
        raise ValueError("the sentence or its translation has no words to draw")
    font = _font()
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    left = MARGIN + max(_text_size(probe, w, font)[0] for w in target) + MARGIN  # row labels
    top = MARGIN + max(_text_size(probe, w, font)[0] for w in source) + MARGIN  # column labels, rotated
    width, height = left + CELL * len(source) + MARGIN, top + CELL * len(target) + MARGIN
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    peak = max((v for row in alignment.attention for v in row), default=0.0) or 1.0
    for j, row in enumerate(alignment.attention[: len(target)]):
        for i, value in enumerate(row[: len(source)]):
            shade = int(255 * (1.0 - min(1.0, value / peak)))
            x, y = left + i * CELL, top + j * CELL
            draw.rectangle([x, y, x + CELL - 1, y + CELL - 1], fill=(shade, shade, 255))
    for i, j in alignment.links:
        if i < len(source) and j < len(target):
            x, y = left + i * CELL, top + j * CELL
            draw.rectangle([x + 1, y + 1, x + CELL - 2, y + CELL - 2], outline=LINK, width=3)
    for j, word in enumerate(target):
        w, h = _text_size(draw, word, font)
        draw.text((left - MARGIN - w, top + j * CELL + (CELL - h) // 2), word, fill="black", font=font)
    for i, word in enumerate(source):
        w, h = _text_size(draw, word, font)
        label = Image.new("RGBA", (w + 2, h + 6), (255, 255, 255, 0))
        ImageDraw.Draw(label).text((0, 0), word, fill="black", font=font)
        label = label.rotate(90, expand=True)  # reads bottom to top, ending above its column
        image.paste(label, (left + i * CELL + (CELL - label.width) // 2, top - MARGIN - label.height), label)
    path = Path(path)
    image.save(path, format="PNG")
    return path
