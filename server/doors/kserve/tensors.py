"""KServe v2 tensors: datatypes, shapes, and their byte layouts.

Numbers travel little-endian and row-major; a BYTES tensor's elements each travel as a
4-byte little-endian length followed by the bytes. That is the layout of gRPC's
``raw_input_contents`` / ``raw_output_contents`` and of the REST binary-data extension
(Triton's ``binary_tensor_data``); both transports decode through :func:`from_raw`, and
typed values (gRPC ``contents``, REST JSON ``data``) through :func:`from_values`. Every
size is checked against the bytes actually received before anything is allocated.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...shared.errors import InvalidRequest, echo

BYTES = "BYTES"
NUMPY_TYPES = {
    "BOOL": np.dtype("?"),
    "UINT8": np.dtype("u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
}
DATATYPES = (*NUMPY_TYPES, BYTES)
_LENGTH = struct.Struct("<I")


@dataclass(frozen=True)
class Tensor:
    """One input or output: numbers as an array of ``shape``; BYTES as its elements, row-major."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: Any  # np.ndarray (numbers, of ``shape``) | list[bytes] (BYTES, flat)
    parameters: Mapping[str, Any] = field(default_factory=dict)


def _check(name: str, datatype: str, shape: Sequence[int]) -> int:
    """The element count of ``shape``; unknown datatypes and negative dimensions are refused."""
    if datatype not in DATATYPES:
        raise InvalidRequest(f"input {name}: unknown datatype {echo(datatype)} (one of {', '.join(DATATYPES)})")
    if any(d < 0 for d in shape):
        raise InvalidRequest(f"input {name}: shape {list(shape)} has a negative dimension")
    return math.prod(shape)  # exact (Python ints): a huge declared shape cannot overflow


def split_bytes(raw: bytes | memoryview, count: int, name: str) -> list[bytes]:
    """``count`` length-prefixed elements filling ``raw`` exactly."""
    view = memoryview(raw)
    if count * _LENGTH.size > len(view):
        raise InvalidRequest(f"input {name}: {len(view)} bytes cannot hold {count} BYTES elements")
    items, offset = [], 0
    for i in range(count):
        if offset + _LENGTH.size > len(view):
            raise InvalidRequest(f"input {name}: element {i} has no 4-byte length (the data ends at byte {offset})")
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += _LENGTH.size
        if offset + length > len(view):
            raise InvalidRequest(
                f"input {name}: element {i} declares {length} bytes but only {len(view) - offset} remain"
            )
        items.append(bytes(view[offset : offset + length]))
        offset += length
    if offset != len(view):
        raise InvalidRequest(f"input {name}: {len(view) - offset} bytes left after its {count} BYTES elements")
    return items


def join_bytes(items: Sequence[bytes]) -> bytes:
    return b"".join(_LENGTH.pack(len(item)) + item for item in items)


def from_raw(
    name: str, datatype: str, shape: Sequence[int], raw: bytes | memoryview, parameters: Mapping[str, Any] = {}
) -> Tensor:
    """A tensor from its byte layout (raw contents, or a binary-data section of a REST body)."""
    count = _check(name, datatype, shape)
    shape = tuple(shape)
    if datatype == BYTES:
        return Tensor(name, datatype, shape, split_bytes(raw, count, name), parameters)
    dtype = NUMPY_TYPES[datatype]
    if len(raw) != count * dtype.itemsize:
        raise InvalidRequest(
            f"input {name}: {len(raw)} bytes of data; shape {list(shape)} {datatype} needs {count * dtype.itemsize}"
        )
    return Tensor(name, datatype, shape, np.frombuffer(raw, dtype=dtype).reshape(shape), parameters)


def _number_ok(value: Any, datatype: str) -> bool:
    if datatype == "BOOL":
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return datatype.startswith("FP") or isinstance(value, int)


def from_values(
    name: str, datatype: str, shape: Sequence[int], values: Sequence[Any], parameters: Mapping[str, Any] = {}
) -> Tensor:
    """A tensor from its elements, row-major (gRPC typed contents, REST JSON data flattened)."""
    count = _check(name, datatype, shape)
    shape = tuple(shape)
    if len(values) != count:
        raise InvalidRequest(f"input {name}: {len(values)} values for shape {list(shape)} ({count} elements)")
    if datatype == BYTES:
        items = []
        for i, v in enumerate(values):
            if isinstance(v, str):
                v = v.encode("utf-8", "surrogatepass")
            if not isinstance(v, bytes):
                raise InvalidRequest(f"input {name}: element {i} of a BYTES tensor is {type(v).__name__}, not a string")
            items.append(v)
        return Tensor(name, datatype, shape, items, parameters)
    bad = next((i for i, v in enumerate(values) if not _number_ok(v, datatype)), None)
    if bad is not None:
        raise InvalidRequest(f"input {name}: element {bad} ({echo(values[bad])}) is not a value of datatype {datatype}")
    dtype = NUMPY_TYPES[datatype]
    try:
        with np.errstate(over="ignore"):  # a float beyond the type's range becomes inf; the model checks values
            array = np.asarray(values, dtype=dtype)
    except (OverflowError, ValueError) as exc:
        raise InvalidRequest(f"input {name}: values do not fit {datatype}: {exc}") from None
    return Tensor(name, datatype, shape, array.reshape(shape), parameters)


def to_raw(tensor: Tensor) -> bytes:
    """The tensor's byte layout (raw output contents, REST binary data)."""
    if tensor.datatype == BYTES:
        return join_bytes(tensor.data)
    return np.ascontiguousarray(tensor.data, dtype=NUMPY_TYPES[tensor.datatype]).tobytes()


def to_values(tensor: Tensor) -> list[Any]:
    """The tensor's elements as JSON values, row-major (BYTES as UTF-8 text)."""
    if tensor.datatype == BYTES:
        return [item.decode("utf-8", "replace") for item in tensor.data]
    return np.asarray(tensor.data).reshape(-1).tolist()
