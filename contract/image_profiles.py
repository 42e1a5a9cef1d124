"""Embedded ICC colour profiles read as sRGB, a step of :mod:`attnserve.contract.images`."""

from __future__ import annotations

import hashlib
import io
import threading

import numpy as np
from PIL import Image, ImageCms

# Embedded colour profiles. The models learnt from sRGB pixels, and a viewer shows an image in
# its profile's colours: an Adobe RGB or Display P3 photo (phones, cameras) or a CMYK JPEG read
# as sRGB has them wrong (saturated colours dulled or shifted). Transforms are kept per profile
# (its sha256 and the image's mode), built without lcms's one-pixel cache so the work pool's
# threads can share one.
_SRGB = ImageCms.createProfile("sRGB")
_TRANSFORMS: dict[tuple[bytes, str], ImageCms.ImageCmsTransform | None] = {}
_TRANSFORMS_LOCK = threading.Lock()
MAX_TRANSFORMS = 32
# A decoded mode -> the mode its profile's colours are read in (the alpha set aside).
PROFILE_MODES = {"RGB": "RGB", "RGBA": "RGB", "P": "RGB", "PA": "RGB", "L": "L", "LA": "L", "CMYK": "CMYK"}
REDUCIBLE = frozenset({"RGB", "RGBA", "L", "LA", "CMYK"})  # a palette image's pixels are indices: not averaged
# Every level 0, 17, ..., 255 of each channel: a profile that maps them all within one level of
# themselves is sRGB (however its tags are written) and is left alone.
_PROBE = Image.fromarray(
    np.stack(np.meshgrid(*[np.arange(0, 256, 17, dtype=np.uint8)] * 3, indexing="ij"), -1).reshape(64, 64, 3)
)


def _build_transform(icc: bytes, mode: str) -> ImageCms.ImageCmsTransform | None:
    """``mode`` (RGB, L, CMYK) in the profile's colours -> sRGB "RGB"; None for a profile that
    does not read, does not describe ``mode``'s colour space, or is sRGB."""
    try:
        profile = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        transform = ImageCms.buildTransform(profile, _SRGB, mode, "RGB", flags=ImageCms.Flags.NOCACHE)
        if mode == "RGB":
            same = np.abs(np.asarray(transform.apply(_PROBE), np.int16) - np.asarray(_PROBE, np.int16)).max() <= 1
            return None if same else transform
    except (ImageCms.PyCMSError, OSError, ValueError, TypeError):
        return None
    return transform


def _srgb_transform(icc: bytes, mode: str) -> ImageCms.ImageCmsTransform | None:
    key = (hashlib.sha256(icc).digest(), mode)
    with _TRANSFORMS_LOCK:
        if key in _TRANSFORMS:
            return _TRANSFORMS[key]
    transform = _build_transform(icc, mode)
    with _TRANSFORMS_LOCK:
        if len(_TRANSFORMS) >= MAX_TRANSFORMS:
            del _TRANSFORMS[next(iter(_TRANSFORMS))]  # the oldest
        _TRANSFORMS[key] = transform
    return transform


def to_srgb(image: Image.Image, least: int = 0) -> Image.Image:
    """The image with its embedded ICC profile's colours as sRGB ("RGB", "RGBA" with its alpha
    kept); unchanged without a profile, with an sRGB one, or with one that does not read or does
    not fit the image's mode (a broken profile is ignored, as browsers do, not a refusal). With
    ``least``, an image whose shorter side is at least twice that is converted reduced first, by
    the largest whole factor that keeps that side at least ``least`` (a box filter, as Pillow's
    ``resize(reducing_gap=)`` reduces)."""
    icc = image.info.get("icc_profile")
    if not icc or not isinstance(icc, bytes):
        return image
    mode = PROFILE_MODES.get(image.mode)
    transform = _srgb_transform(icc, mode) if mode is not None else None
    if transform is None:
        return image
    factor = min(image.size) // least if least else 1
    if factor >= 2 and image.mode in REDUCIBLE:
        image = image.reduce(factor)
    out = transform.apply(image.convert(mode))
    if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
        out.putalpha(image.convert("RGBA").getchannel("A"))
    return out
