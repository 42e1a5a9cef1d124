"""``attnserve-client --json``: every error is a JSON object on stdout, as a server's is, beside
its line on stderr; the client's own errors have a code of their own (docs/cli.md)."""

from __future__ import annotations

import io
import json
import sys
from types import SimpleNamespace

import grpc
import pytest

from attnserve.client import Client
from attnserve.client.cli import main as client_main
from attnserve.client.cli_parser import build_parser
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
from attnserve.server.service.limits import check_options, check_texts
from attnserve.server.shared.config import Settings
from attnserve.server.shared.errors import InvalidRequest, LimitExceeded
from attnserve.server.translation import DecodeOptions, EngineSettings
from attnserve.server.translation.prepared import ModelLimits

OFFLINE = ["--address", "127.0.0.1:1", "--retries", "0", "--json"]


def _run(argv: list[str], capsys, stdin: bytes | None = None, monkeypatch=None) -> tuple[int, object, list[str]]:
    """The exit code, stdout read as JSON, and stderr's lines."""
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = client_main(argv)
    out, err = capsys.readouterr()
    return code, json.loads(out), err.splitlines()


def _said(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["translate-file", "{tmp}/gone.txt", "--to", "de"], "{tmp}/gone.txt: no such file"),
        (["translate-file", "{tmp}", "--to", "de"], "{tmp}: a folder, not a file"),
        (
            ["translate-file", "{tmp}/notes.txt", "--to", "de", "--out", "{tmp}/gone/notes.de.txt"],
            "{tmp}/gone/notes.de.txt: no such folder: {tmp}/gone",
        ),
        (["classify", "{tmp}/gone.png"], "{tmp}/gone.png: no such file"),
        (["classify", "{tmp}"], "{tmp}: a folder, not an image"),
        (
            ["translate", "--glossary", "{tmp}/gone.tsv", "Monday"],
            "--glossary {tmp}/gone.tsv: No such file or directory",
        ),
        (
            ["translate", "--glossary", "{tmp}/notes.txt", "Monday"],
            "--glossary {tmp}/notes.txt, line 1: expected 'source<TAB>target' or 'source', got 'a\\tb\\tc'",
        ),
        (["translate", "--stream", "Monday", "Friday"], "--stream takes one text"),
    ],
)
def test_a_usage_error_with_json_is_a_json_error_on_stdout(argv, said, tmp_path, capsys):
    """These printed their line on stderr only: a script reading stdout got nothing to parse."""
    (tmp_path / "notes.txt").write_text("a\tb\tc\n")
    argv = [arg.format(tmp=tmp_path) for arg in argv]
    code, out, err = _run([*OFFLINE, *argv], capsys)
    message = said.format(tmp=tmp_path)
    assert (code, out, err) == (2, _said("INVALID_ARGUMENT", message), [f"attnserve-client: error: {message}"])


def test_stdin_that_does_not_decode_is_a_json_error_with_json(capsys, monkeypatch):
    code, out, err = _run([*OFFLINE, "translate", "-"], capsys, stdin=b"Monday \xff\n", monkeypatch=monkeypatch)
    message = "stdin is not UTF-8: byte 7 is 0xff"
    assert (code, out, err) == (2, _said("INVALID_ARGUMENT", message), [f"attnserve-client: error: {message}"])


def test_a_missing_glossary_is_a_usage_error_naming_the_option(tmp_path, capsys):
    """It was '[Errno 2] No such file or directory: ...', exit 1, as if the call had failed."""
    code = client_main(["--address", "127.0.0.1:1", "--retries", "0", "translate", "--glossary", "gone.tsv", "x"])
    assert code == 2
    assert capsys.readouterr().err == "attnserve-client: error: --glossary gone.tsv: No such file or directory\n"


class Aligned(pb_grpc.InferenceServiceServicer):
    def Translate(self, request, context):
        sentence = pb.SentenceAlignment(
            source="Monday", target="Montag", links=[pb.WordLink()], attention=[1.0], source_words=1, target_words=1
        )
        hypothesis = pb.Hypothesis(text="Montag", alignments=[sentence])
        return pb.TranslateResponse(translations=[pb.Translation(hypotheses=[hypothesis])])


class AlignedFolderGone(Aligned):
    """Answers once the folder the attention map goes to was removed (during the translation)."""

    def __init__(self, folder) -> None:
        self.folder = folder

    def Translate(self, request, context):
        self.folder.rmdir()
        return super().Translate(request, context)


def test_a_local_failure_after_the_call_is_a_json_error_with_its_own_code(scripted, tmp_path, capsys):
    """An attention map into a folder gone during the call fails as the PNG is written: exit 1,
    and with --json the LOCAL_ERROR code (not a server's status) and the system's message."""
    (tmp_path / "gone").mkdir()
    server = scripted(AlignedFolderGone(tmp_path / "gone"))
    argv = ["--address", server, "--json", "translate", "--attention-map", str(tmp_path / "gone/m.png")]
    code, out, err = _run([*argv, "Monday"], capsys)
    message = f"[Errno 2] No such file or directory: '{tmp_path / 'gone/m.png'}'"
    assert (code, out, err) == (1, _said("LOCAL_ERROR", message), [f"attnserve-client: error: {message}"])


def test_an_attention_map_into_a_missing_folder_is_a_usage_error_before_the_call(tmp_path, capsys):
    """It failed after the translation, exit 1; the folder is checked as translate-file checks --out
    (no server here: a call would fail UNAVAILABLE, exit 1)."""
    path = tmp_path / "gone/m.png"
    code, out, err = _run([*OFFLINE, "translate", "--attention-map", str(path), "Monday"], capsys)
    message = f"--attention-map {path}: no such folder: {tmp_path / 'gone'}"
    assert (code, out, err) == (2, _said("INVALID_ARGUMENT", message), [f"attnserve-client: error: {message}"])


# (option, DecodeOptions field, values on either side of the server's range)
DECODING_FLOATS = [
    ("--temperature", "temperature", ["0", "0.7", "-0.1", "-1e-9", "nan", "inf"]),
    ("--top-p", "top_p", ["1", "0.9", "1e-9", "0", "-0.5", "1.0000001", "nan", "inf"]),
    ("--length-penalty", "length_penalty", ["10", "-10", "0.6", "10.001", "-10.5", "1e30", "nan", "-inf"]),
]


@pytest.mark.parametrize(("option", "field", "values"), DECODING_FLOATS, ids=[o for o, _, _ in DECODING_FLOATS])
def test_a_decoding_float_out_of_the_servers_range_is_a_usage_error(option, field, values, capsys):
    """They were sent as typed: a round trip and exit 1 with the server's INVALID_ARGUMENT. The
    client's ranges are the server's (``check_options``), the values either side of each bound."""
    limits = ModelLimits(EngineSettings(), SimpleNamespace(never_ids=(), pad_id=0, eos_id=2), 512, 16, 1)
    taken = [_server_takes(limits, field, value) for value in values]
    assert [_parses(option, value) for value in values] == taken
    assert 2 <= sum(taken) < len(values)  # values on both sides
    for value in (v for v, ok in zip(values, taken) if not ok):
        with pytest.raises(SystemExit) as exit_:
            client_main([*OFFLINE, "translate", f"{option}={value}", "Monday"])
        assert exit_.value.code == 2, value
        assert (
            capsys.readouterr()
            .err.splitlines()[-1]
            .endswith(f"argument {option}: expected {EXPECTED[option]}, got {value!r}")
        )


EXPECTED = {
    "--temperature": "a number of 0 or more",
    "--top-p": "a number above 0, at most 1",
    "--length-penalty": "a number from -10 to 10",
}


def _parses(option: str, value: str) -> bool:
    try:
        build_parser().parse_args(["translate", f"{option}={value}", "Monday"])
    except SystemExit:
        return False
    return True


def _server_takes(limits: ModelLimits, field: str, value: str) -> bool:
    try:
        check_options(limits, DecodeOptions(**{field: float(value)}))
    except InvalidRequest:
        return False
    return True


class EndedJob(pb_grpc.InferenceServiceServicer):
    def GetFileJob(self, request, context):
        return pb.FileJob(id=request.id, status=pb.FILE_JOB_STATUS_FAILED, error="the file does not open")


def test_a_failed_job_is_a_json_error_with_a_code(scripted, capsys):
    code, out, err = _run(["--address", scripted(EndedJob()), "--json", "job", "j1"], capsys)
    message = "job j1 failed: the file does not open"
    assert (code, out, err) == (1, _said("JOB_FAILED", message), [f"attnserve-client: error: {message}"])


@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("value", ["-1", "two"])
def test_a_negative_retry_count_is_a_usage_error(where, value, capsys):
    """``--retries -1`` was taken and meant 0; ``Client(retries=-1)`` the same."""
    retries = ["--retries", value]
    argv = [*retries, "health"] if where == "before" else ["health", *retries]
    with pytest.raises(SystemExit) as exit_:
        client_main(["--address", "127.0.0.1:1", *argv])
    assert exit_.value.code == 2
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .endswith(f"argument --retries: expected an integer of 0 or more, got {value!r}")
    )
    with pytest.raises(ValueError, match="retries must be 0 or more, got -1"):
        Client("127.0.0.1:1", retries=-1)


class Limited(pb_grpc.InferenceServiceServicer):
    """The server's own limits (its message, its status), at --max-text-chars 10."""

    def Translate(self, request, context):
        try:
            check_texts(Settings(max_text_chars=10, max_request_chars=20), list(request.texts))
        except LimitExceeded as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return pb.TranslateResponse(translations=[pb.Translation(hypotheses=[pb.Hypothesis(text="Montag")])])


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["translate", "-"], "FILE.txt --to LANG"),
        (["translate", "--format", "html", "--to", "de", "-"], "FILE.html --to de"),
        (["translate", "--format", "markdown", "Monday, March 3, 2025"], "FILE.md --to LANG"),
    ],
)
def test_a_text_over_the_servers_limit_is_pointed_to_translate_file(argv, name, scripted, capsys, monkeypatch):
    """A document piped in was told the limit only, not that translate-file takes it whole."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"Monday, March 3, 2025\n")))
    assert client_main(["--address", scripted(Limited()), *argv]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "attnserve-client: error: INVALID_ARGUMENT: text 0 is 21 characters; this server takes at most 10 per "
        "text: split it",
        "attnserve-client: hint: translate-file takes a document longer than that (up to the server's "
        f"--max-file-chars): save the text as {name.split()[0]} and run attnserve-client translate-file {name}",
    ]


def test_other_limits_get_no_hint(scripted, capsys):
    """Over --max-request-chars, each text within its limit: no file to make of them."""
    assert client_main(["--address", scripted(Limited()), "translate", "Monday 3", "Friday 9", "Sunday 1"]) == 1
    assert len(capsys.readouterr().err.splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "stdin", "said"),
    [
        (["-"], b"", "stdin is empty: nothing to translate"),
        (["-"], b" \n\n", "stdin is empty: nothing to translate"),
        ([""], None, "argument texts: text 1 is empty: nothing to translate"),
        (["Monday", " "], None, "argument texts: text 2 is empty: nothing to translate"),
    ],
)
def test_nothing_to_translate_is_a_usage_error_not_a_blank_line(argv, stdin, said, scripted, capsys, monkeypatch):
    """``translate - < /dev/null`` printed an empty line, exit 0: a script's lost input looked translated."""
    servicer = Limited()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin or b"")))
    code, out, err = _run(["--address", scripted(servicer), "--json", "translate", *argv], capsys)
    assert (code, out, err) == (2, _said("INVALID_ARGUMENT", said), [f"attnserve-client: error: {said}"])
