"""An image-classification model's preprocessing: encoded image bytes -> (C, H, W) float32.

Part of the model-directory contract: the server applies it to every request and the
exporter's held-out evaluation applies the same code, so the two agree. The steps follow
``model.json``'s ``preprocessing``: check the byte size, open the image and check its
pixel count *before* decoding (decompression bombs), decode (an animation: its first frame
alone), turn it as its EXIF orientation says, read an embedded ICC profile's colours as sRGB,
convert to "L" (1 channel) or "RGB" (3), optionally invert (255 - x; with ``auto_invert`` only
when the background is light), optionally crop to the ink (``crop_to_ink``), resize to
image_size square with the manifest's resample filter, scale to [0, 1], then (x - mean) / std per channel.

``crop_to_ink`` is the size normalisation of MNIST (LeCun et al. 1998): the digit's bounding
box, centred on a square whose side is the box's longer side (plus :data:`INK_MARGIN` on each
side), then its contrast stretched so the background is 0 and the
ink's strongest pixels are 255 -- thin or faint strokes and off-centre, small or large digits
all reach the model alike. The background is the median of the border pixels, ink whatever
differs from it by more than half the largest difference (and at least :data:`MIN_INK_CONTRAST`;
an image without ink is left uncropped).
"""

from __future__ import annotations

import functools
import io
import re
import struct
import warnings

import numpy as np
from PIL import ExifTags, Image, UnidentifiedImageError

from .image_profiles import to_srgb
from .kinds import RESAMPLE as RESAMPLE_NAMES
from .manifest import Preprocessing

DEFAULT_MAX_BYTES = 10 * 1024 * 1024  # encoded image
DEFAULT_MAX_PIXELS = 4096 * 4096  # declared width x height

# Formats Pillow decodes without external tools or scripting; everything else is refused.
FORMATS = ("PNG", "JPEG", "GIF", "BMP", "TIFF", "WEBP", "PPM")
RESAMPLE = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}
assert tuple(RESAMPLE) == RESAMPLE_NAMES


class ImageRejected(ValueError):
    """An image that is too large, of an unsupported format, or does not decode (the message says which).

    ``limit``: ``"max_pixels"`` or ``"max_bytes"`` when the image is over that limit (a caller
    may name its own setting for it), else None.
    """

    def __init__(self, message: str, limit: str | None = None) -> None:
        super().__init__(message)
        self.limit = limit


_PILLOW_PIXELS = re.compile(r"Image size \((\d+) pixels\)")


def _too_many_pixels(pixels: str, max_pixels: int) -> ImageRejected:
    """``pixels``: how many the header declares, in words ("6000x6000 = 36000000")."""
    return ImageRejected(f"image header declares {pixels} pixels; the limit is {max_pixels}", limit="max_pixels")


def _pillow_refused(exc: Image.DecompressionBombError, max_pixels: int) -> ImageRejected:
    """Pillow's own guard refuses a header over 2 x ``Image.MAX_IMAGE_PIXELS`` inside Image.open,
    before the size can be read: the pixel count comes from its message."""
    found = _PILLOW_PIXELS.search(str(exc))
    if found is None:  # another wording: Pillow raises only over twice its limit
        return _too_many_pixels(f"over {2 * (Image.MAX_IMAGE_PIXELS or 0)}", max_pixels)
    if int(found.group(1)) > max_pixels:
        return _too_many_pixels(found.group(1), max_pixels)
    # a pixel limit set above Pillow's own: no image that large decodes, whatever the limit
    return ImageRejected(f"image header declares {found.group(1)} pixels; Pillow decodes none that large: {exc}")


def _open_checked(data: bytes, max_pixels: int, max_bytes: int) -> Image.Image:
    if not data:
        raise ImageRejected("image is empty (0 bytes)")
    if len(data) > max_bytes:
        raise ImageRejected(f"image is {len(data)} bytes; the limit is {max_bytes}", limit="max_bytes")
    try:
        with warnings.catch_warnings():
            # Pillow warns over Image.MAX_IMAGE_PIXELS; the check below is the one that refuses,
            # with the caller's limit and the image's size in its message.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=FORMATS)  # reads the header only
            width, height = image.size
            if width * height > max_pixels:
                raise _too_many_pixels(f"{width}x{height} = {width * height}", max_pixels)
            deep_key, gif_frame = _deep_png_key(image), _gif_partial_frame(image)
            image.load()  # the full decode (of the first frame alone: an animation's others are never read)
            if deep_key is not None:
                image.info["transparency"] = deep_key
            if gif_frame is not None:
                image = _outside_transparent(image, gif_frame)
    except ImageRejected:
        raise
    except Image.DecompressionBombError as exc:  # Pillow's own guard, in Image.open
        raise _pillow_refused(exc, max_pixels) from None
    except UnidentifiedImageError:
        raise ImageRejected(
            f"image does not decode: not a supported format ({', '.join(FORMATS)}), {len(data)} bytes"
        ) from None
    except (OSError, ValueError, SyntaxError, EOFError, TypeError, MemoryError) as exc:
        raise ImageRejected(f"image does not decode: {type(exc).__name__}: {exc}") from None
    return image


def declared_pixels(data: bytes) -> int:
    """width x height that an encoded image's header declares, nothing decoded; 0 for bytes that
    do not open as an image (:func:`preprocess_image` refuses them with the reason)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=FORMATS) as image:  # reads the header only
                width, height = image.size
    except (Image.DecompressionBombError, UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError):
        return 0
    return width * height


def _to_8bit(image: Image.Image) -> Image.Image:
    """16-bit, 32-bit and float greyscale to "L" by scaling (Pillow's own convert clips at 255):
    16-bit modes from their range; a 32-bit or float image from the range its values fill (a
    32-bit TIFF often holds 8- or 16-bit values, a float one 0..1). "LA" where a tRNS key colour
    is (its pixels transparent), the embedded profile kept. A float image holding NaN or
    infinity is refused."""
    values = np.asarray(image, dtype=np.float32)  # (H, W)
    if image.mode == "F":  # no level stands for NaN or infinity, and one would set the scale of every pixel
        bad = int(values.size - np.count_nonzero(np.isfinite(values)))
        if bad:
            raise ImageRejected(
                f"image has {bad} NaN or infinite pixel value(s) (a float image, {image.width}x{image.height}); "
                "send finite values"
            )
    peak = float(values.max(initial=0.0))
    if image.mode.startswith("I;16"):
        scale = 1 / 257.0  # 0..65535 -> 0..255
    elif image.mode == "F" and peak <= 1.0:
        scale = 255.0
    elif peak <= 255.0:
        scale = 1.0
    else:
        scale = 1 / 257.0 if peak <= 65535.0 else 255.0 / peak
    grey = Image.fromarray(np.clip(np.rint(values * scale), 0, 255).astype(np.uint8), mode="L")
    key = image.info.get("transparency")
    # a 16-bit PNG's tRNS key, matched on the values: scaled, its neighbours would round to it
    if isinstance(key, (int, float)):
        grey = Image.merge("LA", (grey, Image.fromarray(np.where(values == key, 0, 255).astype(np.uint8), mode="L")))
    if "icc_profile" in image.info:
        grey.info["icc_profile"] = image.info["icc_profile"]
    return grey


def _deep_png_key(image: Image.Image) -> tuple[int, ...] | None:
    """A 48-bit PNG's tRNS key colour as the 8-bit one its pixels decode to (Pillow keeps each
    sample's high byte but compares the key's low bytes with them: only a key of 8-bit samples
    times 257 matched); None for any other image. Read before the decode, which drops the raw mode."""
    key = image.info.get("transparency")
    if image.format != "PNG" or image.mode != "RGB" or not isinstance(key, tuple) or not image.tile:
        return None
    # the tile's raw mode, by index: Pillow 10 has tuples (its _Tile's .args came with 11)
    return tuple(v >> 8 for v in key) if image.tile[0][3] == "RGB;16B" else None


def _gif_partial_frame(image: Image.Image) -> tuple[int, int, int, int] | None:
    """A GIF's first frame's box (left, top, right, bottom) where it leaves part of the logical
    screen uncovered and has no transparent index; None otherwise. Read before the decode.

    GIF89a paints the rest of the screen in its background colour, and Pillow fills it with
    palette index 0 (often not the background, and never what is seen); browsers show it
    transparent, and so it is read here: flattened as other transparent pixels are. With a
    transparent index Pillow fills it with that index already."""
    if image.format != "GIF" or "transparency" in image.info or not image.tile:
        return None
    box = tuple(image.tile[0][1])  # the tile's extents (a tuple before Pillow 11's _Tile)
    return None if box == (0, 0, *image.size) else box


def _outside_transparent(image: Image.Image, box: tuple[int, int, int, int]) -> Image.Image:
    alpha = Image.new("L", image.size, 0)
    alpha.paste(255, box)
    out = image.convert("LA" if image.mode == "L" else "RGBA")
    out.putalpha(alpha)
    return out


def _flatten_alpha(image: Image.Image) -> Image.Image:
    """Transparent pixels (alpha, or the key colour of a PNG's tRNS chunk) onto white, as a viewer
    shows them; onto black when what is opaque is light (white ink on a transparent sheet, as an
    icon or a dark-mode drawing is saved), which white would erase."""
    rgba = image.convert("RGBA")
    sample = rgba.copy()
    sample.thumbnail((64, 64))  # decided on a thumbnail: a float copy of a whole photo would cost 16 bytes a pixel
    pixels = np.asarray(sample, dtype=np.float32)
    alpha = pixels[..., 3] / 255.0
    light = alpha.sum() > 0 and float((pixels[..., :3].mean(axis=2) * alpha).sum() / alpha.sum()) > 160.0
    if light and alpha.mean() < 0.5:  # mostly transparent, what is opaque light: ink, not a sheet of paper
        background = (0, 0, 0, 255)
    else:
        background = (255, 255, 255, 255)
    return Image.alpha_composite(Image.new("RGBA", rgba.size, background), rgba).convert("RGB")


def _deep(image: Image.Image) -> bool:
    return image.mode.startswith("I") or image.mode == "F"


def to_mode(image: Image.Image, channels: int) -> Image.Image:
    """Any decoded mode (1, L, LA, P, RGB, RGBA, CMYK, YCbCr, LAB, I;16, I, F, ...) to "L" or "RGB"."""
    if _deep(image):
        image = _to_8bit(image)
    if image.mode in ("RGBA", "LA", "PA", "La", "RGBa") or "transparency" in image.info:  # alpha or a key colour
        image = _flatten_alpha(image)
    elif image.mode == "LAB":  # a Lab TIFF: Pillow converts LAB to RGB alone, not to L
        image = image.convert("RGB")
    return image.convert("L" if channels == 1 else "RGB")


def normalize(pixels: np.ndarray, prep: Preprocessing) -> np.ndarray:
    """(H, W) or (H, W, C) uint8 -> (C, H, W) float32 in the model's normalised range:
    ``(pixel / 255 - mean) / std`` per channel, in float32.

    A uint8 pixel has 256 values, so each channel's are computed once, with those float32
    operations (the same numbers, bit for bit), and every pixel is looked up in its channel's
    table straight into the (C, H, W) layout: one pass, instead of the formula's four temporaries
    and transposing copy over the whole image (0.17 against 0.5-1.5 ms at 224 x 224 x 3)."""
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]  # (H, W, 1)
    tables = _level_tables(pixels.shape[2], tuple(prep.mean), tuple(prep.std))  # (C, 256)
    channels = len(tables)
    out = np.empty((channels, *pixels.shape[:2]), np.float32)  # (C, H, W)
    for c in range(channels):
        np.take(tables[c], pixels[:, :, c if pixels.shape[2] > 1 else 0], out=out[c], mode="clip")  # 0..255: in range
    return out


@functools.lru_cache(maxsize=64)
def _level_tables(image_channels: int, mean: tuple, std: tuple) -> np.ndarray:
    """(C, 256) float32: ``(level / 255 - mean) / std`` of every uint8 level per channel, made once
    per model's preprocessing (read-only: every request shares it)."""
    mean_, std_ = np.asarray(mean, dtype=np.float32), np.asarray(std, dtype=np.float32)  # (C,)
    channels = np.broadcast_shapes((image_channels,), mean_.shape, std_.shape)[0]
    levels = np.arange(256, dtype=np.float32) / np.float32(255.0)  # (256,) as pixel / 255 rounds them
    tables = (levels - np.broadcast_to(mean_, (channels,))[:, None]) / np.broadcast_to(std_, (channels,))[:, None]
    tables.flags.writeable = False
    return tables


# Of the ink box's longer side, on each side. 0: the ink box fills the frame, as in the UCI digits
# the bundled classifier learnt from (a margin cost it 3 points of their held-out accuracy).
INK_MARGIN = 0.0
MIN_INK_CONTRAST = 24  # grey levels between background and ink below which nothing is cropped


def _background(pixels: np.ndarray) -> float:
    """Median of the border pixels of (H, W) uint8: the paper (or screen) behind the ink."""
    border = np.concatenate([pixels[0], pixels[-1], pixels[:, 0], pixels[:, -1]])
    return float(np.median(border))


def _crop_to_ink(image: Image.Image) -> Image.Image:
    """Mode "L" -> mode "L": the ink on a square of background, centred, contrast stretched
    to background 0 / ink 255 in the image's own polarity (see the module docstring)."""
    pixels = np.asarray(image, dtype=np.uint8)  # (H, W)
    bg = _background(pixels)
    diff = np.abs(pixels.astype(np.float32) - bg)  # (H, W) ink strength
    peak = float(diff.max())
    if peak < MIN_INK_CONTRAST:
        return image
    rows, cols = np.nonzero(diff > peak / 2)
    top, bottom, left, right = rows.min(), rows.max() + 1, cols.min(), cols.max() + 1
    side = max(bottom - top, right - left)
    pad = int(round(side * INK_MARGIN))
    full = side + 2 * pad
    ink = np.clip(diff[top:bottom, left:right] * (255.0 / peak), 0, 255)  # (h, w) 0 = background
    canvas = np.zeros((full, full), dtype=np.float32)  # (S, S)
    y, x = (full - (bottom - top)) // 2, (full - (right - left)) // 2
    canvas[y : y + bottom - top, x : x + right - left] = ink
    if bg >= 128:  # light paper: ink stays dark
        canvas = 255.0 - canvas
    return Image.fromarray(np.rint(canvas).astype(np.uint8), mode="L")


def preprocess_pil(image: Image.Image, prep: Preprocessing) -> np.ndarray:
    """A decoded image (any mode) -> (C, H, W) float32: the steps after decoding."""
    image = to_mode(image, prep.channels)
    invert = prep.invert
    if prep.auto_invert and _background(np.asarray(image)) < 128:  # light ink on a dark background
        invert = not invert
    if invert:
        image = Image.eval(image, lambda v: 255 - v)
    if prep.crop_to_ink:
        image = _crop_to_ink(image)
    size = (prep.image_size, prep.image_size)
    if image.size != size:
        image = image.resize(size, resample=RESAMPLE[prep.resample])
    return normalize(np.asarray(image), prep)


def preprocess_image(
    data: bytes,
    prep: Preprocessing,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> np.ndarray:
    """Encoded image bytes -> (C, H, W) float32, C = prep.channels, H = W = prep.image_size.

    A photo's EXIF orientation is applied first (as every viewer shows it: a phone stores a
    portrait picture sideways with a tag that says so), and an embedded colour profile
    (:func:`to_srgb`). Raises :class:`ImageRejected` for
    anything too large, unsupported or undecodable.
    """
    image = _open_checked(data, max_pixels, max_bytes)
    # a profile's colours are converted on the picture reduced to no less than 4x the model's size (a
    # photo's 12 megapixels cost 0.24 s of lcms, more than its decode; 4x: within 2 levels of converting
    # every pixel, 2x: 5), as a filter's resize averages it anyway; not where the ink is cropped to
    # first, nor for a model that samples pixels (nearest)
    least = 0 if prep.crop_to_ink or prep.resample == "nearest" else 4 * prep.image_size
    image = _upright(image)
    if _deep(image):  # 8 bits before the profile, which lcms reads in 8-bit modes here
        image = _to_8bit(image)
    return preprocess_pil(to_srgb(image, least), prep)


# EXIF orientation 2..8 -> the transpose that shows the picture as its camera saw it.
ORIENTATION = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


def _upright(image: Image.Image) -> Image.Image:
    """The image turned as its EXIF (or XMP) orientation says. Only the tag is read: Pillow's
    exif_transpose also writes the rest of the EXIF back without it, which fails on a tag of a
    type Pillow does not write (a camera's ASCII in a SHORT tag) after it has turned the pixels.
    EXIF that does not read leaves the image as stored, as a viewer shows it."""
    try:
        method = ORIENTATION.get(image.getexif().get(ExifTags.Base.Orientation, 1))
    except (OSError, ValueError, SyntaxError, TypeError, KeyError, struct.error):
        return image
    return image if method is None else image.transpose(method)
