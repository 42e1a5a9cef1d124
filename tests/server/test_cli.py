"""The two CLIs against a live server process: ``attnserve-server`` (start-up errors,
SIGTERM drain) and ``attnserve-client`` (translate, classify, models, health, --json)."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor

from attnserve.client import AttnServeError, Client, Hypothesis, Translation, classify_cli, decoding_options
from attnserve.client import cli as client_cli
from attnserve.client.cli import main as client_main
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
from attnserve.server.entry.app import create_server
from tests.support.server import BIN, ServerProcess

from .conftest import digit_png, settings_for

ROOT = Path(__file__).resolve().parents[2]


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


def test_client_cli_classifies_a_folder_of_more_images_than_a_request_takes(server_process, tmp_path, capsys):
    # 70 files (the server takes 64 a request) in batches, in order; a bad one is named by its file
    folder = tmp_path / "scans"
    folder.mkdir()
    paths = [folder / f"{n:02}.png" for n in range(70)]
    for n, path in enumerate(paths):
        path.write_bytes(digit_png(n % 10))
    address = ["--address", server_process.address]
    assert client_main([*address, "--json", "classify", *map(str, paths), "--model", "digits"]) == 0
    got = json.loads(capsys.readouterr().out)
    with Client(server_process.address) as client:
        direct = client.classify(paths[60:], "digits")
    assert [r["file"] for r in got] == list(map(str, paths))
    assert [r["labels"][0]["label"] for r in got[60:]] == [r.labels[0].label for r in direct]
    paths[41].write_bytes(b"not a png")
    assert client_main([*address, "classify", *map(str, paths), "--model", "digits"]) == 1
    assert f"INVALID_ARGUMENT: {paths[41]}: " in capsys.readouterr().err
    assert client_main([*address, "classify", str(paths[0]), str(folder), "--model", "digits"]) == 2
    assert f"{folder}: a folder, not an image" in capsys.readouterr().err


def test_client_cli_splits_files_over_a_requests_pixels_into_several_requests(
    serve, repo, tmp_path, capsys, monkeypatch
):
    # 5 scans of 28 x 28 = 784 pixels on a server that takes 2,000 a request: every file classified
    paths = [tmp_path / f"{n}.png" for n in range(5)]
    for n, path in enumerate(paths):
        path.write_bytes(digit_png(n))
    with serve(repo, max_request_pixels=2000) as server:
        address = ["--address", server.address]
        assert client_main([*address, "--json", "classify", *map(str, paths), "--model", "digits"]) == 0
        got = json.loads(capsys.readouterr().out)
        with server.client() as client:
            direct = [client.classify([path], "digits", top_k=3)[0] for path in paths]
        assert [r["file"] for r in got] == list(map(str, paths))
        assert [r["labels"][0]["label"] for r in got] == [r.labels[0].label for r in direct]
        # grouped by their headers before sending, within the pixels a request may hold: none refused
        monkeypatch.setattr(classify_cli, "CLASSIFY_PIXELS", 2000)
        ok = server.metric("attnserve_requests_total", model="digits", method="Classify", status="OK")
        refused = server.metric(
            "attnserve_requests_total", model="digits", method="Classify", status="INVALID_ARGUMENT"
        )
        assert client_main([*address, "classify", *map(str, paths), "--model", "digits"]) == 0
        assert len(capsys.readouterr().out.splitlines()) == 5
        assert server.metric("attnserve_requests_total", model="digits", method="Classify", status="OK") == ok + 3
        assert (
            server.metric("attnserve_requests_total", model="digits", method="Classify", status="INVALID_ARGUMENT")
            == refused
        )


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


@pytest.mark.parametrize("setting", ["state_dir", "download_dir"])
def test_a_state_or_download_folder_that_cannot_be_made_fails_start_up_naming_the_setting(repo, tmp_path, setting):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    flag = "--" + setting.replace("_", "-")
    http_port = "0" if setting == "download_dir" else "-1"  # the HTTP routes keep the downloads
    argv = [
        str(BIN / "attnserve-server"),
        "--model-repo",
        str(repo),
        "--port",
        "0",
        "--metrics-port",
        "-1",
        "--http-port",
        http_port,
    ]
    proc = subprocess.run([*argv, flag, str(blocker / "inside")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"attnserve-server: error: {setting}: ") and str(blocker / "inside") in last
    assert "Traceback" not in proc.stderr


def damaged_state(folder: Path, damage: str) -> Path:
    """A state folder whose ``state.sqlite3`` is another kind of file, or a real store cut short."""
    from attnserve.server.state import GlossaryStore, open_database

    folder.mkdir()
    path = folder / "state.sqlite3"
    if damage == "not a database":
        path.write_bytes(b"attnserve state, but not SQLite\n" * 4)
    else:
        db = open_database("", folder)
        GlossaryStore(db)
        db.run("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()
        path.write_bytes(path.read_bytes()[:3000])
    return path


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("damage", ["not a database", "truncated"])
def test_a_damaged_state_file_fails_start_up_with_one_line_naming_it(repo, tmp_path, damage, workers):
    path = damaged_state(tmp_path / "state", damage)
    cmd = [str(BIN / "attnserve-server"), "--model-repo", str(repo), "--port", "0", "--http-port", "-1"]
    cmd += ["--metrics-port", "-1", "--state-dir", str(path.parent), "--workers", workers]
    env = {**os.environ, "ATTNSERVE_THREADS": "1", "ATTNSERVE_PROVIDER": "cpu"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1
    (said,) = [line for line in proc.stderr.splitlines() if line.startswith("attnserve-server: error: ")]
    assert str(path) in said and "not a usable SQLite database" in said and "move it away" in said, said
    assert "Traceback" not in proc.stderr


def test_a_grpc_port_another_server_listens_on_fails_start_up_with_exit_1(repo):
    """gRPC sets SO_REUSEPORT by default: a second server on a busy port used to start and
    share it, the kernel splitting clients between two unrelated servers."""
    with socket.socket() as held:  # as another gRPC server holds its port: listening, with SO_REUSEPORT
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env = {**os.environ, "ATTNSERVE_THREADS": "1", "ATTNSERVE_PROVIDER": "cpu"}
        cmd = [str(BIN / "attnserve-server"), "--model-repo", str(repo), "--port", str(port)]
        cmd += ["--http-port", "-1", "--metrics-port", "-1"]
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
        try:
            log = []
            for line in proc.stderr:  # until it exits, or says it serves
                log.append(line)
                assert "serving" not in line, f"a second server started on port {port}:\n{''.join(log)}"
            assert proc.wait(30) == 1
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    message = f"cannot serve gRPC on 127.0.0.1:{port}: address already in use (see --host, --port)"
    assert log[-1] == f"attnserve-server: error: {message}\n"
    assert "Traceback" not in "".join(log)


@pytest.mark.parametrize("flag", ["--port", "--http-port", "--metrics-port"])
def test_a_port_in_use_fails_start_up_before_any_model_loads(repo, flag):
    """Every port is bound before the models load: a port held by another program costs a
    second, not a model repository's load, and ends with one line and exit 1, no traceback
    (grpc's Server.__del__ used to print one when start-up failed after gRPC started)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        ports = {"--port": "0", "--http-port": "0", "--metrics-port": "0", flag: str(port)}
        env = {**os.environ, "ATTNSERVE_THREADS": "1", "ATTNSERVE_PROVIDER": "cpu"}
        cmd = [str(BIN / "attnserve-server"), "--model-repo", str(repo), *(x for kv in ports.items() for x in kv)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 1
    what = {"--port": "gRPC", "--http-port": "HTTP", "--metrics-port": "metrics"}[flag]
    last = proc.stderr.splitlines()[-1]
    assert last.startswith(f"attnserve-server: error: cannot serve {what} on 127.0.0.1:{port}: ")
    assert "already in use" in last.lower() and last.endswith(f"(see {flag if flag != '--port' else '--host, --port'})")
    assert "loaded model" not in proc.stderr and "Traceback" not in proc.stderr


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


UNSIGNED_MAX = {FieldDescriptor.TYPE_UINT32: 2**32 - 1, FieldDescriptor.TYPE_UINT64: 2**64 - 1}


def _unsigned_options() -> list[tuple[str, str, int]]:
    """(subcommand, --option, largest value) for every client option sent as an unsigned proto field."""
    subparsers = next(a for a in client_cli.build_parser()._actions if a.dest == "command").choices
    found = []
    for command, message in (("translate", pb.DecodingOptions), ("classify", pb.ClassifyRequest)):
        flags = subparsers[command]._option_string_actions
        for field in message.DESCRIPTOR.fields:
            flag = "--" + field.name.replace("_", "-")
            if field.type in UNSIGNED_MAX and flag in flags:
                found.append((command, flag, UNSIGNED_MAX[field.type]))
    return found


def test_every_unsigned_option_is_found():
    assert {(c, f) for c, f, _ in _unsigned_options()} == {
        ("translate", "--beam-size"),
        ("translate", "--num-hypotheses"),
        ("translate", "--max-new-tokens"),
        ("translate", "--top-k"),
        ("translate", "--seed"),
        ("classify", "--top-k"),
    }


def test_client_cli_says_where_a_text_starting_with_a_dash_goes(capsys):
    """argparse takes "-5°C" for an unknown option and then misses the texts: the error says to
    put such a text after "--", which then works (no server needed to see the parse)."""
    with pytest.raises(SystemExit) as exit_info:
        client_main(["--address", "127.0.0.1:1", "--retries", "0", "translate", "-5°C"])
    assert exit_info.value.code == 2
    assert 'a text that starts with "-" goes after "--"' in capsys.readouterr().err
    from attnserve.client.cli import build_parser

    assert build_parser().parse_args(["translate", "--", "-5°C"]).texts == ["-5°C"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["--address", "http://127.0.0.1:50051", "models"],
            "not a URL: 'http://127.0.0.1:50051' (gRPC's address: '127.0.0.1:50051')",
        ),
        (["models", "--address", "grpc://server:50051/"], "gRPC's address: 'server:50051'"),
        (["--timeout", "0", "models"], "expected a number of seconds above 0, got '0'"),
        (["models", "--timeout", "-5"], "got '-5'"),
        (["--timeout", "nan", "translate", "hi"], "got 'nan'"),
    ],
)
def test_client_cli_a_url_address_or_a_timeout_of_no_time_is_a_usage_error(argv, said, capsys):
    """Typed as people do: an address copied from a browser, a timeout of 0 or below (each was
    a gRPC failure after a try: a DNS error, or DEADLINE_EXCEEDED at once)."""
    with pytest.raises(SystemExit) as exit_info:  # before any connection
        client_main(argv)
    assert exit_info.value.code == 2 and said in capsys.readouterr().err


@pytest.mark.parametrize(("command", "flag", "limit"), _unsigned_options(), ids=lambda v: str(v))
@pytest.mark.parametrize("outside", ["below", "above"])
def test_client_cli_out_of_range_option_is_a_usage_error(command, flag, limit, outside, tmp_path, capsys):
    """A negative (or too large) value for an unsigned field was protobuf's traceback
    ("ValueError: Value out of range: -1"); now argparse's usage error naming the option and its range."""
    value = -1 if outside == "below" else limit + 1
    png = tmp_path / "digit.png"
    png.write_bytes(digit_png(7))
    target = ["Monday, March 3, 2025"] if command == "translate" else [str(png)]
    with pytest.raises(SystemExit) as exit_info:  # before any connection: no server needed
        client_main(["--address", "127.0.0.1:1", "--retries", "0", command, *target, flag, str(value)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert (
        f"attnserve-client {command}: error: argument {flag}: expected an integer from 0 to {limit}, got '{value}'"
        in err
    )
    assert "Traceback" not in err


def test_client_entry_point_out_of_range_top_k():
    proc = subprocess.run(
        [str(BIN / "attnserve-client"), "classify", "examples/digits/digit-7.png", "--top-k", "-1"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "attnserve-client classify: error: argument --top-k: expected an integer from 0 to 4294967295, got '-1'"
    )


def test_client_api_names_the_out_of_range_parameter():
    """protobuf's "Value out of range: -3" named nothing; the client names the parameter."""
    with Client("127.0.0.1:1", retries=0, timeout=1) as client:  # rejected before any call
        with pytest.raises(ValueError, match=r"^beam_size must be an integer from 0 to 4294967295, got -3$"):
            client.translate("at 3:45 PM", beam_size=-3)
        with pytest.raises(ValueError, match=r"^top_k must be an integer from 0 to 4294967295, got -1$"):
            client.classify([digit_png(7)], top_k=-1)
        with pytest.raises(ValueError, match=r"^max_new_tokens must be an integer from 0 to 4294967295, got -1$"):
            list(client.translate_stream("at 3:45 PM", max_new_tokens=-1))
    with pytest.raises(ValueError, match=r"^seed must be an integer from 0 to 18446744073709551615, got -5$"):
        decoding_options(seed=-5, temperature=0.5)
    with pytest.raises(ValueError, match=r"^num_hypotheses must be .* got 4294967296$"):
        decoding_options(num_hypotheses=2**32)
    assert decoding_options(seed=2**64 - 1, top_k=2**32 - 1).seed == 2**64 - 1  # the ends of the range are fine


class _FakeClient:
    """Stands in for the server: answers translate with the given hypotheses."""

    def __init__(self, hypotheses: list[Hypothesis]) -> None:
        self.hypotheses = hypotheses

    def __call__(self, *args, **kwargs) -> _FakeClient:
        return self

    def __enter__(self) -> _FakeClient:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def translate(self, texts, model, **options) -> list[Translation]:
        return [Translation(self.hypotheses, 9, {}) for _ in texts]


@pytest.mark.parametrize(
    ("args", "hypotheses", "expected"),
    [
        (  # the report: nothing said the text stopped at the limit
            ["--max-new-tokens", "3", "--scores"],
            [Hypothesis("Montag, ", [], -0.25, -0.75, "length")],
            "Montag,   (score=-0.2500 logprob=-0.7500; cut at --max-new-tokens 3)",
        ),
        (
            ["--max-new-tokens", "3"],
            [Hypothesis("Montag, ", finish_reason="length")],
            "Montag,   (cut at --max-new-tokens 3)",
        ),
        ([], [Hypothesis("Montag, 3.", finish_reason="length")], "Montag, 3.  (cut at the model's max target length)"),
        (
            ["--scores"],
            [Hypothesis("Montag, 3. März 2025", [], -0.1, -0.9, "eos")],
            "Montag, 3. März 2025  (score=-0.1000 logprob=-0.9000)",
        ),
        ([], [Hypothesis("Montag, 3. März 2025", finish_reason="eos")], "Montag, 3. März 2025"),
        (
            ["--beam-size", "2", "--num-hypotheses", "2", "--max-new-tokens", "4", "--token-ids"],
            [
                Hypothesis("Montag, 3.", [5, 6, 7, 2], finish_reason="eos"),
                Hypothesis("Montag, der", [5, 6, 8, 9], finish_reason="length"),
            ],
            "[0] Montag, 3.  (ids=[5, 6, 7, 2])\n[1] Montag, der  (ids=[5, 6, 8, 9]; cut at --max-new-tokens 4)",
        ),
    ],
    ids=["scores", "length", "model-limit", "eos-scores", "eos", "hypotheses"],
)
def test_client_cli_says_when_a_translation_was_cut(args, hypotheses, expected, monkeypatch, capsys):
    monkeypatch.setattr(client_cli, "Client", _FakeClient(hypotheses))
    assert client_main(["translate", *args, "Monday, March 3, 2025"]) == 0
    assert capsys.readouterr().out == expected + "\n"
    assert client_main(["--json", "translate", *args, "Monday, March 3, 2025"]) == 0
    (result,) = json.loads(capsys.readouterr().out)  # --json: the finish reason as it always was
    assert [h["finish_reason"] for h in result["hypotheses"]] == [h.finish_reason for h in hypotheses]


def test_no_arguments_and_no_model_repo_folder_serves_the_bundled_models_and_ctrl_c_stops_it(tmp_path):
    """``attnserve-server`` with no --model-repo, where no ./model-repo exists (a fresh checkout,
    or after ``pip install 'attnserve[cpu]'``), serves the models that ship with the package and
    says so in its first log line; Ctrl-C (SIGINT) drains and exits 0, as the README says."""
    server = ServerProcess(None, "--metrics-port", "-1", cwd=tmp_path)
    try:
        assert "serving the bundled models from " in server.log[0], server.log[0]
        assert server.log[0].rstrip().endswith("(no --model-repo and no ./model-repo folder)")
        with Client(server.address, timeout=30) as client:
            assert sorted(m.name for m in client.list_models()) == ["digits-vit", "translator-en-de"]
            (result,) = client.translate(["Monday, March 3, 2025"])
        assert result.text == "Montag, 3. März 2025"
    finally:
        server.proc.send_signal(signal.SIGINT)
        assert server.proc.wait(30) == 0


class _RecordingClient:
    """Stands in for the server: records how the client was opened and what each call was sent."""

    def __init__(self) -> None:
        self.opened: dict = {}
        self.calls: list[tuple[str, tuple, dict]] = []

    def __call__(self, address, **kwargs) -> _RecordingClient:
        self.opened = {"address": address, **kwargs}
        return self

    def __enter__(self) -> _RecordingClient:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def translate(self, texts, model, **options) -> list[Translation]:
        self.calls.append(("translate", (texts, model), options))
        return [Translation([Hypothesis("Montag")], 9, {}) for _ in texts]

    def translate_file(self, path, target, source, model, **options):
        self.calls.append(("translate_file", (target, source, model), options))
        raise AttnServeError(grpc.StatusCode.UNAVAILABLE, "recorded")


@pytest.mark.parametrize(
    "languages",
    [["--to", "de", "--from", "en"], ["--target-language", "de", "--source-language", "en"]],
    ids=["short", "long"],
)
def test_client_cli_translate_takes_from_and_to_and_their_long_forms(languages, monkeypatch, capsys):
    """``translate --to de`` was refused as ambiguous (--to matched --top-k and --top-p)."""
    fake = _RecordingClient()
    monkeypatch.setattr(client_cli, "Client", fake)
    assert client_main(["translate", *languages, "Monday"]) == 0
    assert capsys.readouterr().out == "Montag\n"
    ((_, _, options),) = fake.calls
    assert (options["source_language"], options["target_language"]) == ("en", "de")


@pytest.mark.parametrize("to", ["--to", "--target-language"])
def test_client_cli_translate_file_takes_the_same_language_flags(to, monkeypatch, tmp_path, capsys):
    fake = _RecordingClient()
    monkeypatch.setattr(client_cli, "Client", fake)
    memo = tmp_path / "memo.txt"
    memo.write_text("Monday\n")
    assert client_main(["translate-file", str(memo), to, "de", "--quiet"]) == 1
    assert fake.calls[0][1] == ("de", "auto", "")
    assert client_main(["translate-file", str(memo), to, "de", "--source-language", "en", "--quiet"]) == 1
    assert fake.calls[1][1] == ("de", "en", "")


def test_client_cli_translate_file_says_a_folder_or_a_missing_path_is_no_file(monkeypatch, tmp_path, capsys):
    fake = _RecordingClient()
    monkeypatch.setattr(client_cli, "Client", fake)
    assert client_main(["translate-file", str(tmp_path), "--to", "de"]) == 2
    assert capsys.readouterr().err.strip() == f"attnserve-client: error: {tmp_path}: a folder, not a file"
    assert client_main(["translate-file", str(tmp_path / "gone.txt"), "--to", "de"]) == 2
    assert capsys.readouterr().err.strip() == f"attnserve-client: error: {tmp_path / 'gone.txt'}: no such file"
    assert fake.calls == []  # nothing sent


def test_client_cli_global_options_go_before_or_after_the_subcommand(monkeypatch, capsys):
    fake = _RecordingClient()
    monkeypatch.setattr(client_cli, "Client", fake)
    assert client_main(["translate", "--timeout", "5", "--address", "h:1", "--retries", "0", "Monday"]) == 0
    assert fake.opened == {"address": "h:1", "timeout": 5.0, "retries": 0, "token": None}
    assert client_main(["--timeout", "7", "--address", "h:2", "translate", "Monday"]) == 0
    assert fake.opened == {"address": "h:2", "timeout": 7.0, "retries": 3, "token": None}
    # after the subcommand wins; a global option not repeated there keeps its value before it
    assert client_main(["--timeout", "7", "--retries", "1", "translate", "--timeout", "2", "Monday"]) == 0
    assert fake.opened["timeout"] == 2.0 and fake.opened["retries"] == 1
    capsys.readouterr()
    assert client_main(["translate", "Monday", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["text"] == "Montag"
    assert client_main(["translate", "Monday"]) == 0 and fake.opened["timeout"] == 30.0


@pytest.mark.parametrize("command", ["translate", "translate-file", "job", "classify", "models", "pairs", "health"])
def test_every_client_subcommand_takes_the_global_options(command):
    subparsers = next(a for a in client_cli.build_parser()._actions if a.dest == "command").choices
    flags = subparsers[command]._option_string_actions
    assert {"--address", "--timeout", "--json", "--retries", "--token", "--tls-ca"} <= set(flags)
    if command in ("translate", "translate-file"):
        assert {"--to", "--from", "--target-language", "--source-language"} <= set(flags)


def test_the_command_line_module_is_light_for_the_file_workers_it_spawns():
    """A file worker is a spawned process that imports ``attnserve-server``'s main module again
    before its first file: that import must not pull in the server (onnxruntime, grpc, aiohttp,
    the engines), or each worker's start costs a second of CPU."""
    heavy = (
        "onnxruntime",
        "grpc",
        "aiohttp",
        "tokenizers",
        "attnserve.server.entry.app",
        "attnserve.server.translation",
    )
    code = f"import sys, attnserve.server.entry.cli; print(sorted(m for m in sys.modules if m.startswith({heavy!r})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_a_job_line_shows_counts_once_the_file_is_read():
    from attnserve.client import job_cli
    from attnserve.client.jobs import FileJob

    fields = {f: None for f in FileJob.__dataclass_fields__}
    queued = FileJob(**{**fields, "id": "j1", "status": "queued", "done": 0, "total": 0})
    running = FileJob(**{**fields, "id": "j1", "status": "running", "done": 40, "total": 0})
    counted = FileJob(**{**fields, "id": "j1", "status": "running", "done": 40, "total": 90, "remaining_s": 3.2})
    assert job_cli._line(queued) == "job j1: queued"
    assert job_cli._line(running) == "job j1: running 40/? sentences"
    assert job_cli._line(counted) == "job j1: running 40/90 sentences, about 3 s left"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "log"])
def test_a_followed_job_redraws_its_line_on_a_terminal_and_writes_whole_lines_to_a_log(terminal, monkeypatch, tmp_path):
    from types import SimpleNamespace

    from attnserve.client import job_cli
    from attnserve.client.jobs import FileJob

    def job(status: str, done: int, total: int) -> FileJob:
        return FileJob("j1", status, "notes.txt", done, total, None, "", 0, done)

    gets = [AttnServeError(grpc.StatusCode.UNAVAILABLE, "down"), AttnServeError(grpc.StatusCode.UNAVAILABLE, "down")]

    def get(job_id):
        if gets:
            raise gets.pop()
        return job("running", 0, 0)

    jobs = SimpleNamespace(
        get=get,
        watch=lambda job_id, timeout: iter([job("running", 3, 9), job("running", 6, 9), job("done", 9, 9)]),
        result=lambda job_id: SimpleNamespace(filename="notes.de.txt", content=b"fertig"),
    )
    stderr = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setattr(job_cli, "RETRY_S", 0.0)
    assert job_cli.follow(SimpleNamespace(jobs=jobs), "j1", tmp_path / "out.txt", quiet=False, as_json=False) == 0
    assert (tmp_path / "out.txt").read_bytes() == b"fertig"
    written = stderr.getvalue()
    assert written.count("the server is unreachable") == 1  # once for the outage, not once a retry
    if terminal:
        assert "\rjob j1: running 3/9 sentences" in written and written.endswith("\rjob j1: done 9/9 sentences\n")
    else:
        assert "\r" not in written and "3/9" not in written
        assert written.splitlines() == [
            "job j1: the server is unreachable; retrying (Ctrl+C to stop)",
            "job j1: done 9/9 sentences",
        ]
