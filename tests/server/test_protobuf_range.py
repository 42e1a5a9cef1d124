"""The committed stubs work at both ends of the runtime range ``protobuf>=6.31.1,<7``, and
``pip install attnserve 'tritonclient[grpc]'`` resolves into one environment.

Each end gets a throwaway venv holding only protobuf (6.31.1, and the newest 6.x) and the
grpcio of this environment; it imports every stub of ``protos/`` and makes a round trip
over a real channel (attnserve.v1 and Triton's messages). Skipped, with pip's words, only
when the package index cannot be reached.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from attnserve.protos import generate

ROOT = Path(__file__).resolve().parents[2]
ROUND_TRIP = textwrap.dedent(
    """
    from concurrent import futures
    import grpc
    from google.protobuf import json_format
    import google.protobuf
    from attnserve.protos.attnserve.v1 import admin_pb2, inference_pb2 as pb, inference_pb2_grpc as pb_grpc
    from attnserve.protos.attnserve.triton import grpc_service_pb2 as gs, grpc_service_pb2_grpc as gs_grpc
    from attnserve.protos.attnserve.triton import model_config_pb2 as mc

    class V1(pb_grpc.InferenceServiceServicer):
        def GetModel(self, request, context):
            return pb.ModelInfo(name=request.name, ready=True, limits=pb.ModelLimits(max_image_bytes=2**40))

    class Triton(gs_grpc.GRPCInferenceServiceServicer):
        def ModelInfer(self, request, context):
            reply = gs.ModelInferResponse(model_name=request.model_name, id=request.id)
            reply.outputs.add(name="TRANSLATION", datatype="BYTES", shape=[1])
            reply.raw_output_contents.append(request.raw_input_contents[0][::-1])
            reply.parameters["triton_final_response"].bool_param = True
            return reply

    server = grpc.server(futures.ThreadPoolExecutor(2))
    pb_grpc.add_InferenceServiceServicer_to_server(V1(), server)
    gs_grpc.add_GRPCInferenceServiceServicer_to_server(Triton(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        info = pb_grpc.InferenceServiceStub(channel).GetModel(pb.GetModelRequest(name="mt"), timeout=30)
        request = gs.ModelInferRequest(model_name="mt", id="7", raw_input_contents=[b"abc"])
        reply = gs_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
    server.stop(None)
    assert (info.name, info.ready, info.limits.max_image_bytes) == ("mt", True, 2**40)
    assert (reply.id, reply.raw_output_contents[0], reply.parameters["triton_final_response"].bool_param) == (
        "7", b"cba", True)
    config = mc.ModelConfig(name="mt", input=[mc.ModelInput(name="TEXT", data_type=mc.TYPE_STRING, dims=[-1])])
    as_json = json_format.MessageToDict(
        config, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    assert as_json["input"][0]["dims"] == ["-1"] and admin_pb2.ReloadRequest(models=["mt"]).models == ["mt"]
    print(google.protobuf.__version__)
    """
)


def _pip(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=timeout)


def _index_or_skip(requirement: str, tmp_path: Path) -> None:
    probe = _pip("download", "--no-deps", "-q", "-d", str(tmp_path / "probe"), requirement)
    if probe.returncode != 0:
        pytest.skip(f"package index unreachable ({requirement}): {probe.stderr.strip()[-300:]}")


@pytest.mark.parametrize("protobuf", ["protobuf==6.31.1", "protobuf>=6.31.1,<7"], ids=["6.31.1", "newest-6"])
def test_stubs_import_and_round_trip_at_both_ends_of_the_range(protobuf, tmp_path):
    _index_or_skip(protobuf, tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    grpcio = f"grpcio=={metadata.version('grpcio')}"
    done = _pip("--python", str(python), "install", "-q", protobuf, grpcio)
    assert done.returncode == 0, done.stderr
    # the stubs alone, as the namespace package attnserve.protos (nothing else of ours)
    (tmp_path / "ns" / "attnserve").mkdir(parents=True)
    (tmp_path / "ns" / "attnserve" / "protos").symlink_to(generate.PROTO_ROOT, target_is_directory=True)
    env = {"PYTHONPATH": str(tmp_path / "ns"), "PATH": "/usr/bin:/bin"}
    run = subprocess.run([str(python), "-c", ROUND_TRIP], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    version = run.stdout.strip()
    assert version == "6.31.1" if protobuf.startswith("protobuf==") else version.startswith("6.")


def test_attnserve_and_tritonclient_grpc_resolve_into_one_environment(tmp_path):
    _index_or_skip("tritonclient", tmp_path)
    report = tmp_path / "report.json"
    args = ["install", "--dry-run", "--ignore-installed", "-q", "--report", str(report), str(ROOT)]
    done = _pip(*args, "tritonclient[grpc]", timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    chosen = {i["metadata"]["name"]: i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
    assert "attnserve" in chosen and "tritonclient" in chosen
    major, minor, *_ = (int(x) for x in chosen["protobuf"].split("."))
    assert (6, 31) <= (major, minor) < (7, 0), chosen["protobuf"]  # tritonclient caps protobuf below 7
