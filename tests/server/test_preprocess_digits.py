"""Image preprocessing of model.json: formats, modes, the documented steps, and refusals."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image, ImageFile

from attnserve.contract.manifest import Preprocessing
from attnserve.server.images.preprocess import preprocess_image
from attnserve.server.shared.errors import InvalidRequest

GRAY = Preprocessing(image_size=8, channels=1, mean=[0.5], std=[0.5], resample="bilinear", invert=True)
RGB = Preprocessing(image_size=4, channels=3, mean=[0.5, 0.4, 0.3], std=[0.25, 0.5, 1.0], resample="nearest")


def encode(img: Image.Image, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue()


def test_dark_ink_on_paper_becomes_bright_ink_for_the_model():
    img = Image.new("L", (16, 16), 255)  # white paper
    img.paste(0, (4, 4, 12, 12))  # a black square of ink
    x = preprocess_image(encode(img), GRAY)
    assert x.shape == (1, 8, 8) and x.dtype == np.float32
    assert x[0, 0, 0] == pytest.approx(-1.0)  # paper: (0 - 0.5) / 0.5
    assert x[0, 4, 4] == pytest.approx(1.0)  # ink: (1 - 0.5) / 0.5


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "P"])
def test_png_in_any_mode_gives_the_same_grayscale_pixels(mode):
    base = Image.new("L", (16, 16), 255)
    base.paste(0, (2, 2, 9, 14))
    expected = preprocess_image(encode(base), GRAY)
    np.testing.assert_allclose(preprocess_image(encode(base.convert(mode)), GRAY), expected, atol=1e-6)


def test_transparent_background_counts_as_paper():
    img = Image.new("RGBA", (8, 8), (0, 0, 0, 0))  # fully transparent black
    img.paste((0, 0, 0, 255), (0, 0, 4, 8))  # opaque ink on the left half
    x = preprocess_image(encode(img), GRAY)
    assert x[0, :, 0].min() == pytest.approx(1.0) and x[0, :, -1].max() == pytest.approx(-1.0)


@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_a_photo_stored_sideways_is_seen_as_its_exif_orientation_shows_it(orientation):
    # a phone stores a portrait photo sideways, with an EXIF tag that says how to turn it
    upright = Image.new("L", (16, 16), 255)
    upright.paste(0, (2, 2, 6, 14))  # a bar of ink on the left: not symmetric under any turn
    stored = upright.transpose({3: Image.Transpose.ROTATE_180, 6: Image.Transpose.ROTATE_90,
                                8: Image.Transpose.ROTATE_270}[orientation])  # fmt: skip
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    stored.save(buf, format="PNG", exif=exif)
    expected = preprocess_image(encode(upright), GRAY)
    np.testing.assert_allclose(preprocess_image(buf.getvalue(), GRAY), expected, atol=1e-6)
    assert not np.allclose(preprocess_image(encode(stored), GRAY), expected)  # the tag is what turns it


def _exif_with_a_tag_pillow_cannot_write(orientation: int) -> bytes:
    """EXIF (big-endian TIFF) of Orientation and MaxSampleValue (0x0119, a SHORT) holding the
    ASCII 'Canon', as a camera's firmware may write it: Pillow reads it, and fails writing it back."""
    entries = struct.pack(">HHIHH", 0x0112, 3, 1, orientation, 0) + struct.pack(">HHII", 0x0119, 2, 6, 38)
    return b"Exif\0\0MM\0\x2a" + struct.pack(">IH", 8, 2) + entries + struct.pack(">I", 0) + b"Canon\0"


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_a_sideways_photo_with_odd_exif_tags_is_turned_not_an_internal_error(fmt):
    upright = Image.new("L", (16, 16), 255)
    upright.paste(0, (2, 2, 6, 14))
    buf = io.BytesIO()
    upright.transpose(Image.Transpose.ROTATE_90).save(buf, format=fmt, exif=_exif_with_a_tag_pillow_cannot_write(6))
    expected = preprocess_image(encode(upright, fmt), GRAY)
    np.testing.assert_allclose(preprocess_image(buf.getvalue(), GRAY), expected, atol=0.1)


def test_a_lab_tiff_reaches_a_grayscale_model_as_its_grays():
    gray = Image.new("L", (16, 16), 255)
    gray.paste(0, (2, 2, 6, 14))
    lab = Image.merge("LAB", (gray, Image.new("L", gray.size, 128), Image.new("L", gray.size, 128)))  # a, b neutral
    expected = preprocess_image(encode(gray), GRAY)
    np.testing.assert_allclose(preprocess_image(encode(lab, "TIFF"), GRAY), expected, atol=0.02)


def test_white_ink_on_a_transparent_sheet_is_seen_as_on_black():
    # flattened onto white it was white on white: a blank image
    img = Image.new("RGBA", (16, 16), (0, 0, 0, 0))
    img.paste((255, 255, 255, 255), (4, 2, 8, 14))
    on_black = Image.new("L", (16, 16), 0)
    on_black.paste(255, (4, 2, 8, 14))
    np.testing.assert_allclose(preprocess_image(encode(img), GRAY), preprocess_image(encode(on_black), GRAY), atol=1e-6)
    paper = Image.new("RGBA", (16, 16), (255, 255, 255, 255))  # a white sheet with transparent margins stays white
    paper.paste((0, 0, 0, 255), (6, 4, 9, 12))
    paper.paste((0, 0, 0, 0), (0, 0, 16, 2))
    on_white = Image.new("L", (16, 16), 255)
    on_white.paste(0, (6, 4, 9, 12))
    np.testing.assert_allclose(
        preprocess_image(encode(paper), GRAY), preprocess_image(encode(on_white), GRAY), atol=1e-6
    )


def test_jpeg_and_rgb_normalisation_per_channel():
    img = Image.new("RGB", (4, 4), (255, 102, 0))
    x = preprocess_image(encode(img, "JPEG"), RGB)
    assert x.shape == (3, 4, 4)
    np.testing.assert_allclose(x[:, 0, 0], [(1 - 0.5) / 0.25, (0.4 - 0.4) / 0.5, (0 - 0.3) / 1.0], atol=0.05)


@pytest.mark.parametrize("data", [b"", b"not an image", encode(Image.new("L", (8, 8)))[:30]])
def test_undecodable_bytes_are_invalid_requests(data):
    with pytest.raises(InvalidRequest, match="image"):
        preprocess_image(data, GRAY)


def test_oversized_files_are_refused():
    with pytest.raises(InvalidRequest, match="the limit is"):
        preprocess_image(encode(Image.new("L", (64, 64))), GRAY, max_bytes=10)


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares width x height but carries almost no pixel data (a decompression bomb)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def test_decompression_bomb_is_refused_from_its_header(monkeypatch):
    decoded = []
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: decoded.append(self) or None)
    with pytest.raises(InvalidRequest, match="the limit is|decompression bomb"):
        preprocess_image(png_header_only(50_000, 50_000), GRAY)
    assert not decoded, "pixels were decoded before the size check"
    with pytest.raises(InvalidRequest, match="pixels"):
        preprocess_image(png_header_only(100, 100), GRAY, max_pixels=99)
    with pytest.raises(InvalidRequest, match="10000x2000 = 20000000 pixels"):  # under Pillow's own limit, over ours
        preprocess_image(png_header_only(10_000, 2_000), GRAY)
    assert not decoded


INK = Preprocessing(
    image_size=16,
    channels=1,
    mean=[0.5],
    std=[0.5],
    resample="bilinear",
    invert=True,
    auto_invert=True,
    crop_to_ink=True,
)


def _drawn_seven(canvas: int, box: tuple[int, int, int, int], width: int, dark_on_light: bool) -> bytes:
    from PIL import ImageDraw

    paper, ink = (255, 0) if dark_on_light else (0, 255)
    img = Image.new("L", (canvas, canvas), paper)
    left, top, right, bottom = box
    ImageDraw.Draw(img).line([(left, top), (right, top), (left + (right - left) // 3, bottom)], fill=ink, width=width)
    return encode(img)


def test_either_ink_polarity_reaches_the_model_alike():
    dark_on_light = preprocess_image(_drawn_seven(64, (16, 12, 48, 52), 5, True), INK)
    light_on_dark = preprocess_image(_drawn_seven(64, (16, 12, 48, 52), 5, False), INK)
    np.testing.assert_array_equal(dark_on_light, light_on_dark)
    assert dark_on_light[0, 0, 0] == pytest.approx(-1.0) and dark_on_light.max() > 0.5  # background dark, ink bright
    plain = preprocess_image(_drawn_seven(64, (16, 12, 48, 52), 5, False), GRAY)  # fixed inversion: ink goes dark
    assert plain[0, 0, 0] == pytest.approx(1.0)  # the background comes out as ink


def test_a_small_thin_digit_in_a_corner_looks_like_a_large_centred_one():
    """What the issue's hand-drawn 7 needed: size, place and stroke width stop mattering."""
    big = preprocess_image(_drawn_seven(128, (24, 16, 104, 112), 12, True), INK)
    small = preprocess_image(_drawn_seven(128, (4, 4, 24, 28), 2, True), INK)
    assert np.abs(big - small).mean() < 0.25, np.abs(big - small).mean()
    without_crop = Preprocessing(**{**INK.__dict__, "crop_to_ink": False})
    far = np.abs(preprocess_image(_drawn_seven(128, (24, 16, 104, 112), 12, True), without_crop)
                 - preprocess_image(_drawn_seven(128, (4, 4, 24, 28), 2, True), without_crop)).mean()  # fmt: skip
    assert far > 2 * np.abs(big - small).mean()


def test_a_blank_image_is_left_uncropped():
    blank = encode(Image.new("L", (40, 40), 250))
    x = preprocess_image(blank, INK)
    assert x.shape == (1, 16, 16) and np.allclose(x, x[0, 0, 0])
