"""attnserve.v1's file jobs (SubmitFileJob, GetFileJob, WatchFileJob, CancelFileJob,
GetFileJobResult) through the Python client and ``attnserve-client translate-file --job`` /
``attnserve-client job ID``: the job's file is what ``TranslateFile`` gives, its progress is
watched, another token never sees it, and bad ids and early results get clear statuses; a job
and a file take a stored glossary of their token."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import grpc
import pytest

from attnserve.client import AttnServeError
from attnserve.client.cli import main as client_main
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parents[3] / "models" / "repo"
LINES = [f"on Monday, March {day}, 2025 at {day % 12 + 1}:15 PM" for day in range(1, 29)]


@pytest.fixture(scope="module")
def server(serve, tmp_path_factory):
    state = tmp_path_factory.mktemp("state")
    with serve(REPO, language_detection="off", state_dir=str(state), auth_tokens="alice,bob") as handle:
        yield handle


def test_a_job_is_watched_to_its_end_and_its_file_is_translate_files(server, tmp_path):
    path = tmp_path / "dates.txt"
    path.write_text("\n".join(LINES * 4) + "\n")
    with server.client(timeout=120, token="alice") as client:
        job = client.jobs.submit(path, "de", "en")
        assert job.status == "queued" and job.id
        seen = list(client.jobs.watch(job.id))
        done = client.jobs.result(job.id)
        expected = client.translate_file(path, "de", "en")
    assert seen[-1].status == "done" and seen[-1].done == seen[-1].total == len(LINES) * 4
    assert [j.done for j in seen] == sorted(j.done for j in seen)
    assert done.content == expected.content and done.filename == "dates.de.txt"
    assert done.characters == expected.characters > 0  # counted as TranslateFile counts them
    with server.client(token="bob") as other:
        for call in (other.jobs.get, other.jobs.cancel, other.jobs.result):
            with pytest.raises(AttnServeError) as err:
                call(job.id)
            assert err.value.code == grpc.StatusCode.NOT_FOUND


def test_an_unfinished_job_has_no_result_and_a_cancel_ends_it(server, tmp_path):
    path = tmp_path / "long.txt"
    path.write_text("\n".join(f"{line} ({i})." for i in range(40) for line in LINES) + "\n")
    with server.client(timeout=60, token="alice") as client:
        job = client.jobs.submit(path, "de", "en")
        with pytest.raises(AttnServeError) as err:
            client.jobs.result(job.id)
        assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert client.jobs.cancel(job.id).status == "cancelled"
        assert list(client.jobs.watch(job.id))[-1].status == "cancelled"
        with pytest.raises(AttnServeError) as err:
            client.jobs.get("no-such-job")
        assert err.value.code == grpc.StatusCode.NOT_FOUND


def test_the_cli_submits_a_job_prints_progress_and_reattaches(server, tmp_path, capsys, monkeypatch):
    source = tmp_path / "notes.txt"
    source.write_text("\n".join(LINES[:9]) + "\n")
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    common = ["--address", server.address, "--token", "alice"]
    assert client_main([*common, "translate-file", str(source), "--to", "de", "--from", "en", "--job"]) == 0
    out = tmp_path / "notes.de.txt"
    assert len(out.read_text().splitlines()) == 9
    log = sys.stderr.getvalue()
    assert "9/9 sentences" in log
    job_id = log.split("attnserve-client job ", 1)[1].split(")", 1)[0]
    again = tmp_path / "again.txt"
    assert client_main([*common, "job", job_id, "--out", str(again)]) == 0
    assert again.read_text() == out.read_text()
    assert client_main([*common, "job", "no-such-job"]) == 1
    assert "NOT_FOUND" in sys.stderr.getvalue()


def test_reattaching_without_out_writes_the_translated_name_and_never_over_a_file(server, tmp_path, monkeypatch):
    """``job ID`` run beside the file it translated: the source stays English, and a file already
    under the translated name is kept, the error saying to name another with --out."""
    source = tmp_path / "notes.txt"
    source.write_text("\n".join(LINES[:3]) + "\n")
    english = source.read_text()
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    common = ["--address", server.address, "--token", "alice"]
    first = tmp_path / "first.txt"
    assert (
        client_main(
            [*common, "translate-file", str(source), "--to", "de", "--from", "en", "--job", "--out", str(first)]
        )
        == 0
    )
    job_id = sys.stderr.getvalue().split("attnserve-client job ", 1)[1].split(")", 1)[0]
    monkeypatch.chdir(tmp_path)
    assert client_main([*common, "job", job_id, "--quiet"]) == 0
    assert source.read_text() == english
    assert (tmp_path / "notes.de.txt").read_text() == first.read_text() != english
    (tmp_path / "notes.de.txt").write_text("mine")
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert client_main([*common, "job", job_id, "--quiet"]) == 1
    assert (tmp_path / "notes.de.txt").read_text() == "mine" and source.read_text() == english
    said = sys.stderr.getvalue()
    assert said.count("\n") == 1 and "notes.de.txt exists" in said and "--out" in said


def test_a_job_naming_no_target_is_named_for_the_language_its_model_wrote(server, tmp_path, monkeypatch):
    """A job that names only its model (no target language) is translated into that model's
    target, and its result is named for it, as every other path names a translated file:
    ``attnserve-client job ID`` beside the sent file writes notes.de.txt instead of refusing
    to write over notes.txt."""
    source = tmp_path / "notes.txt"
    source.write_text("\n".join(LINES[:3]) + "\n")
    english = source.read_text()
    with server.client(timeout=120, token="alice") as client:
        job = client.jobs.submit(source, "", "en", model="translator-en-de")
        assert list(client.jobs.watch(job.id))[-1].status == "done"
        done = client.jobs.result(job.id)
    assert done.filename == "notes.de.txt" and done.target_language == "de"
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    monkeypatch.chdir(tmp_path)
    assert client_main(["--address", server.address, "--token", "alice", "job", job.id, "--quiet"]) == 0
    assert source.read_text() == english and "Montag" in (tmp_path / "notes.de.txt").read_text()


def test_a_job_and_a_file_take_a_stored_glossary_of_their_token_only(server, tmp_path):
    path = tmp_path / "days.txt"
    path.write_text("\n".join(LINES[:6]) + "\n")
    with grpc.insecure_channel(server.address) as channel:
        made = pb_grpc.InferenceServiceStub(channel).CreateGlossary(
            pb.CreateGlossaryRequest(
                name="days", source_language="en", target_language="de",
                entries=[pb.GlossaryEntry(source="Monday", target="Wochenbeginn")],
            ),
            metadata=(("authorization", "Bearer alice"),),
        )  # fmt: skip
    with server.client(timeout=120, token="alice") as client:
        plain = client.translate_file(path, "de", "en").content.decode()
        job = client.jobs.submit(path, "de", "en", glossary_id=made.id)
        assert list(client.jobs.watch(job.id))[-1].status == "done"
        from_job = client.jobs.result(job.id).content.decode()
        direct = client.translate_file(path, "de", "en", glossary_id=made.id).content.decode()
        for wrong, code in (
            ("no-such-glossary", grpc.StatusCode.NOT_FOUND),
            (made.id, grpc.StatusCode.INVALID_ARGUMENT),
        ):
            source = "auto" if wrong == made.id else "en"  # a glossary needs its source named
            with pytest.raises(AttnServeError) as err:
                client.jobs.submit(path, "de", source, glossary_id=wrong)
            assert err.value.code == code, err.value
    assert plain.count("Montag") == 6 and "Wochenbeginn" not in plain
    assert from_job == direct and from_job.count("Wochenbeginn") == 6 and "Montag" not in from_job
    with server.client(token="bob") as other, pytest.raises(AttnServeError) as err:
        other.jobs.submit(path, "de", "en", glossary_id=made.id)
    assert err.value.code == grpc.StatusCode.NOT_FOUND


def test_a_job_without_languages_routes_as_translate_file_does(server):
    """SubmitFileJob takes "the same file as a job": no languages pick the model, as they do for TranslateFile."""
    request = pb.TranslateFileRequest(content="\n".join(LINES[:3]).encode(), filename="dates.txt")
    metadata = (("authorization", "Bearer alice"),)
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.InferenceServiceStub(channel)
        streamed = list(stub.TranslateFile(request, timeout=60, metadata=metadata))
        job = stub.SubmitFileJob(request, timeout=30, metadata=metadata)
        watched = list(stub.WatchFileJob(pb.FileJobRequest(id=job.id), timeout=60, metadata=metadata))
        result = list(stub.GetFileJobResult(pb.FileJobRequest(id=job.id), timeout=30, metadata=metadata))
    assert watched[-1].status == pb.FILE_JOB_STATUS_DONE
    content = b"".join(chunk.content for chunk in result)
    assert content == b"".join(chunk.content for chunk in streamed) and content.count(b"\n") >= 2
    # the model the router chose, named as TranslateFile names it
    assert result[-1].done.model == streamed[-1].done.model == "translator-en-de"
    # named for the language the model wrote, as TranslateFile names it
    assert result[-1].done.filename == streamed[-1].done.filename == "dates.de.txt"
    assert result[-1].done.target_language == streamed[-1].done.target_language == "de"


GERMAN = ["Der Bericht ist fertig und liegt auf dem Tisch.", "Wir treffen uns am Montag im Büro."]


def test_a_job_from_auto_reports_the_language_detected_as_translate_file_does(serve, tmp_path):
    """A job whose source is ``auto`` names the language detected in its result's summary and its
    JSON, as TranslateFile's summary does: for a file of two languages, the one detected for the
    file as a whole (its texts together), never "auto"."""
    import json
    import urllib.request

    model_dir = tmp_path / "repo" / "translator"
    model_dir.mkdir(parents=True)
    for part in (REPO / "translator-en-de").iterdir():
        if part.name != "model.json":
            (model_dir / part.name).symlink_to(part)
    manifest = json.loads((REPO / "translator-en-de" / "model.json").read_text())
    manifest["name"] = "translator"
    # two sources to detect among (a target neither is, so both reach it)
    manifest["languages"] = {**manifest["languages"], "source": ["en", "de"], "target": ["it"], "default_target": "it"}
    (model_dir / "model.json").write_text(json.dumps(manifest))
    path = tmp_path / "mixed.txt"
    path.write_text("\n".join([*GERMAN, LINES[0]]) + "\n")  # mostly German, one English line
    with serve(tmp_path / "repo", http_port=0, state_dir=str(tmp_path / "state")) as server:
        with server.client(timeout=120) as client:
            direct = client.translate_file(path, "it", "auto")
            job = client.jobs.submit(path, "it", "auto")
            assert list(client.jobs.watch(job.id))[-1].status == "done"
            from_job = client.jobs.result(job.id)
        with urllib.request.urlopen(f"http://{server.http_address}/jobs/{job.id}", timeout=30) as reply:
            record = json.loads(reply.read())
    assert (direct.source_language, direct.detected_language) == ("de", "de")
    assert (from_job.source_language, from_job.detected_language) == ("de", "de")
    assert record["source"] == "de" and from_job.content == direct.content
