"""``attnserve-client`` as a user runs it: one line on stderr and the documented exit code."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from attnserve.client import Client
from attnserve.client.cli import main as client_main
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parents[2]


def client_cli(*args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """The CLI in its own process: what a failure does to the process (an abort, a traceback) shows."""
    command = [sys.executable, "-m", "attnserve.client.cli", *args]
    return subprocess.run(command, input=input, capture_output=True, timeout=timeout, cwd=REPO)


@pytest.mark.parametrize("half", [["--tls-cert", "cert.pem"], ["--tls-ca", "ca.pem", "--tls-key", "key.pem"]])
def test_half_a_client_certificate_is_a_usage_error_not_an_abort(half, tmp_path):
    for name in ("cert.pem", "ca.pem", "key.pem"):
        (tmp_path / name).write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    paths = [str(tmp_path / arg) if arg.endswith(".pem") else arg for arg in half]
    done = client_cli("--address", "127.0.0.1:1", "--retries", "0", *paths, "health")
    assert done.returncode == 2, done.stderr
    said = done.stderr.decode().splitlines()
    assert said[-1].endswith("--tls-cert and --tls-key go together (mutual TLS): give both")


def test_the_client_refuses_a_private_key_without_its_certificate():
    """Without the check it connected in plaintext, the key unused, and nothing said so."""
    with pytest.raises(ValueError, match="private_key and certificate_chain go together"):
        Client("127.0.0.1:1", private_key=b"-----BEGIN PRIVATE KEY-----\n")


def test_stdin_that_is_not_utf8_is_a_usage_error_naming_the_byte():
    done = client_cli("--address", "127.0.0.1:1", "--retries", "0", "translate", "-", input=b"Monday \xff\n")
    assert done.returncode == 2 and b"Traceback" not in done.stderr
    assert done.stderr.decode().splitlines() == ["attnserve-client: error: stdin is not UTF-8: byte 7 is 0xff"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ([b"translate", b"Monday \xff"], "argument texts: not UTF-8: byte 7 of b'Monday \\xff' is 0xff"),
        ([b"translate", b"--to", b"d\xe9", b"Monday"], "argument --to: not UTF-8: byte 1 of b'd\\xe9' is 0xe9"),
    ],
)
def test_an_argument_that_is_not_utf8_is_a_usage_error_naming_it(argv, said):
    done = client_cli("--address", "127.0.0.1:1", "--retries", "0", *argv)
    assert done.returncode == 2 and b"Traceback" not in done.stderr
    assert done.stderr.decode().splitlines()[-1] == f"attnserve-client: error: {said}"


class FileTranslator(pb_grpc.InferenceServiceServicer):
    def __init__(self) -> None:
        self.names: list[str] = []

    def TranslateFile(self, request, context):
        self.names.append(request.filename)
        yield pb.TranslateFileChunk(content=b"Montag\n")
        yield pb.TranslateFileChunk(done=pb.FileDone(filename=request.filename, sentences=1, model="mt"))


def test_a_file_name_that_is_not_utf8_is_translated_and_written_beside_it(scripted, tmp_path):
    """A Latin-1 file name (``caf\\xe9.txt``) is the system's to have: it is sent with U+FFFD for
    the byte, and the translation is written under the same bytes with ``.de`` added."""
    source = tmp_path / os.fsdecode(b"caf\xe9.txt")
    source.write_text("Monday\n")
    servicer = FileTranslator()
    done = client_cli("--address", scripted(servicer), "translate-file", os.fsencode(source), "--to", "de")
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    assert servicer.names == ["caf\ufffd.txt"]
    written = os.fsencode(tmp_path) + b"/caf\xe9.de.txt"
    assert open(written, "rb").read() == b"Montag\n"
    assert done.stdout.decode().startswith(f"{tmp_path}/caf\\xe9.de.txt (")


def _until_the_client_leaves(context, most_s: float = 30) -> None:
    deadline = time.monotonic() + most_s
    while context.is_active() and time.monotonic() < deadline:
        time.sleep(0.02)


class SlowServer(pb_grpc.InferenceServiceServicer):
    """A translation, and a job's progress, that take longer than the user waits."""

    def __init__(self) -> None:
        self.working = threading.Event()

    def Translate(self, request, context):
        self.working.set()
        _until_the_client_leaves(context)
        return pb.TranslateResponse()

    def SubmitFileJob(self, request, context):
        return pb.FileJob(id="job-7", status=pb.FILE_JOB_STATUS_QUEUED, filename=request.filename)

    def GetFileJob(self, request, context):
        return pb.FileJob(id=request.id, status=pb.FILE_JOB_STATUS_RUNNING)

    def WatchFileJob(self, request, context):
        yield pb.FileJob(id=request.id, status=pb.FILE_JOB_STATUS_RUNNING)
        self.working.set()
        _until_the_client_leaves(context)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["translate", "Monday"], ["attnserve-client: interrupted"]),
        (
            ["translate-file", "notes.txt", "--to", "de", "--job", "--json"],
            [
                "job job-7 (re-attach with: attnserve-client job job-7)",
                "attnserve-client: interrupted; job job-7 goes on on the server: attnserve-client job job-7 follows it",
            ],
        ),
    ],
)
def test_ctrl_c_is_one_line_and_exit_130_and_names_the_job_that_goes_on(argv, said, scripted, tmp_path):
    (tmp_path / "notes.txt").write_text("Monday\n")
    servicer = SlowServer()
    command = [sys.executable, "-m", "attnserve.client.cli", "--address", scripted(servicer), *argv]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert servicer.working.wait(30)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 130 and out == b""
    assert err.decode().splitlines() == said


class EndedJobs(pb_grpc.InferenceServiceServicer):
    def GetFileJob(self, request, context):
        if request.id == "failed":
            return pb.FileJob(id="failed", status=pb.FILE_JOB_STATUS_FAILED, error="the file does not open")
        return pb.FileJob(id=request.id, status=pb.FILE_JOB_STATUS_CANCELLED)


@pytest.mark.parametrize(
    ("job_id", "said"), [("failed", "job failed failed: the file does not open"), ("j1", "job j1 cancelled")]
)
def test_a_job_that_failed_or_was_cancelled_is_an_error_on_stderr_not_output(job_id, said, scripted):
    """``attnserve-client job ID > out.txt`` leaves out.txt empty and shows why on the terminal."""
    done = client_cli("--address", scripted(EndedJobs()), "job", job_id, "--quiet")
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode().splitlines() == [f"attnserve-client: error: {said}"]


@pytest.mark.parametrize("target", ["", "de/x", "../de"])
def test_translate_file_refuses_a_target_that_is_not_a_language_code(target, tmp_path, capsys):
    """The target goes into the written file's name: "" wrote notes..txt, "de/x" failed with a traceback."""
    source = tmp_path / "notes.txt"
    source.write_text("Monday\n")
    with pytest.raises(SystemExit) as exit_:
        client_main(["--address", "127.0.0.1:1", "--retries", "0", "translate-file", str(source), "--to", target])
    assert exit_.value.code == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    said = capsys.readouterr().err.splitlines()[-1]
    assert said.endswith(
        f"argument --to/--target-language: expected a language code (de, fra, deu_Latn, pt-BR), got {target!r}"
    )


class ManyModels(pb_grpc.InferenceServiceServicer):
    def ListModels(self, request, context):
        return pb.ListModelsResponse(models=[pb.ModelInfo(name=f"model-{i}", ready=True) for i in range(2000)])


def test_output_into_a_pipe_closed_early_ends_quietly_as_unix_tools_do(scripted):
    """``attnserve-client models | head -1``: no "[Errno 32] Broken pipe", no traceback."""
    command = [sys.executable, "-m", "attnserve.client.cli", "--address", scripted(ManyModels()), "models"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before the first line
    _, err = process.communicate(timeout=60)
    assert (process.returncode, err) == (141, b"")


@pytest.mark.parametrize(
    ("out", "said"),
    [
        ("gone/notes.de.txt", "no such folder: {tmp}/gone"),
        (".", "a folder, not a file"),
        ("n" * 300 + ".de.txt", "File name too long"),  # the file system's ENAMETOOLONG, not an OSError's exit 1
    ],
)
def test_an_output_that_cannot_be_written_is_refused_before_the_file_is_sent(out, said, scripted, tmp_path, capsys):
    source = tmp_path / "notes.txt"
    source.write_text("Monday\n")
    servicer = FileTranslator()
    argv = ["--address", scripted(servicer), "translate-file", str(source), "--to", "de", "--out", str(tmp_path / out)]
    assert client_main(argv) == 2
    assert servicer.names == []  # no translation to throw away
    assert capsys.readouterr().err == f"attnserve-client: error: {tmp_path / out}: {said.format(tmp=tmp_path)}\n"


class PickyClassifier(pb_grpc.InferenceServiceServicer):
    """Refuses a request at its first image that is not "a picture", naming it as the server does."""

    def __init__(self) -> None:
        self.requests: list[int] = []

    def Classify(self, request, context):
        self.requests.append(len(request.images))
        for i, image in enumerate(request.images):
            if image.encoded != b"a picture":
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"images[{i}]: image does not decode")
        label = pb.Classification(labels=[pb.LabelScore(label="7", index=7, probability=0.9)])
        return pb.ClassifyResponse(results=[label] * len(request.images))


def test_one_image_the_server_refuses_is_named_and_the_others_are_still_classified(scripted, tmp_path, capsys):
    """``classify photos/*.png`` with one broken file among them: the rest are not lost with it."""
    names = ["a.png", "broken.png", "c.png", "torn.png", "e.png"]
    for name in names:
        (tmp_path / name).write_bytes(b"a picture" if name[0] in "ace" else b"not one")
    files = [str(tmp_path / name) for name in names]
    argv = ["--address", scripted(PickyClassifier()), "--retries", "0", "classify", *files]
    assert client_main(argv) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"{tmp_path / name}: 7 0.900" for name in ("a.png", "c.png", "e.png")]
    assert err.splitlines() == [
        f"attnserve-client: error: INVALID_ARGUMENT: {tmp_path / name}: image does not decode"
        for name in ("broken.png", "torn.png")
    ]
    assert client_main([*argv[:4], "--json", "classify", *files]) == 1
    said = json.loads(capsys.readouterr().out)
    assert [entry["file"] for entry in said] == files
    refused = [entry.get("error", {}).get("message") for entry in said]
    assert refused == [None if name[0] in "ace" else f"{tmp_path / name}: image does not decode" for name in names]
    assert said[2]["labels"] == [{"label": "7", "index": 7, "probability": pytest.approx(0.9)}]


@pytest.mark.parametrize("option", ["--tls-ca", "--tls-cert", "--tls-key"])
def test_a_tls_file_that_is_not_there_is_a_usage_error_naming_its_option(option, tmp_path, capsys):
    """It was "error: [Errno 2] No such file or directory: 'ca.pem'", exit 1, as if the call had failed."""
    pair = {"--tls-cert": "--tls-key", "--tls-key": "--tls-cert"}.get(option)
    (tmp_path / "other.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    argv = [option, str(tmp_path / "gone.pem"), *([pair, str(tmp_path / "other.pem")] if pair else [])]
    for where in (argv + ["health"], ["health"] + argv):  # before the subcommand or after it
        with pytest.raises(SystemExit) as exit_:
            client_main(["--address", "127.0.0.1:1", "--retries", "0", *where])
        assert exit_.value.code == 2
        said = capsys.readouterr().err.splitlines()[-1]
        assert said.endswith(f"error: argument {option}: no such file: {str(tmp_path / 'gone.pem')!r}")


class TextsHeard(pb_grpc.InferenceServiceServicer):
    def __init__(self) -> None:
        self.texts: list[str] = []

    def Translate(self, request, context):
        self.texts += request.texts
        return pb.TranslateResponse(translations=[pb.Translation(hypotheses=[pb.Hypothesis(text="Montag")])])


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-8-sig"])
def test_stdin_with_a_byte_order_mark_is_read_in_its_encoding(encoding, scripted):
    """Notepad's "Unicode" and PowerShell's ``>`` write UTF-16 with a BOM: it was "stdin is not UTF-8: byte 0"."""
    servicer = TextsHeard()
    data = ("\ufeff" if encoding == "utf-16-be" else "") + "Monday.\r\nFriday, the 9th.\r\n"
    done = client_cli("--address", scripted(servicer), "translate", "-", input=data.encode(encoding))
    assert (done.returncode, done.stdout, done.stderr) == (0, b"Montag\n", b"")
    assert servicer.texts == ["Monday.\r\nFriday, the 9th."]


@pytest.mark.parametrize("job", [[], ["--job"]])
def test_a_translation_already_beside_the_file_is_not_written_over_unless_named_with_out(job, scripted, tmp_path):
    """notes.de.txt, post-edited by hand, was replaced without a word by running the command again."""
    (tmp_path / "notes.txt").write_text("Monday\n")
    (tmp_path / "notes.de.txt").write_text("Montag, von Hand verbessert\n")
    servicer = FileTranslator()
    argv = ["--address", scripted(servicer), "translate-file", str(tmp_path / "notes.txt"), "--to", "de", *job]
    done = client_cli(*argv)
    assert done.returncode == 2 and servicer.names == []
    assert done.stderr.decode().splitlines() == [
        f"attnserve-client: error: {tmp_path / 'notes.de.txt'}: exists; not overwritten: name the file to write "
        "with --out (--out FILE, this one to replace it)"
    ]
    assert (tmp_path / "notes.de.txt").read_text() == "Montag, von Hand verbessert\n"
    if not job:  # named, it is the user's to replace
        assert client_cli(*argv, "--out", str(tmp_path / "notes.de.txt")).returncode == 0
        assert (tmp_path / "notes.de.txt").read_text() == "Montag\n"
