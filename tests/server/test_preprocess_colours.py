"""Images as cameras, editors and phones save them: an embedded colour profile's colours read as
sRGB, the models' colours."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageCms

from attnserve.contract.manifest import Preprocessing
from attnserve.server.images.preprocess import preprocess_image

# mean 0, std 1: the model's input is pixel / 255, so a difference of one level is 1 / 255
RGB = Preprocessing(image_size=6, channels=3, mean=[0.0], std=[1.0], resample="nearest")
GRAY = Preprocessing(image_size=6, channels=1, mean=[0.0], std=[1.0], resample="nearest")
LEVEL = 1 / 255
# Adobe RGB (1998)'s primaries adapted to D50, as its profile's rXYZ / gXYZ / bXYZ tags hold them.
ADOBE_RGB_D50 = {
    b"rXYZ": (0.6097, 0.3111, 0.0195),
    b"gXYZ": (0.2053, 0.6257, 0.0609),
    b"bXYZ": (0.1492, 0.0632, 0.7446),
}


def _adobe_rgb() -> ImageCms.ImageCmsProfile:
    """An Adobe RGB-like profile: Pillow's sRGB profile with Adobe RGB's wider primaries."""
    data = bytearray(ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes())
    (count,) = struct.unpack_from(">I", data, 128)
    for i in range(count):
        tag, offset, _ = struct.unpack_from(">4sII", data, 132 + 12 * i)
        if tag in ADOBE_RGB_D50:
            struct.pack_into(">4s4x3i", data, offset, b"XYZ ", *(round(v * 65536) for v in ADOBE_RGB_D50[tag]))
    data[84:100] = bytes(16)  # the profile ID (an MD5 of the sRGB bytes): "not computed"
    return ImageCms.ImageCmsProfile(io.BytesIO(bytes(data)))


def _picture() -> Image.Image:
    """6 x 6 blocks of 8 x 8 pixels of saturated and everyday colours, the ones a profile moves most
    and least (blocks: JPEG's and WebP's loss stays at their edges; the model's 6 x 6 samples their middles)."""
    colours = [(0, 200, 0), (220, 30, 20), (30, 40, 210), (230, 180, 140), (120, 120, 120), (250, 250, 250)]
    blocks = np.array([colours[(x + y) % 6] for y in range(6) for x in range(6)], np.uint8).reshape(6, 6, 3)
    return Image.fromarray(blocks.repeat(8, axis=0).repeat(8, axis=1))


def _encode(image: Image.Image, fmt: str = "PNG", **params) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, **params)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "TIFF", "WEBP"])
def test_an_adobe_rgb_picture_reads_as_the_same_picture_saved_as_srgb(fmt):
    picture, adobe = _picture(), _adobe_rgb()
    stored = ImageCms.profileToProfile(picture, ImageCms.createProfile("sRGB"), adobe, outputMode="RGB")
    params = {"quality": 100} if fmt in ("JPEG", "WEBP") else {}
    as_srgb = preprocess_image(_encode(picture, fmt, **params), RGB)
    as_adobe = preprocess_image(_encode(stored, fmt, icc_profile=adobe.tobytes(), **params), RGB)
    # the stored values are far apart (green 0, 200, 0 is stored as 113, 200, 43) ...
    assert np.abs(np.asarray(stored, np.int16) - np.asarray(picture, np.int16)).max() > 60
    # ... the colours they mean are the same, to the few levels of 8-bit round trips (and JPEG's, WebP's loss)
    np.testing.assert_allclose(as_adobe, as_srgb, atol=(8 if fmt in ("JPEG", "WEBP") else 4) * LEVEL)


def test_a_large_adobe_rgb_photo_reads_as_the_same_photo_saved_as_srgb():
    """A photo many times the model's size is converted reduced (whole factor, box filter), then resized
    as any photo: the same pixels as its sRGB copy resized from full size, to a few levels."""
    y, x = np.mgrid[0:900, 0:1200].astype(np.float32)
    smooth = np.stack([x / 1200 * 255, y / 900 * 255, (x + y) / 2100 * 200 + 30], -1).astype(np.uint8)
    picture, adobe = Image.fromarray(smooth), _adobe_rgb()
    stored = ImageCms.profileToProfile(picture, ImageCms.createProfile("sRGB"), adobe, outputMode="RGB")
    prep = Preprocessing(image_size=32, channels=3, mean=[0.0], std=[1.0], resample="bilinear")
    as_srgb = preprocess_image(_encode(picture), prep)
    as_adobe = preprocess_image(_encode(stored, icc_profile=adobe.tobytes()), prep)
    np.testing.assert_allclose(as_adobe, as_srgb, atol=4 * LEVEL)


def test_a_transparent_adobe_rgb_picture_keeps_its_transparency():
    picture, adobe = _picture().convert("RGBA"), _adobe_rgb()
    alpha = np.where(np.arange(36).reshape(6, 6) % 4 == 0, 0, 255).astype(np.uint8)  # every fourth block transparent
    picture.putalpha(Image.fromarray(alpha.repeat(8, axis=0).repeat(8, axis=1)))
    stored = ImageCms.profileToProfile(picture.convert("RGB"), ImageCms.createProfile("sRGB"), adobe)
    stored.putalpha(picture.getchannel("A"))
    as_srgb = preprocess_image(_encode(picture), RGB)
    as_adobe = preprocess_image(_encode(stored, icc_profile=adobe.tobytes()), RGB)
    np.testing.assert_allclose(as_adobe, as_srgb, atol=4 * LEVEL)
    assert (as_adobe[:, 0, 0] == 1.0).all() and (as_adobe[:, 0, 4] == 1.0).all()  # transparent: white background
    assert abs(as_adobe[:, 0, 1] - np.array([220, 30, 20]) / 255).max() < 4 * LEVEL  # opaque red stays red


@pytest.mark.parametrize("prep", [RGB, GRAY], ids=["rgb", "gray"])
def test_an_srgb_profile_changes_nothing_and_a_broken_one_is_ignored(prep):
    picture = _picture()
    plain = preprocess_image(_encode(picture), prep)
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    assert np.array_equal(preprocess_image(_encode(picture, icc_profile=srgb), prep), plain)
    for broken in (b"not a profile", srgb[:200], srgb[:128] + b"\xff" * (len(srgb) - 128)):
        assert np.array_equal(preprocess_image(_encode(picture, icc_profile=broken), prep), plain)
    gray = picture.convert("L")  # a grey picture with an RGB profile: a profile that does not fit is ignored
    plain_gray = preprocess_image(_encode(gray), prep)
    assert np.array_equal(preprocess_image(_encode(gray, icc_profile=srgb), prep), plain_gray)


def _key_coloured(mode: str, key, ink) -> tuple[Image.Image, Image.Image]:
    """(a picture whose background is ``key``, marked transparent by a PNG tRNS chunk; the same
    picture with that background as alpha 0): an ink square on a transparent sheet."""
    picture = Image.new(mode, (6, 6), key)
    picture.paste(ink, (1, 1, 3, 5))
    alpha = Image.new("L", (6, 6), 0)
    alpha.paste(255, (1, 1, 3, 5))
    rgba = picture.convert("RGBA")
    rgba.putalpha(alpha)
    return picture, rgba


@pytest.mark.parametrize(
    ("mode", "key", "ink", "background"),
    [
        ("RGB", (0, 255, 0), (200, 20, 20), 1.0),
        ("RGB", (0, 0, 0), (255, 255, 255), 0.0),  # light ink on a transparent sheet: onto black, as RGBA
        ("L", 0, 90, 1.0),
        ("L", 255, 250, 0.0),
    ],
    ids=["RGB-green-key", "RGB-light-ink-black-key", "L-dark-ink-black-key", "L-light-ink-white-key"],
)
@pytest.mark.parametrize("prep", [RGB, GRAY], ids=["rgb", "gray"])
def test_a_png_key_colour_is_transparent_as_alpha_is(mode, key, ink, background, prep):
    """A PNG in mode RGB or L with a tRNS chunk (one colour transparent, as editors save a flat
    image with a transparent background) reads as the same picture saved with an alpha channel:
    the key colour is not shown."""
    picture, rgba = _key_coloured(mode, key, ink)
    with_key = preprocess_image(_encode(picture, transparency=key), prep)
    assert np.array_equal(with_key, preprocess_image(_encode(rgba), prep))
    assert (with_key[:, 0, 0] == background).all()  # the background, not the key colour


_SRGB = ImageCms.createProfile("sRGB")
GHOSTSCRIPT_CMYK = Path("/usr/share/color/icc/ghostscript/default_cmyk.icc")  # Debian's libgs-common


@pytest.mark.parametrize("profiled", [False, True], ids=["no-profile", "swop-profile"])
def test_a_cmyk_jpeg_reads_as_a_viewer_shows_it(profiled):
    """A print export: Adobe's inverted CMYK (the APP14 marker), without a profile converted
    naively as viewers do (cyan is 0, 255, 255), with one through lcms (SWOP's cyan is 0, 175, 239)."""
    if profiled and not GHOSTSCRIPT_CMYK.exists():
        pytest.skip("Debian's libgs-common is not installed")
    inks = [(255, 0, 0, 0), (0, 255, 0, 0), (0, 0, 0, 0), (0, 0, 0, 255)]  # cyan, magenta, paper, black
    blocks = np.array([inks[x % 4] for y in range(6) for x in range(6)], np.uint8).reshape(6, 6, 4)
    picture = Image.fromarray(blocks.repeat(8, axis=0).repeat(8, axis=1), "CMYK")
    params = {"icc_profile": GHOSTSCRIPT_CMYK.read_bytes()} if profiled else {}
    data = _encode(picture, "JPEG", quality=100, **params)
    assert b"Adobe" in data[:200]
    if profiled:
        profile = ImageCms.getOpenProfile(io.BytesIO(params["icc_profile"]))
        shown = ImageCms.profileToProfile(Image.fromarray(blocks, "CMYK"), profile, _SRGB, outputMode="RGB")
    else:  # (255 - ink) x (255 - black) / 255
        shown = Image.fromarray(
            ((255 - blocks[..., :3].astype(np.uint16)) * (255 - blocks[..., 3:]) // 255).astype(np.uint8)
        )
    expected = np.asarray(shown, np.float32).transpose(2, 0, 1) / 255  # (3, 6, 6), a block a pixel
    np.testing.assert_allclose(preprocess_image(data, RGB), expected, atol=3 * LEVEL)


def test_a_palette_png_with_a_profile_converts_its_colours_and_keeps_its_transparent_index():
    picture, adobe = _picture(), _adobe_rgb()
    stored = ImageCms.profileToProfile(picture, ImageCms.createProfile("sRGB"), adobe, outputMode="RGB")
    indexed = stored.quantize(16, method=Image.Quantize.MEDIANCUT)  # six colours: exact
    colours = len(indexed.getpalette()) // 3
    indices = np.asarray(indexed).copy()
    indices[:8, :8] = colours  # a seventh entry, transparent
    keyed = Image.fromarray(indices, "P")
    keyed.putpalette(indexed.getpalette() + [0, 255, 0])
    rgba = picture.convert("RGBA")
    rgba.putpixel((0, 0), (0, 0, 0, 0))
    rgba.paste((0, 0, 0, 0), (0, 0, 8, 8))
    as_srgb = preprocess_image(_encode(rgba), RGB)
    as_adobe = preprocess_image(_encode(keyed, icc_profile=adobe.tobytes(), transparency=colours), RGB)
    np.testing.assert_allclose(as_adobe, as_srgb, atol=4 * LEVEL)
    assert (as_adobe[:, 0, 0] == 1.0).all()  # transparent: white, not the entry's green
