"""Image preprocessing: the steps of model.json's ``preprocessing``, and bombs refused before decoding."""

from __future__ import annotations

import io
import struct
import warnings
import zlib

import numpy as np
import pytest
from PIL import Image

from attnserve.contract.manifest import Preprocessing
from attnserve.server.images.preprocess import preprocess_image, tensor_to_pixels
from attnserve.server.shared.errors import InvalidRequest

GRAY = Preprocessing(image_size=4, channels=1, mean=[0.5], std=[0.25], resample="nearest", invert=False)
RGB = Preprocessing(image_size=4, channels=3, mean=[0.1, 0.2, 0.3], std=[0.5, 0.5, 0.5], resample="bilinear")
LIMITS = dict(max_pixels=10_000, max_bytes=100_000)


def _encode(image: Image.Image, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, **({"transparency": 0} if "transparency" in image.info else {}))
    return buf.getvalue()


def _transparent_palette() -> Image.Image:
    image = Image.new("P", (5, 5), 0)  # every pixel is palette entry 0: black, and transparent
    image.putpalette([0, 0, 0] * 256)
    image.info["transparency"] = 0
    return image


def test_grayscale_steps_exactly():
    pixels = np.arange(16, dtype=np.uint8).reshape(4, 4) * 16  # (H, W), already the model's size
    out = preprocess_image(_encode(Image.fromarray(pixels)), GRAY, **LIMITS)
    assert out.shape == (1, 4, 4) and out.dtype == np.float32
    np.testing.assert_allclose(out[0], (pixels / 255.0 - 0.5) / 0.25, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("prep", [GRAY, RGB, Preprocessing(image_size=4, channels=3, mean=[0.45], std=[0.226])])
def test_normalisation_gives_the_formulas_float32_numbers_bit_for_bit(prep):
    """Every pixel value of every channel (the tables looked up) against the formula computed on
    the whole image in float32, as the export's reference preprocessing does."""
    from attnserve.contract.images import normalize

    rng = np.random.default_rng(3)
    pixels = rng.integers(0, 256, (31, 37, prep.channels), dtype=np.uint8)
    pixels[0, : min(37, 256)] = np.arange(37, dtype=np.uint8)[:, None]
    pixels[1:9].reshape(-1, prep.channels)[:256] = np.arange(256, dtype=np.uint8)[:, None]  # every level
    for image in (pixels, pixels[..., 0]) if prep.channels == 1 else (pixels,):
        x = image.astype(np.float32) / 255.0
        x = x[:, :, None] if x.ndim == 2 else x
        expected = np.ascontiguousarray(((x - np.float32(prep.mean)) / np.float32(prep.std)).transpose(2, 0, 1))
        got = normalize(image, prep)
        assert got.dtype == np.float32 and got.flags.c_contiguous and got.shape == expected.shape
        assert np.array_equal(got, expected)


def test_invert_and_per_channel_normalisation():
    pixels = np.zeros((4, 4, 3), dtype=np.uint8)
    pixels[..., 0], pixels[..., 1], pixels[..., 2] = 0, 128, 255
    prep = Preprocessing(**{**RGB.__dict__, "invert": True})
    out = preprocess_image(_encode(Image.fromarray(pixels)), prep, **LIMITS)  # (3, 4, 4)
    expected = [((255 - v) / 255.0 - m) / 0.5 for v, m in zip((0, 128, 255), (0.1, 0.2, 0.3))]
    np.testing.assert_allclose(out[:, 0, 0], expected, rtol=1e-6, atol=1e-6)


def test_resize_uses_the_manifest_filter():
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (9, 7), dtype=np.uint8))
    out = preprocess_image(_encode(image), GRAY, **LIMITS)
    manual = np.asarray(image.resize((4, 4), Image.Resampling.NEAREST), dtype=np.float32)
    np.testing.assert_allclose(out[0], (manual / 255.0 - 0.5) / 0.25, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("image", "fmt"),
    [
        (Image.new("RGBA", (5, 5), (0, 0, 0, 0)), "PNG"),  # fully transparent -> white paper
        (Image.new("LA", (5, 5), (0, 0)), "PNG"),
        (_transparent_palette(), "GIF"),
        (Image.fromarray(np.full((5, 5), 65535, dtype=np.uint16)), "PNG"),  # 16-bit white
        (Image.fromarray(np.full((5, 5), 255, dtype=np.int32)), "TIFF"),  # 8-bit values in a 32-bit TIFF
        (Image.fromarray(np.full((5, 5), 65535, dtype=np.int32)), "TIFF"),  # 16-bit values in one
        (Image.fromarray(np.full((5, 5), 1.0, dtype=np.float32)), "TIFF"),  # a float image in 0..1
        (Image.new("1", (5, 5), 1), "BMP"),
        (Image.new("CMYK", (5, 5), (0, 0, 0, 0)), "JPEG"),
        (Image.new("RGB", (5, 5), (255, 255, 255)), "WEBP"),
    ],
    ids=["RGBA", "LA", "P-transparent", "I;16", "I-8bit", "I-16bit", "F-unit", "1-bit", "CMYK", "WEBP"],
)
def test_every_mode_becomes_white_for_white_paper(image, fmt):
    for prep in (GRAY, RGB):
        out = preprocess_image(_encode(image, fmt), prep, **LIMITS)
        white = (1.0 - np.asarray(prep.mean, dtype=np.float32)) / np.asarray(prep.std, dtype=np.float32)
        np.testing.assert_allclose(out[:, 2, 2], white, atol=0.02 / min(prep.std))


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height, with one tiny IDAT: a decompression bomb's shape."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 10)) + chunk(b"IEND", b"")


def test_pixel_limit_is_checked_before_decoding():
    """The header claims 12 M pixels over 10 bytes of data: refused by size, never decoded
    (decoding would have failed with "does not decode")."""
    with pytest.raises(InvalidRequest, match=r"3000x4000 = 12000000 pixels; the limit is 10000 \(--max-image-pixels\)"):
        preprocess_image(_png_header_only(3000, 4000), GRAY, **LIMITS)


@pytest.mark.parametrize("side", [6_000, 10_000, 15_000], ids=["under-pillows", "pillow-warns", "pillow-refuses"])
def test_a_header_over_the_pixel_limit_gets_the_limits_message_whatever_pillow_thinks_of_it(side):
    """Pillow warns over 89,478,485 pixels and refuses over 178,956,970 inside Image.open, before
    the size can be checked: every side of those gets the same message, naming the setting."""
    with pytest.raises(InvalidRequest) as err:
        preprocess_image(_png_header_only(side, side), GRAY, max_pixels=25_000_000, max_bytes=10**6)
    assert f"{side * side} pixels; the limit is 25000000 (--max-image-pixels)" in str(err.value)
    assert "decompression bomb" not in str(err.value)


def test_pillows_own_bomb_guard_is_an_invalid_request():
    """A pixel limit set above Pillow's own: Pillow still decodes nothing that large."""
    with pytest.raises(InvalidRequest, match="400000000 pixels; Pillow decodes none that large"):
        preprocess_image(_png_header_only(20_000, 20_000), GRAY, max_pixels=10**12, max_bytes=10**6)


def test_byte_limit_and_garbage():
    with pytest.raises(InvalidRequest, match=r"the limit is 10 \(--max-image-bytes\)"):
        preprocess_image(_encode(Image.new("L", (4, 4))), GRAY, max_pixels=100, max_bytes=10)
    with pytest.raises(InvalidRequest, match="not a supported format"):
        preprocess_image(b"GIF89a nonsense" * 4, GRAY, **LIMITS)
    with pytest.raises(InvalidRequest, match="does not decode"):
        preprocess_image(_encode(Image.new("L", (40, 40)), "JPEG")[:200], GRAY, **LIMITS)


def test_raw_tensor_checks():
    good = np.ones((1, 4, 4), dtype=np.float32)
    np.testing.assert_array_equal(tensor_to_pixels([1, 4, 4], "FP32", good.tobytes(), GRAY), good)
    np.testing.assert_array_equal(tensor_to_pixels([1, 1, 4, 4], "FP32", good.tobytes(), GRAY), good)
    with pytest.raises(InvalidRequest, match="shape"):
        tensor_to_pixels([4, 4], "FP32", good.tobytes(), GRAY)
    with pytest.raises(InvalidRequest, match="FP16"):
        tensor_to_pixels([1, 4, 4], "FP16", good.tobytes(), GRAY)
    with pytest.raises(InvalidRequest, match="bytes"):
        tensor_to_pixels([1, 4, 4], "FP32", good.tobytes()[:-4], GRAY)
    bad = good.copy()
    bad[0, 1, 1] = np.inf
    with pytest.raises(InvalidRequest, match="NaN or Inf"):
        tensor_to_pixels([1, 4, 4], "FP32", bad.tobytes(), GRAY)


@pytest.mark.parametrize("value", [np.nan, -np.inf, np.inf])
@pytest.mark.parametrize("where", [(0, 0, 0), (0, 3, 3), (0, 2, 1)])
def test_raw_tensor_refuses_nan_and_inf_anywhere(value, where):
    bad = np.zeros((1, 4, 4), dtype=np.float32)
    bad[where] = value
    with pytest.raises(InvalidRequest, match="NaN or Inf"):
        tensor_to_pixels([1, 4, 4], "FP32", bad.tobytes(), GRAY)


def test_raw_tensor_values_must_be_normalized_pixels():
    edge = np.full((1, 4, 4), -1e4, dtype=np.float32)
    edge[0, 0, 0] = 1e4
    np.testing.assert_array_equal(tensor_to_pixels([1, 4, 4], "FP32", edge.tobytes(), GRAY), edge)
    for value in (-2e4, 3.0e38):
        bad = np.zeros((1, 4, 4), dtype=np.float32)
        bad[0, 1, 2] = value
        with pytest.raises(InvalidRequest, match=r"must lie in -10000\.\.10000 .* got "):
            tensor_to_pixels([1, 4, 4], "FP32", bad.tobytes(), GRAY)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_a_float_tiff_holding_nan_or_inf_is_refused_naming_it(value):
    """A float TIFF (mode F: scientific and HDR tools write them, NaN for "no data") with one such
    value is refused: no level stands for it, and it would have set every pixel's scale (the
    whole picture came out black)."""
    pixels = np.full((5, 5), 0.5, dtype=np.float32)
    pixels[2, 3] = value
    data = _encode(Image.fromarray(pixels), "TIFF")
    refused = r"image has 1 NaN or infinite pixel value\(s\) \(a float image, 5x5\); send finite values"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy "invalid value" warning on the way
        with pytest.raises(InvalidRequest, match=refused):
            preprocess_image(data, GRAY, **LIMITS)
    pixels[2, 3] = 0.5
    grey = preprocess_image(_encode(Image.fromarray(pixels), "TIFF"), GRAY, **LIMITS)
    np.testing.assert_allclose(grey, (128 / 255 - 0.5) / 0.25, atol=1e-6)  # finite: 0..1 -> 0..255
