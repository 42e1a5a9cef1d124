"""``ClassifyRequest`` parsed with its raw tensors left in the received bytes.

protobuf copies every bytes field twice on the way in: once when it parses the message,
once more when Python reads the field (a 602 KB image tensor: about 0.27 ms of CPU a request
on a 2-core VM, as much as the rest of the handler). :func:`parse_classify` walks the wire
format (protobuf's encoding spec: tag varints, length-delimited fields) down to each
``images[i].tensor.raw_contents``, takes it as a ``memoryview`` of the received bytes, and
lets protobuf parse the rest, which is a few hundred bytes. A message this walk does not
expect (a field repeated where one is usual, groups, a bad tag or length) is parsed whole
by protobuf instead, so its meaning and its errors are protobuf's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from attnserve.protos.attnserve.v1 import inference_pb2 as pb

CLASSIFY_METHOD = "/attnserve.v1.InferenceService/Classify"

# Field numbers (protos/attnserve/v1/inference.proto) and wire types (protobuf encoding spec).
IMAGES, TENSOR, RAW_CONTENTS = 2, 2, 3  # ClassifyRequest.images, ImageInput.tensor, Tensor.raw_contents
VARINT, I64, LEN, I32 = 0, 1, 2, 5
LEN_TAG_2 = bytes([IMAGES << 3 | LEN])  # the tag of images (in a request) and of tensor (in an image)


@dataclass(frozen=True)
class LiftedClassify:
    """The request with each lifted ``raw_contents`` empty, and the lifted ones by image index."""

    message: pb.ClassifyRequest
    raw: dict[int, memoryview] = field(default_factory=dict)  # views of the received bytes


class _Unexpected(Exception):
    """The walk met something it leaves to protobuf."""


def parse_classify(data: bytes) -> LiftedClassify:
    """Received ``ClassifyRequest`` bytes -> the message, its image tensors' bytes not copied.

    Raises protobuf's DecodeError for bytes that are not a ClassifyRequest."""
    view = memoryview(data)
    try:
        raw: dict[int, memoryview] = {}
        stripped = _request(view, raw)
    except _Unexpected:
        return LiftedClassify(pb.ClassifyRequest.FromString(data))
    return LiftedClassify(pb.ClassifyRequest.FromString(stripped), raw)


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while pos < end and shift < 64:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise _Unexpected


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _fields(buf: memoryview, start: int, end: int):
    """(field number, wire type, start of the field's tag, start of its value, end of the field)
    of each field in ``buf[start:end]``; a length-delimited value is ``buf[value:field_end]``."""
    pos = start
    while pos < end:
        tag_at = pos
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise _Unexpected
        if wire == VARINT:
            _, after = _varint(buf, pos, end)
        elif wire == LEN:
            size, pos = _varint(buf, pos, end)
            after = pos + size
        elif wire == I64:
            after = pos + 8
        elif wire == I32:
            after = pos + 4
        else:  # groups: deprecated, never sent by our clients
            raise _Unexpected
        if after > end:
            raise _Unexpected
        yield number, wire, tag_at, pos, after
        pos = after


def _request(buf: memoryview, raw: dict[int, memoryview]) -> bytes:
    parts: list[bytes | memoryview] = []
    image = 0
    for number, wire, tag_at, value_at, end in _fields(buf, 0, len(buf)):
        if number != IMAGES:
            parts.append(buf[tag_at:end])
            continue
        if wire != LEN:
            raise _Unexpected
        inner = _image(buf, value_at, end, image, raw)
        parts += [LEN_TAG_2, _encode_varint(len(inner)), inner]
        image += 1
    return b"".join(parts)


def _image(buf: memoryview, start: int, end: int, index: int, raw: dict[int, memoryview]) -> bytes:
    parts: list[bytes | memoryview] = []
    tensors = 0
    for number, wire, tag_at, value_at, field_end in _fields(buf, start, end):
        if number != TENSOR:
            parts.append(buf[tag_at:field_end])
            continue
        tensors += 1
        if wire != LEN or tensors > 1:  # a second tensor field merges into the first: protobuf's to do
            raise _Unexpected
        inner = _tensor(buf, value_at, field_end, index, raw)
        parts += [LEN_TAG_2, _encode_varint(len(inner)), inner]
    return b"".join(parts)


def _tensor(buf: memoryview, start: int, end: int, index: int, raw: dict[int, memoryview]) -> bytes:
    parts: list[bytes | memoryview] = []
    for number, wire, tag_at, value_at, field_end in _fields(buf, start, end):
        if number != RAW_CONTENTS:
            parts.append(buf[tag_at:field_end])
            continue
        if wire != LEN or index in raw:
            raise _Unexpected
        raw[index] = buf[value_at:field_end]
    return b"".join(parts)
