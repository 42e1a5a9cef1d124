"""v1_wire.parse_classify: the same request as protobuf's parse, its image tensors read in place."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.server.doors.v1_wire import LiftedClassify, parse_classify


def reassembled(lifted: LiftedClassify) -> pb.ClassifyRequest:
    message = pb.ClassifyRequest()
    message.CopyFrom(lifted.message)
    for i, raw in lifted.raw.items():
        message.images[i].tensor.raw_contents = bytes(raw)
    return message


def tensor_image(values: np.ndarray) -> pb.ImageInput:
    tensor = pb.Tensor(shape=list(values.shape), datatype=pb.DATA_TYPE_FP32, raw_contents=values.tobytes())
    return pb.ImageInput(tensor=tensor)


def test_tensors_are_views_of_the_received_bytes():
    pixels = np.random.default_rng(0).standard_normal((2, 3, 8, 8), dtype=np.float32)
    request = pb.ClassifyRequest(
        model="vit", top_k=2, images=[tensor_image(pixels[0]), pb.ImageInput(encoded=b"PNG"), tensor_image(pixels[1])]
    )
    data = request.SerializeToString()
    lifted = parse_classify(data)
    assert sorted(lifted.raw) == [0, 2]  # the encoded image stays in the message
    assert lifted.message.images[1].encoded == b"PNG"
    assert all(not image.tensor.raw_contents for image in lifted.message.images)
    for i, k in ((0, 0), (2, 1)):
        assert lifted.raw[i].obj is data  # no copy: a window on the gRPC message
        np.testing.assert_array_equal(np.frombuffer(lifted.raw[i], "<f4").reshape(3, 8, 8), pixels[k])
    assert reassembled(lifted) == request


def test_a_tensor_sent_twice_in_one_image_is_merged_as_protobuf_merges_it():
    one = pb.ImageInput(tensor=pb.Tensor(shape=[1], raw_contents=b"abcd"))
    two = pb.ImageInput(tensor=pb.Tensor(datatype=pb.DATA_TYPE_FP32, raw_contents=b"wxyz"))
    image = one.SerializeToString() + two.SerializeToString()  # one ImageInput, its tensor field twice
    data = b"\x12" + bytes([len(image)]) + image  # ClassifyRequest.images (field 2, length-delimited)
    lifted = parse_classify(data)
    assert lifted.raw == {}  # left to protobuf
    assert lifted.message.images[0].tensor == pb.Tensor(shape=[1], datatype=pb.DATA_TYPE_FP32, raw_contents=b"wxyz")


@pytest.mark.parametrize("cut", [1, 5, 40])
def test_truncated_bytes_fail_as_protobuf_fails(cut):
    data = pb.ClassifyRequest(model="vit", images=[tensor_image(np.ones((3, 4, 4), np.float32))]).SerializeToString()
    with pytest.raises(DecodeError):
        parse_classify(data[:-cut])


images = st.one_of(
    st.builds(lambda b: pb.ImageInput(encoded=b), st.binary(max_size=40)),
    st.builds(
        lambda shape, dtype, raw: pb.ImageInput(tensor=pb.Tensor(shape=shape, datatype=dtype, raw_contents=raw)),
        st.lists(st.integers(-(2**40), 2**40), max_size=4),
        st.integers(0, 3),
        st.binary(max_size=300),
    ),
    st.just(pb.ImageInput()),
)


@settings(max_examples=200, deadline=None)
@given(
    st.text(max_size=20),
    st.lists(images, max_size=4),
    st.integers(0, 2**32 - 1),
    st.binary(max_size=12),
)
def test_any_request_parses_as_protobuf_parses_it(model, items, top_k, tail):
    """Messages of every shape, with arbitrary bytes appended (unknown fields, garbage): the
    lifted parse gives protobuf's message, or fails where protobuf fails."""
    data = pb.ClassifyRequest(model=model, images=items, top_k=top_k).SerializeToString() + tail
    try:
        expected = pb.ClassifyRequest.FromString(data)
    except DecodeError:
        with pytest.raises(DecodeError):
            parse_classify(data)
        return
    assert reassembled(parse_classify(data)) == expected
