"""Partial images: a GIF's first frame smaller than its screen reads as a browser shows it."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
from PIL import Image

from attnserve.contract.manifest import Preprocessing
from attnserve.server.images.preprocess import preprocess_image

LIMITS = dict(max_pixels=10_000, max_bytes=100_000)
BLUE, BLACK = (0, 0, 255), (0, 0, 0)


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
