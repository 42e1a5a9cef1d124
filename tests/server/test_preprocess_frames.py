"""Animated and partial images: an animation's first frame is the one classified, and only it is
decoded; a GIF's first frame smaller than its screen reads as a browser shows it."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
from PIL import GifImagePlugin, Image, PngImagePlugin, WebPImagePlugin

from attnserve.contract.manifest import Preprocessing
from attnserve.server.images.preprocess import preprocess_image

RGB = Preprocessing(image_size=8, channels=3, mean=[0.0], std=[1.0], resample="nearest")
LIMITS = dict(max_pixels=10_000, max_bytes=100_000)
RED, GREEN, BLUE, BLACK = (255, 0, 0), (0, 255, 0), (0, 0, 255), (0, 0, 0)
# name -> (Pillow format, save options): lossless, so a frame's colour is its pixels' exactly
ANIMATIONS = {"GIF": ("GIF", {}), "WebP": ("WEBP", {"lossless": True}), "APNG": ("PNG", {})}
PLUGINS = {
    "GIF": GifImagePlugin.GifImageFile,
    "WebP": WebPImagePlugin.WebPImageFile,
    "APNG": PngImagePlugin.PngImageFile,
}


def _animation(name: str, colours: list[tuple[int, int, int]]) -> bytes:
    fmt, params = ANIMATIONS[name]
    frames = [Image.new("RGB", (8, 8), colour) for colour in colours]
    buf = io.BytesIO()
    frames[0].save(buf, fmt, save_all=True, append_images=frames[1:], duration=40, **params)
    return buf.getvalue()


def _solid(colour: tuple[int, int, int]) -> np.ndarray:
    return np.broadcast_to(np.asarray(colour, np.float32)[:, None, None] / 255.0, (3, 8, 8))


@pytest.mark.parametrize("name", list(ANIMATIONS))
def test_an_animations_first_frame_is_the_one_classified(name):
    data = _animation(name, [RED, GREEN, BLUE])
    with Image.open(io.BytesIO(data)) as image:
        assert image.n_frames == 3  # an animation indeed, not a picture Pillow saved alone
    np.testing.assert_array_equal(preprocess_image(data, RGB, **LIMITS), _solid(RED))


@pytest.mark.parametrize("name", list(ANIMATIONS))
def test_no_frame_after_the_first_is_read(name, monkeypatch):
    frames: list[int] = []
    plugin = PLUGINS[name]
    for method in ("seek", "_seek"):  # every plugin moves between frames through these
        original = getattr(plugin, method)

        def counted(self, frame, *args, _original=original):
            frames.append(frame)
            return _original(self, frame, *args)

        monkeypatch.setattr(plugin, method, counted)
    data = _animation(name, [RED, GREEN, BLUE] * 100)
    np.testing.assert_array_equal(preprocess_image(data, RGB, **LIMITS), _solid(RED))
    assert set(frames) <= {0}


def _corrupt_second_frame(name: str, data: bytes) -> bytes:
    """The animation with its second frame's pixels broken: a GIF or APNG cut inside them (as a
    download cut short leaves it), a WebP's zeroed (libwebp refuses a cut container at open)."""
    if name == "WebP":
        second = data.find(b"VP8L", data.find(b"VP8L") + 4)
        size = struct.unpack("<I", data[second + 4 : second + 8])[0]
        start = second + 8 + 5  # after the VP8L signature and the frame's size
        return data[:start] + bytes(size - 5) + data[start + size - 5 :]
    with Image.open(io.BytesIO(data)) as image:
        image.seek(1)
        return data[: image.tile[0][2] + 3]  # the tile's offset: where the frame's pixels begin


@pytest.mark.parametrize("name", list(ANIMATIONS))
def test_a_corrupt_later_frame_does_not_refuse_the_image(name):
    data = _corrupt_second_frame(name, _animation(name, [RED, GREEN, BLUE]))
    with Image.open(io.BytesIO(data)) as image, pytest.raises(OSError):
        image.seek(1)
        image.load()  # the corruption is real: the second frame does not decode
    np.testing.assert_array_equal(preprocess_image(data, RGB, **LIMITS), _solid(RED))


def _gif_on_a_larger_screen(mode: str, transparency: int | None) -> bytes:
    """A 48x48 GIF whose only frame is a 16x16 square at (16, 16): black on a palette whose index 0
    is blue ("P"), or grey 40 on a greyscale one, index 0 black ("L"): what Pillow filled the rest
    of the screen with."""
    frame = Image.new(mode, (16, 16), 1 if mode == "P" else 40)
    if mode == "P":
        frame.putpalette([*BLUE, *BLACK, 255, 255, 0, *BLACK] * 64)
    buf = io.BytesIO()
    frame.save(buf, "GIF", optimize=False, **({} if transparency is None else {"transparency": transparency}))
    data = bytearray(buf.getvalue())
    data[6:10] = struct.pack("<HH", 48, 48)  # the logical screen
    pos = 13 + 3 * (2 << (data[10] & 7))  # after the header and the global colour table
    while data[pos] == 0x21:  # an extension (the transparent index's): its label, then sub-blocks to a 0 length
        pos += 2
        while data[pos]:
            pos += data[pos] + 1
        pos += 1
    assert data[pos] == 0x2C  # the image descriptor
    data[pos + 1 : pos + 5] = struct.pack("<HH", 16, 16)  # its left and top
    return bytes(data)


@pytest.mark.parametrize(
    ("mode", "transparency"), [("P", None), ("P", 2), ("L", None)], ids=["palette", "transparent-index", "greyscale"]
)
def test_a_gif_frame_smaller_than_its_screen_is_shown_on_white_as_browsers_show_it(mode, transparency):
    prep = Preprocessing(image_size=48, channels=3, mean=[0.0], std=[1.0], resample="nearest")
    out = preprocess_image(_gif_on_a_larger_screen(mode, transparency), prep, **LIMITS)
    expected = np.ones((3, 48, 48), np.float32)  # outside the frame: transparent, flattened onto white
    expected[:, 16:32, 16:32] = 0.0 if mode == "P" else np.float32(40 / 255.0)  # the frame
    np.testing.assert_array_equal(out, expected)
