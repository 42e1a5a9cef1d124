"""Image preprocessing for classification: bytes or raw tensors -> (C, H, W) float32.

The steps follow ``model.json``'s ``preprocessing``: check the byte size, open the image
and check its pixel count *before* decoding (decompression bombs), decode, convert to
"L" (1 channel) or "RGB" (3), optionally invert (255 - x), resize to image_size square
with the manifest's resample filter, scale to [0, 1], then (x - mean) / std per channel.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image, UnidentifiedImageError

from .errors import InvalidRequest
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


def _open_checked(data: bytes, max_pixels: int, max_bytes: int) -> Image.Image:
    if not data:
        raise InvalidRequest("image is empty (0 bytes)")
    if len(data) > max_bytes:
        raise InvalidRequest(f"image is {len(data)} bytes; the limit is {max_bytes}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=FORMATS)  # reads the header only
            width, height = image.size
            if width * height > max_pixels:
                raise InvalidRequest(
                    f"image is {width}x{height} = {width * height} pixels; the limit is {max_pixels} "
                    "(checked before decoding)"
                )
            image.load()  # the full decode
    except InvalidRequest:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise InvalidRequest(f"image refused as a decompression bomb: {exc}") from None
    except UnidentifiedImageError:
        raise InvalidRequest(
            f"image does not decode: not a supported format ({', '.join(FORMATS)}), {len(data)} bytes"
        ) from None
    except (OSError, ValueError, SyntaxError, EOFError, TypeError, MemoryError) as exc:
        raise InvalidRequest(f"image does not decode: {type(exc).__name__}: {exc}") from None
    return image


def _to_8bit(image: Image.Image) -> Image.Image:
    """16-bit and float greyscale to "L" by scaling (Pillow's own convert clips at 255)."""
    values = np.asarray(image, dtype=np.float32)  # (H, W)
    if image.mode != "F":
        values = values / 257.0  # 0..65535 -> 0..255
    return Image.fromarray(np.clip(np.rint(values), 0, 255).astype(np.uint8), mode="L")


def _flatten_alpha(image: Image.Image) -> Image.Image:
    """Transparent pixels onto white, as a viewer shows them."""
    rgba = image.convert("RGBA")
    background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(background, rgba).convert("RGB")


def to_mode(image: Image.Image, channels: int) -> Image.Image:
    """Any decoded mode (1, L, LA, P, RGB, RGBA, CMYK, YCbCr, I;16, I, F, ...) to "L" or "RGB"."""
    if image.mode.startswith("I") or image.mode == "F":
        image = _to_8bit(image)
    elif image.mode in ("RGBA", "LA", "PA", "La", "RGBa") or (image.mode == "P" and "transparency" in image.info):
        image = _flatten_alpha(image)
    return image.convert("L" if channels == 1 else "RGB")


def normalize(pixels: np.ndarray, prep: Preprocessing) -> np.ndarray:
    """(H, W) or (H, W, C) uint8 -> (C, H, W) float32 in the model's normalised range."""
    x = pixels.astype(np.float32) / 255.0  # (H, W[, C]) in [0, 1]
    if x.ndim == 2:
        x = x[:, :, None]  # (H, W, 1)
    mean = np.asarray(prep.mean, dtype=np.float32)  # (C,)
    std = np.asarray(prep.std, dtype=np.float32)  # (C,)
    x = (x - mean) / std  # (H, W, C)
    return np.ascontiguousarray(x.transpose(2, 0, 1))  # (C, H, W)


def preprocess_image(
    data: bytes,
    prep: Preprocessing,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> np.ndarray:
    """Encoded image bytes -> (C, H, W) float32, C = prep.channels, H = W = prep.image_size.

    Raises :class:`InvalidRequest` for anything too large, unsupported or undecodable.
    """
    image = to_mode(_open_checked(data, max_pixels, max_bytes), prep.channels)
    if prep.invert:
        image = Image.eval(image, lambda v: 255 - v)
    size = (prep.image_size, prep.image_size)
    if image.size != size:
        image = image.resize(size, resample=RESAMPLE[prep.resample])
    return normalize(np.asarray(image), prep)


MAX_TENSOR_ABS = 1e4


def tensor_to_pixels(shape: list[int], dtype: str, raw: bytes, prep: Preprocessing) -> np.ndarray:
    """A raw tensor (KServe style: shape, dtype name, little-endian bytes) -> (C, H, W) float32.

    It must already be preprocessed: shape (C, H, W) or (1, C, H, W) of the model, float32,
    finite values.
    """
    expected = (prep.channels, prep.image_size, prep.image_size)
    if dtype != "FP32":
        raise InvalidRequest(f"tensor datatype {dtype} is not accepted; send FP32")
    if tuple(shape) not in (expected, (1, *expected)):
        raise InvalidRequest(f"tensor shape {list(shape)} does not match the model's {list(expected)} (C, H, W)")
    count = int(np.prod(expected))
    if len(raw) != 4 * count:
        raise InvalidRequest(f"tensor raw_contents is {len(raw)} bytes; shape {list(shape)} FP32 needs {4 * count}")
    values = np.frombuffer(raw, dtype="<f4").reshape(expected).astype(np.float32)  # (C, H, W), a copy
    if not np.isfinite(values).all():
        raise InvalidRequest("tensor holds NaN or Inf values")
    # Preprocessed pixels lie within a few units of 0; values near the float32 limit overflow
    # inside the model and came back as NaN probabilities (found by tests/reliability/test_fuzz.py).
    if np.abs(values).max() > MAX_TENSOR_ABS:
        raise InvalidRequest(
            f"tensor values must lie in -{MAX_TENSOR_ABS:g}..{MAX_TENSOR_ABS:g} (normalized pixels), "
            f"got {float(np.abs(values).max()):g}"
        )
    return values
