"""Digit images as people make them: drawn with a pen or a mouse, typed in a font, scanned,
photographed; either ink polarity, any size and place in the frame.

- :func:`pen_digit`: a digit drawn as strokes (a skeleton per digit -- arcs and lines in a
  unit square -- jittered point by point, slanted, squeezed and rotated), with a random pen
  width, on a random canvas, dark on light or light on dark;
- :func:`font_digit`: a digit typed in a TrueType font (matplotlib's bundled DejaVu, STIX and
  Computer Modern faces, and Pillow's default font), at a random size and place;
- :func:`degrade`: what scanning and sending do to an image -- stroke width (min/max filter),
  rotation, blur, noise, JPEG.

:func:`robustness_set` is the held-out set of the model card: pen digits of their own seeds and
digits in fonts never trained on (:data:`HELD_OUT_FONTS`), in both polarities. Everything is a
pure function of its seed.
"""

from __future__ import annotations

import io
import math
import random
from functools import cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont


def _arc(cx: float, cy: float, rx: float, ry: float, a0: float, a1: float, n: int = 16) -> list[tuple[float, float]]:
    """Points of an elliptic arc; angles in degrees, 0 = right, 90 = down (image coordinates)."""
    return [
        (cx + rx * math.cos(math.radians(a)), cy + ry * math.sin(math.radians(a)))
        for a in np.linspace(a0, a1, n).tolist()
    ]


# Each digit: strokes (polylines) in a unit square, x right, y down; a digit may have variants.
SKELETONS: dict[int, list[list[list[tuple[float, float]]]]] = {
    0: [[_arc(0.5, 0.5, 0.3, 0.42, -90, 275, 24)]],
    1: [[[(0.5, 0.08), (0.5, 0.92)]], [[(0.3, 0.25), (0.55, 0.08), (0.55, 0.92)]]],
    2: [[_arc(0.5, 0.3, 0.28, 0.22, 180, 400) + [(0.2, 0.9), (0.82, 0.9)]]],
    3: [[_arc(0.5, 0.29, 0.27, 0.21, 200, 450) + _arc(0.5, 0.71, 0.3, 0.21, 270, 520)]],
    4: [
        [[(0.62, 0.08), (0.15, 0.65), (0.85, 0.65)], [(0.62, 0.08), (0.62, 0.92)]],
        [[(0.3, 0.08), (0.22, 0.55), (0.8, 0.55)], [(0.7, 0.2), (0.7, 0.92)]],
    ],
    5: [[[(0.78, 0.08), (0.3, 0.08), (0.27, 0.45)] + _arc(0.5, 0.66, 0.3, 0.25, 235, 520)]],
    6: [[[(0.72, 0.1), (0.45, 0.25), (0.26, 0.5)] + _arc(0.5, 0.68, 0.28, 0.23, 180, 540)]],
    7: [
        [[(0.18, 0.1), (0.82, 0.1), (0.4, 0.92)]],
        [[(0.18, 0.1), (0.82, 0.1), (0.4, 0.92)], [(0.35, 0.5), (0.7, 0.5)]],
    ],
    8: [[_arc(0.5, 0.28, 0.22, 0.2, 90, 450), _arc(0.5, 0.71, 0.27, 0.22, -90, 270)]],
    9: [[_arc(0.5, 0.32, 0.27, 0.23, 0, 360) + [(0.77, 0.32), (0.72, 0.6), (0.6, 0.92)]]],
}

FONT_DIR_FONTS = (  # matplotlib's mpl-data/fonts/ttf
    "DejaVuSans.ttf DejaVuSans-Bold.ttf DejaVuSerif.ttf DejaVuSerif-Bold.ttf DejaVuSansMono.ttf "
    "DejaVuSans-Oblique.ttf DejaVuSerif-Italic.ttf DejaVuSansMono-Bold.ttf STIXGeneral.ttf STIXGeneralBol.ttf "
    "STIXGeneralItalic.ttf cmr10.ttf cmss10.ttf cmtt10.ttf cmb10.ttf"
).split()
# Never trained on: the robustness set's fonts ("pillow" = Pillow's default font).
HELD_OUT_FONTS = ("DejaVuSansMono.ttf", "DejaVuSerif-Italic.ttf", "STIXGeneralItalic.ttf", "cmss10.ttf", "pillow")
TRAIN_FONTS = tuple(f for f in FONT_DIR_FONTS if f not in HELD_OUT_FONTS)


@cache
def _font_dir() -> Path | None:
    try:
        import matplotlib
    except ImportError:
        return None
    return Path(matplotlib.get_data_path()) / "fonts" / "ttf"


def available_fonts(names: tuple[str, ...]) -> list[str]:
    """The fonts of ``names`` this machine has (matplotlib's bundled ones; "pillow" always)."""
    folder = _font_dir()
    return [n for n in names if n == "pillow" or (folder is not None and (folder / n).is_file())]


def _font(name: str, size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    if name == "pillow":
        return ImageFont.load_default(size)
    return ImageFont.truetype(str(_font_dir() / name), size)


def _place(rng: random.Random, canvas: int) -> tuple[float, float, float]:
    """(box size, left, top) of the digit's box: 35-90% of the canvas, anywhere it fits."""
    box = canvas * rng.uniform(0.35, 0.9)
    return box, rng.uniform(0, canvas - box), rng.uniform(0, canvas - box)


def pen_digit(digit: int, rng: random.Random, canvas: int | None = None, dark_on_light: bool = True) -> Image.Image:
    """``digit`` drawn with a pen on a ``canvas``-pixel square (mode "L")."""
    canvas = canvas or rng.choice((28, 32, 48, 64, 96, 128))
    scale = 4  # drawn 4x larger, then downsampled: anti-aliased strokes
    box, left, top = _place(rng, canvas)
    slant, angle = rng.uniform(-0.3, 0.3), math.radians(rng.uniform(-12, 12))
    sx, sy = rng.uniform(0.6, 1.05), rng.uniform(0.85, 1.05)
    width = max(1, round(rng.uniform(0.04, 0.16) * box * scale))
    paper, ink = (255, rng.randrange(0, 90)) if dark_on_light else (rng.randrange(0, 60), rng.randrange(170, 256))
    img = Image.new("L", (canvas * scale, canvas * scale), paper)
    draw = ImageDraw.Draw(img)
    for stroke in rng.choice(SKELETONS[digit]):
        points = []
        for x, y in stroke:
            x, y = x + rng.gauss(0, 0.015) - 0.5, y + rng.gauss(0, 0.015) - 0.5
            x, y = (x + slant * -y) * sx, y * sy
            x, y = x * math.cos(angle) - y * math.sin(angle), x * math.sin(angle) + y * math.cos(angle)
            points.append(((left + (x + 0.5) * box) * scale, (top + (y + 0.5) * box) * scale))
        draw.line(points, fill=ink, width=width, joint="curve")
        for px, py in (points[0], points[-1]):  # round pen tips
            draw.ellipse((px - width / 2, py - width / 2, px + width / 2, py + width / 2), fill=ink)
    return img.resize((canvas, canvas), Image.Resampling.BOX)


def font_digit(
    digit: int, font: str, rng: random.Random, canvas: int | None = None, dark_on_light: bool = True
) -> Image.Image:
    """``digit`` typed in ``font`` (a name of :data:`FONT_DIR_FONTS` or "pillow") on a square canvas."""
    canvas = canvas or rng.choice((28, 32, 48, 64, 96, 128))
    box, left, top = _place(rng, canvas)
    paper, ink = (255, rng.randrange(0, 90)) if dark_on_light else (rng.randrange(0, 60), rng.randrange(170, 256))
    img = Image.new("L", (canvas, canvas), paper)
    draw = ImageDraw.Draw(img)
    font_obj = _font(font, max(8, round(box)))
    x0, y0, x1, y1 = draw.textbbox((0, 0), str(digit), font=font_obj)
    draw.text(
        (left + (box - (x1 - x0)) / 2 - x0, top + (box - (y1 - y0)) / 2 - y0), str(digit), fill=ink, font=font_obj
    )
    return img


def degrade(img: Image.Image, rng: random.Random) -> Image.Image:
    """Random stroke width, rotation, blur, noise and JPEG, each with some probability (mode "L")."""
    pixels = np.asarray(img)
    paper = int(np.median(np.concatenate([pixels[0], pixels[-1]])))
    light_paper = paper >= 128
    if rng.random() < 0.3:  # thicker or thinner strokes: grow or shrink the ink by a pixel
        thicker = rng.random() < 0.5
        img = img.filter(ImageFilter.MinFilter(3) if thicker == light_paper else ImageFilter.MaxFilter(3))
    if rng.random() < 0.5:
        img = img.rotate(rng.uniform(-15, 15), resample=Image.Resampling.BILINEAR, fillcolor=paper)
    if rng.random() < 0.3:
        img = img.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.5)))
    if rng.random() < 0.3:
        noise = np.random.default_rng(rng.randrange(2**32)).normal(0, rng.uniform(3, 25), (img.height, img.width))
        img = Image.fromarray(np.clip(np.asarray(img, dtype=np.float32) + noise, 0, 255).astype(np.uint8))
    if rng.random() < 0.3:
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=rng.randrange(20, 90))
        img = Image.open(io.BytesIO(buf.getvalue())).convert("L")
    return img


def synthetic_digit(rng: random.Random, fonts: tuple[str, ...] = TRAIN_FONTS) -> tuple[Image.Image, int]:
    """A training image: a pen digit or (when fonts are available) a typed one, either polarity, degraded."""
    digit = rng.randrange(10)
    dark_on_light = rng.random() < 0.5
    usable = available_fonts(fonts)
    if usable and rng.random() < 0.4:
        img = font_digit(digit, rng.choice(usable), rng, dark_on_light=dark_on_light)
    else:
        img = pen_digit(digit, rng, dark_on_light=dark_on_light)
    return degrade(img, rng), digit


def robustness_set(seed: int = 12345, pen_per_digit: int = 20) -> list[tuple[Image.Image, int, str]]:
    """The held-out robustness set: (image, digit, kind) with kind "pen/dark-on-light",
    "font/light-on-dark", ...; pen digits of their own seed, fonts never trained on, both
    polarities, canvases of 28 to 128 px. Fonts missing on this machine are left out."""
    rng = random.Random(seed)
    out = []
    for polarity, dark_on_light in (("dark-on-light", True), ("light-on-dark", False)):
        for digit in range(10):
            for _ in range(pen_per_digit):
                out.append((pen_digit(digit, rng, dark_on_light=dark_on_light), digit, f"pen/{polarity}"))
            for font in available_fonts(HELD_OUT_FONTS):
                for canvas in (28, 64):
                    img = font_digit(digit, font, rng, canvas=canvas, dark_on_light=dark_on_light)
                    out.append((img, digit, f"font/{polarity}"))
    return out
