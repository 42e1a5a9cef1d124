"""``attnserve-server --workers N``: N processes share the gRPC and HTTP ports (SO_REUSEPORT),
the parent serves every worker's metrics with a ``worker`` label, forwards SIGHUP (reload in
every worker) and SIGTERM (every worker drains; exit 0), and stops the set when one dies."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

from .conftest import MAX_TARGET, digit_png

BIN = Path(sys.executable).parent
TIMEOUT = 60.0
CONNECTIONS = 16  # P(all on one of 2 workers) = 2 * 0.5**16


class Workers:
    """``attnserve-server --workers 2`` as a child process; ports and worker pids read from its log."""

    def __init__(self, repo: Path, *args: str) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "ATTNSERVE_THREADS": "1", "ATTNSERVE_PROVIDER": "cpu"}
        cmd = [str(BIN / "attnserve-server"), "--model-repo", str(repo), "--workers", "2", "--port", "0"]
        cmd += ["--http-port", "0", "--metrics-port", "0", "--grace-seconds", "20", *args]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
        self.log: list[str] = []
        self.pids: dict[int, int] = {}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("server exited during start-up:\n" + "".join(self.log))
            self.log.append(line)
            if m := re.search(r"worker (\d+) \(pid (\d+)\) ready", line):
                self.pids[int(m.group(1))] = int(m.group(2))
            if m := re.search(r"metrics on http://[\d.]+:(\d+)/", line):
                self.metrics_port = int(m.group(1))
            if m := re.search(r"serving with 2 workers on .*, HTTP port (\d+)", line):
                self.http_port = int(m.group(1))
            if m := re.search(r"serving with 2 workers on [\d.]+:(\d+)", line):
                self.address = f"127.0.0.1:{m.group(1)}"
                break
        else:
            raise RuntimeError("server did not start in 120 s:\n" + "".join(self.log))
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()

    def channels(self, n: int = CONNECTIONS) -> list[grpc.Channel]:
        """``n`` channels with a connection each (grpc would otherwise share one per target)."""
        return [grpc.insecure_channel(self.address, options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(n)]

    def requests_by_worker(self, method: str, model: str) -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "attnserve_requests_total" and s.labels["method"] == method and s.labels["model"] == model:
                    out[s.labels["worker"]] = out.get(s.labels["worker"], 0.0) + s.value
        return out

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


def _classify(channel: grpc.Channel, model: str, image: bytes) -> pb.ClassifyResponse:
    stub = pb_grpc.InferenceServiceStub(channel)
    return stub.Classify(pb.ClassifyRequest(model=model, images=[pb.ImageInput(encoded=image)]), timeout=TIMEOUT)


def test_two_workers_serve_one_port_reload_on_sighup_and_drain_on_sigterm(mt, long_source, vit_dirs, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(mt.model_dir, repo / "mt")
    shutil.copytree(vit_dirs["digits"], repo / "digits")
    server = Workers(repo)
    try:
        assert len(set(server.pids.values())) == 2
        # every connection lands on one of the two workers; both serve, and the metrics say which
        channels = server.channels()
        for channel in channels:
            assert _classify(channel, "digits", digit_png(3)).results[0].labels
        served = server.requests_by_worker("Classify", "digits")
        assert set(served) == {"0", "1"} and sum(served.values()) == CONNECTIONS, served
        for _ in range(4):  # the HTTP port is shared as well
            with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/v2/health/ready", timeout=10) as r:
                assert r.status == 200

        # SIGHUP to the parent: every worker loads the new model directory
        shutil.copytree(vit_dirs["colors"], repo / "colors")
        server.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + TIMEOUT
        while sum(line.count("colors added") for line in server.log) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        for channel in server.channels():
            assert _classify(channel, "colors", digit_png(1, mode="RGB")).results[0].labels
        assert set(server.requests_by_worker("Classify", "colors")) == {"0", "1"}

        # SIGTERM to the parent: streams accepted on either worker finish whole, then exit 0
        expected = mt.greedy(long_source, MAX_TARGET).tokens
        request = pb.TranslateRequest(
            model="mt",
            texts=[long_source],
            options=pb.DecodingOptions(max_new_tokens=MAX_TARGET, return_token_ids=True),
        )
        streams = []
        for channel in channels:
            call = pb_grpc.InferenceServiceStub(channel).TranslateStream(request, timeout=TIMEOUT)
            streams.append((call, list(next(call).token_ids)))  # accepted and decoding
        server.proc.send_signal(signal.SIGTERM)
        finished = [first + [t for chunk in call for t in chunk.token_ids] for call, first in streams]
        assert server.proc.wait(120) == 0, "".join(server.log)
    finally:
        server.stop()
    assert all(tokens == expected for tokens in finished), "a stream accepted before SIGTERM was cut short"
    assert sum("attnserve.server.entry.app: stopped" in line for line in server.log) == 2
    for pid in server.pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_worker_that_dies_stops_the_set_with_exit_1(vit_dirs, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(vit_dirs["digits"], repo / "digits")
    server = Workers(repo, "--metrics-port", "-1")
    try:
        os.kill(server.pids[1], signal.SIGKILL)
        assert server.proc.wait(60) == 1
    finally:
        server.stop()
    time.sleep(0.5)  # the log reader thread catches up
    assert any("worker-1" in line and "exited with code -9" in line for line in server.log), "".join(server.log)
    with pytest.raises(ProcessLookupError):
        os.kill(server.pids[0], 0)


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie left to a container's init counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_workers_of_a_killed_parent_exit_and_free_the_ports(vit_dirs, tmp_path):
    """SIGKILL to the parent (the OOM killer, a hard stop): no worker is left serving the ports
    or claiming jobs, and a new server can bind them."""
    repo = tmp_path / "repo"
    shutil.copytree(vit_dirs["digits"], repo / "digits")
    server = Workers(repo, "--metrics-port", "-1")
    try:
        server.proc.kill()
        server.proc.wait(10)
        deadline = time.monotonic() + 20
        while any(_running(pid) for pid in server.pids.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [pid for pid in server.pids.values() if _running(pid)]
    finally:
        for pid in server.pids.values():
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
    assert not left, "workers outlived their parent:\n" + "".join(server.log)
    for port in (int(server.address.rsplit(":", 1)[1]), server.http_port):
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen()


def test_a_bad_repository_fails_start_up_with_exit_1(tmp_path):
    env = {**os.environ, "ATTNSERVE_PROVIDER": "cpu"}
    cmd = [str(BIN / "attnserve-server"), "--model-repo", str(tmp_path / "missing"), "--workers", "2", "--port", "0"]
    done = subprocess.run([*cmd, "--metrics-port", "-1", "--http-port", "-1"], capture_output=True, text=True, env=env)
    assert done.returncode == 1
    assert "attnserve-server: error:" in done.stderr and "missing" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_port_held_by_another_program_fails_before_loading(tmp_path):
    with socket.socket() as held:  # a listener without SO_REUSEPORT: the workers cannot share its port
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        cmd = [str(BIN / "attnserve-server"), "--model-repo", str(tmp_path / "missing"), "--workers", "2"]
        cmd += ["--port", str(port), "--metrics-port", "-1", "--http-port", "-1"]
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "ATTNSERVE_PROVIDER": "cpu"})
    assert done.returncode == 1
    assert f"cannot bind 127.0.0.1:{port}" in done.stderr and "Traceback" not in done.stderr


def test_sighup_while_workers_load_reloads_them_once_ready(vit_dirs, tmp_path):
    """A reload asked for during start-up neither kills a worker (SIGHUP's default action) nor is lost."""
    repo = tmp_path / "repo"
    shutil.copytree(vit_dirs["digits"], repo / "digits")
    env = {**os.environ, "ATTNSERVE_THREADS": "1", "ATTNSERVE_PROVIDER": "cpu"}
    cmd = [str(BIN / "attnserve-server"), "--model-repo", str(repo), "--workers", "2", "--port", "0"]
    cmd += ["--metrics-port", "-1", "--http-port", "-1"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    log: list[str] = []
    try:
        sent = False
        for line in proc.stderr:
            log.append(line)
            if not sent and "worker-" in line:  # the first line of a worker: it is starting
                proc.send_signal(signal.SIGHUP)
                sent = True
            if "serving with 2 workers" in line:
                break
        threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True).start()
        deadline = time.monotonic() + TIMEOUT
        while sum("reloading the model repository" in line for line in log) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None, "".join(log)
        assert sum("reloading the model repository" in line for line in log) == 2, "".join(log)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, "".join(log)


def test_a_port_a_stopped_server_just_served_on_is_reserved_again():
    # a rolling restart: the last server's connections linger in TIME_WAIT on its port for a
    # minute, and a --workers N set started then binds it as a single server does
    from attnserve.server.entry.workers import reserve_port

    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers listen
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            served, _ = listener.accept()
            served.close()  # the server ends the connection first: its side waits in TIME_WAIT
            client.recv(1)
    sock, got = reserve_port("127.0.0.1", port)
    sock.close()
    assert got == port


def test_workers_count_a_clients_request_rate_together(vit_dirs, tmp_path):
    """--requests-per-minute 3 with two workers: a client whose connections the kernel spreads over
    both gets 3 requests a minute in all, not 3 from each; both workers refuse the rest."""
    repo = tmp_path / "repo"
    shutil.copytree(vit_dirs["digits"], repo / "digits")
    server = Workers(repo, "--requests-per-minute", "3")
    try:
        assert not [name for name in os.listdir("/dev/shm") if name.startswith("attnserve-rates-")]
        image, admitted, refused = digit_png(3), 0, 0
        for channel in server.channels() * 2:  # each connection twice
            try:
                _classify(channel, "digits", image)
                admitted += 1
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc.details()
                refused += 1
        assert (admitted, refused) == (3, 2 * CONNECTIONS - 3)
        with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        by_worker: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "attnserve_rate_limited_total":
                    by_worker[s.labels["worker"]] = by_worker.get(s.labels["worker"], 0.0) + s.value
        assert sorted(by_worker) == ["0", "1"] and sum(by_worker.values()) == 2 * CONNECTIONS - 3
    finally:
        assert server.stop() == 0
