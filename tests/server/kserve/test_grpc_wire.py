"""grpc_wire.parse_model_infer: protobuf's ModelInferRequest, its raw inputs read in place."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from attnserve.protos.attnserve.triton import grpc_service_pb2 as gs
from attnserve.server.doors.kserve.grpc_wire import LIFT_MIN_BYTES, parse_model_infer


def test_raw_inputs_are_views_of_the_received_bytes_in_order():
    big = b"a" * LIFT_MIN_BYTES
    request = gs.ModelInferRequest(model_name="vit", id="7", raw_input_contents=[big, b"", b"xyz"])
    request.inputs.add(name="PIXELS", datatype="FP32", shape=[1, 3, 224, 224])
    data = request.SerializeToString()
    lifted = parse_model_infer(data)
    assert [bytes(r) for r in lifted.raw] == [big, b"", b"xyz"]
    assert all(r.obj is data for r in lifted.raw)  # no copy: windows on the gRPC message
    assert not lifted.message.raw_input_contents
    assert lifted.message.inputs[0].name == "PIXELS" and lifted.message.id == "7"


@pytest.mark.parametrize("size", [64, LIFT_MIN_BYTES])
def test_truncated_bytes_fail_as_protobuf_fails(size):
    data = gs.ModelInferRequest(model_name="vit", raw_input_contents=[b"z" * size]).SerializeToString()
    with pytest.raises(DecodeError):
        parse_model_infer(data[:-3])


def test_a_small_message_is_protobuf_s_own_parse():
    """Below LIFT_MIN_BYTES (a request whose tensors are in shared memory): protobuf's message."""
    request = gs.ModelInferRequest(model_name="vit", id="9", raw_input_contents=[b"q" * 100])
    request.inputs.add(name="PIXELS", datatype="FP32", shape=[1, 5, 5])
    lifted = parse_model_infer(request.SerializeToString())
    assert lifted.message == request and lifted.raw == []


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=12), st.lists(st.binary(max_size=200), max_size=4), st.binary(max_size=12), st.booleans())
def test_any_request_parses_as_protobuf_parses_it(model, raws, tail, big):
    """With arbitrary bytes appended (unknown fields, garbage): protobuf's message, or its failure;
    ``big``: a first raw input of LIFT_MIN_BYTES takes the message through the walk."""
    raws = [b"b" * LIFT_MIN_BYTES, *raws] if big else raws
    data = gs.ModelInferRequest(model_name=model, raw_input_contents=raws).SerializeToString() + tail
    try:
        expected = gs.ModelInferRequest.FromString(data)
    except DecodeError:
        with pytest.raises(DecodeError):
            parse_model_infer(data)
        return
    lifted = parse_model_infer(data)
    message = gs.ModelInferRequest()
    message.CopyFrom(lifted.message)
    message.raw_input_contents.extend(bytes(r) for r in lifted.raw)
    assert message == expected
