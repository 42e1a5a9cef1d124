"""The committed stubs are exactly what the generator writes from the .proto files."""

from __future__ import annotations

from pathlib import Path

from attnserve.protos import generate


def test_committed_stubs_are_fresh(tmp_path):
    written = generate.generate(out=tmp_path)
    assert written, "the generator wrote nothing"
    committed_dir = generate.PROTO_ROOT / generate.PACKAGE_DIR
    fresh = {p.name: p.read_text() for p in written}
    committed = {p.name: p.read_text() for p in committed_dir.glob("*_pb2*.py*")}
    assert sorted(fresh) == sorted(committed)
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale stubs {stale}: run `python -m attnserve.protos.generate` and commit the result"


def test_stubs_import_relatively_inside_the_package():
    grpc_stub = (generate.PROTO_ROOT / generate.PACKAGE_DIR / "inference_pb2_grpc.py").read_text()
    assert "from . import inference_pb2" in grpc_stub and "from attnserve.v1" not in grpc_stub
    from attnserve.protos.attnserve.v1 import inference_pb2

    assert inference_pb2.DESCRIPTOR.package == "attnserve.v1"
    assert Path(inference_pb2.__file__).parent == generate.PROTO_ROOT / generate.PACKAGE_DIR
