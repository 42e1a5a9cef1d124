"""The committed stubs are exactly what the generator writes from the .proto files."""

from __future__ import annotations

from pathlib import Path

from attnserve.protos import generate


def test_committed_stubs_are_fresh(tmp_path):
    written = generate.generate(out=tmp_path)
    assert written, "the generator wrote nothing"
    fresh = {str(p.relative_to(tmp_path)): p.read_text() for p in written}
    committed = {
        str(p.relative_to(generate.PROTO_ROOT)): p.read_text()
        for package in generate.PACKAGE_DIRS
        for p in (generate.PROTO_ROOT / package).glob("*_pb2*.py*")
    }
    assert sorted(fresh) == sorted(committed)
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale stubs {stale}: run `python -m attnserve.protos.generate` and commit the result"


def test_stubs_import_relatively_inside_the_package():
    grpc_stub = (generate.PROTO_ROOT / generate.PACKAGE_DIR / "inference_pb2_grpc.py").read_text()
    assert "from . import inference_pb2" in grpc_stub and "from attnserve.v1" not in grpc_stub
    from attnserve.protos.attnserve.v1 import inference_pb2

    assert inference_pb2.DESCRIPTOR.package == "attnserve.v1"
    assert Path(inference_pb2.__file__).parent == generate.PROTO_ROOT / generate.PACKAGE_DIR
    triton_stub = (generate.PROTO_ROOT / "attnserve" / "triton" / "grpc_service_pb2.py").read_text()
    assert "from . import model_config_pb2" in triton_stub and "from attnserve.triton" not in triton_stub


def test_triton_messages_coexist_with_tritonclients_in_one_process():
    """Our copy of Triton's protos lives in its own proto package: importing tritonclient's
    stubs next to the server's must not collide in protobuf's descriptor pool."""
    import pytest

    tc_service = pytest.importorskip("tritonclient.grpc.service_pb2")
    from attnserve.protos.attnserve.triton import grpc_service_pb2 as ours

    request = tc_service.ModelInferRequest(model_name="m", id="7")
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(b"\x02\x00\x00\x00hi")
    copy = ours.ModelInferRequest.FromString(request.SerializeToString())  # the same wire format
    assert (copy.model_name, copy.id, copy.inputs[0].name, list(copy.inputs[0].shape)) == ("m", "7", "TEXT", [1])
    assert copy.raw_input_contents[0] == b"\x02\x00\x00\x00hi"
