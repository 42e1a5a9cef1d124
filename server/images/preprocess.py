"""Classification inputs -> (C, H, W) float32: encoded images (the model's preprocessing,
:mod:`attnserve.contract.images`) and raw tensors, bad ones refused with InvalidRequest."""

from __future__ import annotations

import numpy as np

from attnserve.contract import images
from attnserve.contract.manifest import Preprocessing

from ..shared.errors import InvalidRequest

# The server's setting of each limit of the contract, named in the message of an image over it.
LIMIT_FLAGS = {"max_pixels": "--max-image-pixels", "max_bytes": "--max-image-bytes"}


def preprocess_image(
    data: bytes,
    prep: Preprocessing,
    *,
    max_pixels: int = images.DEFAULT_MAX_PIXELS,
    max_bytes: int = images.DEFAULT_MAX_BYTES,
) -> np.ndarray:
    """Encoded image bytes -> (C, H, W) float32; an image the contract refuses -> InvalidRequest."""
    try:
        return images.preprocess_image(data, prep, max_pixels=max_pixels, max_bytes=max_bytes)
    except images.ImageRejected as exc:
        flag = LIMIT_FLAGS.get(exc.limit or "")
        raise InvalidRequest(f"{exc} ({flag})" if flag else str(exc)) from None


MAX_TENSOR_ABS = 1e4


def tensor_to_pixels(
    shape: list[int], dtype: str, raw: bytes | memoryview | np.ndarray, prep: Preprocessing
) -> np.ndarray:
    """A raw tensor (KServe style: shape, dtype name, little-endian values) -> (C, H, W) float32.

    It must already be preprocessed: shape (C, H, W) or (1, C, H, W) of the model, float32,
    finite values. ``raw`` is any C-contiguous buffer (the request's bytes field, a slice of a
    KServe tensor); the result is a read-only view of it, not a copy.
    """
    values = tensor_view(shape, dtype, raw, prep)
    reason = values_refusal(values)
    if reason is not None:
        raise InvalidRequest(reason)
    return values


def tensor_view(shape: list[int], dtype: str, raw: bytes | memoryview | np.ndarray, prep: Preprocessing) -> np.ndarray:
    """:func:`tensor_to_pixels` without reading the values: its datatype, shape and size checked,
    (C, H, W) float32, a read-only view of ``raw``. The values are checked where they are read
    anyway (:func:`values_refusal` on the image's row of its batch)."""
    expected = (prep.channels, prep.image_size, prep.image_size)
    if dtype != "FP32":
        raise InvalidRequest(f"tensor datatype {dtype} is not accepted; send FP32")
    if tuple(shape) not in (expected, (1, *expected)):
        raise InvalidRequest(f"tensor shape {list(shape)} does not match the model's {list(expected)} (C, H, W)")
    count = prep.channels * prep.image_size * prep.image_size
    data = raw if isinstance(raw, bytes) else memoryview(raw).cast("B")
    if len(data) != 4 * count:
        raise InvalidRequest(f"tensor raw_contents is {len(data)} bytes; shape {list(shape)} FP32 needs {4 * count}")
    return np.frombuffer(data, dtype="<f4").reshape(expected)  # (C, H, W), a view


def rows_out_of_range(rows: np.ndarray) -> np.ndarray:
    """(B, N) float32 -> (B,) bool: the rows :func:`values_refusal` refuses (NaN, Inf or out of
    range), in two reductions over the whole batch: min and max propagate NaN and catch Inf and
    out-of-range values with no temporary array."""
    inside = np.minimum.reduce(rows, axis=1) >= -MAX_TENSOR_ABS  # (B,) NaN compares false
    inside &= np.maximum.reduce(rows, axis=1) <= MAX_TENSOR_ABS
    return ~inside


def values_refusal(values: np.ndarray) -> str | None:
    """Why a raw tensor's float32 values are refused (NaN, Inf, or out of range), or None."""
    if not rows_out_of_range(values.reshape(1, -1))[0]:  # only a refused tensor pays for telling which
        return None
    if not np.isfinite(values).all():
        return "tensor holds NaN or Inf values"
    # Preprocessed pixels lie within a few units of 0; values near the float32 limit overflow
    # inside the model and came back as NaN probabilities (found by tests/reliability/test_fuzz.py).
    return (
        f"tensor values must lie in -{MAX_TENSOR_ABS:g}..{MAX_TENSOR_ABS:g} (normalized pixels), "
        f"got {float(np.abs(values).max()):g}"
    )
