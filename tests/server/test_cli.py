"""The two CLIs against a live server process: ``attnserve-server`` (start-up errors,
SIGTERM drain) and ``attnserve-client`` (translate, classify, models, health, --json)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from attnserve.client import AttnServeError, Client
from attnserve.client.cli import main as client_main
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
from attnserve.server.app import create_server

from .conftest import digit_png, settings_for

BIN = Path(sys.executable).parent


class ServerProcess:
    """``attnserve-server`` as a child process; its port is read from its log."""

    def __init__(self, repo: Path, *args: str) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "ATTNSERVE_THREADS": "1", "ATTNSERVE_PROVIDER": "cpu"}
        cmd = [str(BIN / "attnserve-server"), "--model-repo", str(repo), "--port", "0", "--http-port", "0", *args]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
        self.log: list[str] = []
        self.metrics_port: int | None = None
        self.http_port: int | None = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("server exited during start-up:\n" + "".join(self.log))
            self.log.append(line)
            if m := re.search(r"metrics on http://[\d.]+:(\d+)/", line):
                self.metrics_port = int(m.group(1))
            if m := re.search(r"HTTP \(KServe v2 REST[^)]*\) on https?://[\d.]+:(\d+)", line):
                self.http_port = int(m.group(1))
            if m := re.search(r"serving \d+ model\(s\) on [\d.]+:(\d+)", line):
                self.port = int(m.group(1))
                break
        else:
            raise RuntimeError("server did not start in 60 s:\n" + "".join(self.log))
        self.address = f"127.0.0.1:{self.port}"
        self._reader = threading.Thread(target=self._drain_log, daemon=True)
        self._reader.start()

    def _drain_log(self) -> None:
        for line in self.proc.stderr:
            self.log.append(line)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)


@pytest.fixture(scope="module")
def server_process(repo):
    server = ServerProcess(repo, "--metrics-port", "-1")
    yield server
    server.stop()


def test_server_logs_one_line_per_model(server_process):
    loaded = [line for line in server_process.log if "loaded model" in line]
    assert len(loaded) == 2
    assert all("provider=cpu" in line and "warm-up" in line and "model.onnx" in line for line in loaded)


def test_client_cli_models_health_and_classify(server_process, tmp_path, capsys):
    address = ["--address", server_process.address]
    assert client_main([*address, "models"]) == 0
    out = capsys.readouterr().out
    assert "digits  (image-classification, cpu, fp32, attention fused)  ready" in out
    assert client_main([*address, "health"]) == 0 and capsys.readouterr().out.strip() == "SERVING"
    assert client_main([*address, "--json", "health", "colors"]) == 0
    assert json.loads(capsys.readouterr().out) == {"service": "colors", "status": "SERVING"}
    png = tmp_path / "digit.png"
    png.write_bytes(digit_png(7))
    assert client_main([*address, "classify", str(png), "--model", "digits", "--top-k", "2"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"{png}: ") and line.count(",") == 1
    assert client_main([*address, "--json", "classify", str(png), "--model", "digits"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    with Client(server_process.address) as client:
        direct = client.classify([png], "digits", top_k=3)[0]
    assert [lab["label"] for lab in result["labels"]] == [lab.label for lab in direct.labels]


def test_client_cli_errors_exit_1_with_the_status(server_process, capsys):
    address = ["--address", server_process.address]
    assert client_main([*address, "translate", "Monday, March 3, 2025", "--model", "nope"]) == 1
    assert "NOT_FOUND" in capsys.readouterr().err
    assert client_main([*address, "--json", "health", "nope"]) == 1
    assert json.loads(capsys.readouterr().out)["status"] == "SERVICE_UNKNOWN"


def test_client_entry_point(server_process):
    proc = subprocess.run(
        [str(BIN / "attnserve-client"), "--address", server_process.address, "--json", "models"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert {m["name"] for m in json.loads(proc.stdout)} == {"digits", "colors"}


def test_client_retries_until_the_server_is_up(loop_thread, repo):
    """A client started before its server: UNAVAILABLE is retried with backoff until it answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = []

    def start_later():
        time.sleep(0.5)
        app, _ = loop_thread.run(create_server(f"127.0.0.1:{port}", settings_for(repo)))
        loop_thread.run(app.start())
        started.append(app)

    threading.Thread(target=start_later, daemon=True).start()
    try:
        with Client(f"127.0.0.1:{port}", retries=8, backoff_s=0.1, timeout=20) as client:
            assert client.health() == "SERVING"
        with Client(f"127.0.0.1:{port + 1 if port < 65535 else 1}", retries=1, backoff_s=0.05) as client:
            with pytest.raises(AttnServeError) as err:
                client.health()
            assert err.value.code == grpc.StatusCode.UNAVAILABLE
    finally:
        for app in started:
            loop_thread.run(app.stop(1))


def test_server_start_up_errors(tmp_path):
    proc = subprocess.run(
        [str(BIN / "attnserve-server"), "--model-repo", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "does not exist" in proc.stderr and "attnserve.export.zoo" in proc.stderr
    proc = subprocess.run(
        [str(BIN / "attnserve-server"), "--max-batch-size", "0"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "max_batch_size" in proc.stderr


def test_sigterm_lets_in_flight_requests_finish_refuses_new_ones_and_exits_0(repo):
    server = ServerProcess(
        repo, "--metrics-port", "-1", "--max-queue-delay-ms", "2500", "--max-batch-size", "64", "--grace-seconds", "20"
    )
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.InferenceServiceStub(channel)
            request = pb.ClassifyRequest(model="digits", images=[pb.ImageInput(encoded=digit_png(3))])
            stub.Classify(request, timeout=10)  # connected and warm
            started = time.monotonic()
            in_flight = [stub.Classify.future(request, timeout=30) for _ in range(3)]
            time.sleep(0.3)  # they wait in the batcher (2.5 s delay)
            server.proc.send_signal(signal.SIGTERM)
            with Client(server.address, retries=0, timeout=5) as client:
                deadline = time.monotonic() + 5
                while client.health() != "NOT_SERVING" and time.monotonic() < deadline:
                    time.sleep(0.02)
                assert client.health("digits") == "NOT_SERVING"
            with pytest.raises(grpc.RpcError) as err:
                stub.Classify(request, timeout=10)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value.details()
            assert all(len(f.result().results) == 1 for f in in_flight)
            assert time.monotonic() - started < 20
        assert server.proc.wait(30) == 0
    finally:
        server.stop()
    assert any("shutting down" in line for line in server.log)
