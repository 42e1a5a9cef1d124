"""``ModelInferRequest`` parsed with its ``raw_input_contents`` left in the received bytes
(``doors.wire``): each entry is a ``memoryview`` of the gRPC message, the rest protobuf's."""

from __future__ import annotations

from dataclasses import dataclass, field

from attnserve.protos.attnserve.triton import grpc_service_pb2 as gs

from ..wire import Unexpected, lift_repeated_bytes

MODEL_INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"
RAW_INPUT_CONTENTS = 7  # ModelInferRequest.raw_input_contents (protos/attnserve/triton/grpc_service.proto)
# Below this size protobuf parses the whole message: copying a few KB of raw inputs twice costs
# less than walking the fields in Python (~3 us), and a request whose tensors are in shared
# memory is a few hundred bytes.
LIFT_MIN_BYTES = 32 << 10


@dataclass(frozen=True)
class LiftedInfer:
    """The request without its ``raw_input_contents``, and those, in order."""

    message: gs.ModelInferRequest
    raw: list[memoryview] = field(default_factory=list)  # views of the received bytes


def parse_model_infer(data: bytes) -> LiftedInfer:
    """Received ``ModelInferRequest`` bytes -> the message, its raw inputs not copied.

    Raises protobuf's DecodeError for bytes that are not a ModelInferRequest."""
    if len(data) < LIFT_MIN_BYTES:
        return LiftedInfer(gs.ModelInferRequest.FromString(data))
    try:
        stripped, raw = lift_repeated_bytes(memoryview(data), RAW_INPUT_CONTENTS)
    except Unexpected:
        return LiftedInfer(gs.ModelInferRequest.FromString(data))
    return LiftedInfer(gs.ModelInferRequest.FromString(stripped), raw)
