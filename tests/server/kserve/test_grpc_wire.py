"""grpc_wire.parse_model_infer: protobuf's ModelInferRequest, its raw inputs read in place."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from attnserve.protos.attnserve.triton import grpc_service_pb2 as gs
from attnserve.server.doors.kserve.grpc_wire import parse_model_infer


def test_raw_inputs_are_views_of_the_received_bytes_in_order():
    request = gs.ModelInferRequest(model_name="vit", id="7", raw_input_contents=[b"a" * 1000, b"", b"xyz"])
    request.inputs.add(name="PIXELS", datatype="FP32", shape=[1, 3, 224, 224])
    data = request.SerializeToString()
    lifted = parse_model_infer(data)
    assert [bytes(r) for r in lifted.raw] == [b"a" * 1000, b"", b"xyz"]
    assert all(r.obj is data for r in lifted.raw)  # no copy: windows on the gRPC message
    assert not lifted.message.raw_input_contents
    assert lifted.message.inputs[0].name == "PIXELS" and lifted.message.id == "7"


def test_truncated_bytes_fail_as_protobuf_fails():
    data = gs.ModelInferRequest(model_name="vit", raw_input_contents=[b"z" * 64]).SerializeToString()
    with pytest.raises(DecodeError):
        parse_model_infer(data[:-3])


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=12), st.lists(st.binary(max_size=200), max_size=4), st.binary(max_size=12))
def test_any_request_parses_as_protobuf_parses_it(model, raws, tail):
    """With arbitrary bytes appended (unknown fields, garbage): protobuf's message, or its failure."""
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
