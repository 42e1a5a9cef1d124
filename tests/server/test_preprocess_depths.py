"""16-bit images as scanners, editors and medical tools save them: a PNG's transparent key colour
and an embedded profile kept through the scaling to 8 bits."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from attnserve.contract.manifest import Preprocessing
from attnserve.server.images.preprocess import preprocess_image

from .test_preprocess_colours import _key_coloured

RGB = Preprocessing(image_size=6, channels=3, mean=[0.0], std=[1.0], resample="nearest")
GRAY = Preprocessing(image_size=6, channels=1, mean=[0.0], std=[1.0], resample="nearest")
LEVEL = 1 / 255
# Debian's libgs-common (.ci/run installs it): ghostscript's profiles, a grey and a CMYK one
GHOSTSCRIPT_ICC = Path("/usr/share/color/icc/ghostscript")


def _encode(image: Image.Image, fmt: str = "PNG", **params) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, **params)
    return buf.getvalue()


def _png_48bit(pixels: np.ndarray, key: tuple[int, int, int]) -> bytes:
    """A 16-bit-per-sample RGB PNG with a tRNS key colour (Pillow writes none: it has no such mode)."""
    height, width, _ = pixels.shape

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    rows = b"".join(b"\0" + row.astype(">u2").tobytes() for row in pixels)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 16, 2, 0, 0, 0))
        + chunk(b"tRNS", struct.pack(">3H", *key))
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize(
    ("key", "ink", "background"), [(0, 90, 1.0), (65535, 250, 0.0)], ids=["black-key", "white-key"]
)
@pytest.mark.parametrize("prep", [RGB, GRAY], ids=["rgb", "gray"])
def test_a_16_bit_grey_png_key_colour_is_transparent(key, ink, background, prep):
    """Pillow opens it as I;16; its key is a 16-bit value, and only the pixels holding exactly that
    value are transparent (one level off the key scales to the same 8-bit level, and stays)."""
    _, rgba = _key_coloured("L", key // 257, ink)
    values = np.full((6, 6), key, np.uint16)
    values[1:5, 1:3] = ink * 257
    values[4, 2] = key + (1 if key == 0 else -1)  # within one 8-bit level of the key, opaque
    rgba.putpixel((2, 4), (key // 257,) * 3 + (255,))
    as_16bit = preprocess_image(_encode(Image.fromarray(values), transparency=key), prep)
    assert np.array_equal(as_16bit, preprocess_image(_encode(rgba), prep))
    assert (as_16bit[:, 0, 0] == background).all()  # the background, not the key colour
    assert (as_16bit[:, 4, 2] == key // 257 / 255).all()


@pytest.mark.parametrize("prep", [RGB, GRAY], ids=["rgb", "gray"])
def test_a_48_bit_png_key_colour_is_transparent(prep):
    """Pillow opens a 16-bit-per-sample RGB PNG as 8-bit RGB (each sample's high byte) and kept its
    16-bit key, which it compares by its low bytes: a key whose samples are not 8-bit ones times
    257 (a scanner's, a raw converter's) matched nothing and showed."""
    key, ink = (10, 180, 40), (200, 20, 20)
    picture, rgba = _key_coloured("RGB", key, ink)
    deep = np.asarray(picture, np.uint16) * 256 + 37  # the same high bytes, other low ones
    as_48bit = preprocess_image(_png_48bit(deep, tuple(v * 256 + 37 for v in key)), prep)
    assert np.array_equal(as_48bit, preprocess_image(_encode(rgba), prep))
    assert (as_48bit[:, 0, 0] == 1.0).all()  # white, not green


@pytest.mark.skipif(not (GHOSTSCRIPT_ICC / "sgray.icc").exists(), reason="Debian's libgs-common is not installed")
@pytest.mark.parametrize("transparent", [False, True], ids=["opaque", "key"])
def test_a_16_bit_grey_png_reads_its_profile_as_the_8_bit_one_does(transparent):
    """A grey profile (ghostscript's sGray, up to 19 levels off sRGB's curve) is applied to a 16-bit
    picture as to the same picture in 8 bits; it was ignored (lcms reads 8-bit modes here)."""
    icc = (GHOSTSCRIPT_ICC / "sgray.icc").read_bytes()
    levels = np.arange(36, dtype=np.uint16).reshape(6, 6) * 7 + 5
    params = {"icc_profile": icc, "transparency": 0} if transparent else {"icc_profile": icc}
    if transparent:
        levels[0, 0] = 0
    as_8bit = preprocess_image(_encode(Image.fromarray(levels.astype(np.uint8)), **params), GRAY)
    as_16bit = preprocess_image(_encode(Image.fromarray(levels * 257), **params), GRAY)
    np.testing.assert_allclose(as_16bit, as_8bit, atol=LEVEL)
    plain = preprocess_image(_encode(Image.fromarray(levels.astype(np.uint8))), GRAY)
    assert np.abs(as_16bit - plain).max() > 10 * LEVEL  # the profile's colours, not the stored numbers
    assert (as_16bit[:, 0, 0] == 1.0).all() == transparent
