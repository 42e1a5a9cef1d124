"""``ClassifyRequest`` parsed with its raw tensors left in the received bytes (``wire``): each
``images[i].tensor.raw_contents`` is a ``memoryview`` of the gRPC message, the rest protobuf's."""

from __future__ import annotations

from dataclasses import dataclass, field

from attnserve.protos.attnserve.v1 import inference_pb2 as pb

from .wire import LEN, Unexpected, encode_varint, fields, length_tag

CLASSIFY_METHOD = "/attnserve.v1.InferenceService/Classify"

# Field numbers (protos/attnserve/v1/inference.proto).
IMAGES, TENSOR, RAW_CONTENTS = 2, 2, 3  # ClassifyRequest.images, ImageInput.tensor, Tensor.raw_contents


@dataclass(frozen=True)
class LiftedClassify:
    """The request with each lifted ``raw_contents`` empty, and the lifted ones by image index."""

    message: pb.ClassifyRequest
    raw: dict[int, memoryview] = field(default_factory=dict)  # views of the received bytes


def parse_classify(data: bytes) -> LiftedClassify:
    """Received ``ClassifyRequest`` bytes -> the message, its image tensors' bytes not copied.

    Raises protobuf's DecodeError for bytes that are not a ClassifyRequest."""
    view = memoryview(data)
    try:
        raw: dict[int, memoryview] = {}
        stripped = _request(view, raw)
    except Unexpected:
        return LiftedClassify(pb.ClassifyRequest.FromString(data))
    return LiftedClassify(pb.ClassifyRequest.FromString(stripped), raw)


def _request(buf: memoryview, raw: dict[int, memoryview]) -> bytes:
    parts: list[bytes | memoryview] = []
    image = 0
    for number, wire, tag_at, value_at, end in fields(buf, 0, len(buf)):
        if number != IMAGES:
            parts.append(buf[tag_at:end])
            continue
        if wire != LEN:
            raise Unexpected
        inner = _image(buf, value_at, end, image, raw)
        parts += [length_tag(IMAGES), encode_varint(len(inner)), inner]
        image += 1
    return b"".join(parts)


def _image(buf: memoryview, start: int, end: int, index: int, raw: dict[int, memoryview]) -> bytes:
    parts: list[bytes | memoryview] = []
    tensors = 0
    for number, wire, tag_at, value_at, field_end in fields(buf, start, end):
        if number != TENSOR:
            parts.append(buf[tag_at:field_end])
            continue
        tensors += 1
        if wire != LEN or tensors > 1:  # a second tensor field merges into the first: protobuf's to do
            raise Unexpected
        inner = _tensor(buf, value_at, field_end, index, raw)
        parts += [length_tag(TENSOR), encode_varint(len(inner)), inner]
    return b"".join(parts)


def _tensor(buf: memoryview, start: int, end: int, index: int, raw: dict[int, memoryview]) -> bytes:
    parts: list[bytes | memoryview] = []
    for number, wire, tag_at, value_at, field_end in fields(buf, start, end):
        if number != RAW_CONTENTS:
            parts.append(buf[tag_at:field_end])
            continue
        if wire != LEN or index in raw:
            raise Unexpected
        raw[index] = buf[value_at:field_end]
    return b"".join(parts)
