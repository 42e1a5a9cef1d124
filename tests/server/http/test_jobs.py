"""File jobs over HTTP (``POST /jobs``, ``GET /jobs/{id}``, ``/events``, ``/result``,
``DELETE``) on the bundled English -> German translator: a job returns at once, shows its
progress before it ends, and its result is what ``/translate_file`` gives; a cancel stops it;
one key never sees another's jobs; jobs are bounded per key and expire; and a job whose
server is killed halfway finishes on the next server on the same state folder without
decoding its finished sentences again."""

from __future__ import annotations

import io
import json
import signal
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from tests.server.http.test_files import REPO, call, files_server, translate_file, translated
from tests.support import office_files as office
from tests.support.server import ServerProcess, post_json

SENTENCES = [
    line.split("\t")[0]
    for line in (Path(__file__).resolve().parents[3] / "examples" / "sentences.tsv").read_text().splitlines()
    if line and not line.startswith("#")
]


def document(paragraphs: int) -> bytes:
    """A .docx of ``paragraphs`` short paragraphs, each unique (so no sentence is a repeat)."""
    return office.docx([[(f"{SENTENCES[i % len(SENTENCES)]} ({i}).", "")] for i in range(paragraphs)])


def texts(docx: bytes) -> str:
    with zipfile.ZipFile(io.BytesIO(docx)) as package:
        return package.read("word/document.xml").decode()


def submit(server, content: bytes, headers: dict | None = None, **fields: str) -> tuple[int, dict]:
    body, content_type = office.multipart({"source": "en", "target": "de", **fields}, "report.docx", content)
    status, reply, _ = call(server, "/jobs", body, content_type, headers)
    return status, json.loads(reply)


def job(server, job_id: str, headers: dict | None = None) -> tuple[int, dict]:
    status, reply, _ = call(server, f"/jobs/{job_id}", headers=headers)
    return status, json.loads(reply)


def finished(server, job_id: str, timeout: float = 120.0) -> dict:
    return finished_with(server, job_id, None, timeout)


def finished_with(server, job_id: str, headers: dict | None, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, reply = job(server, job_id, headers)
        assert status == 200, reply
        if reply["status"] in ("done", "failed", "cancelled"):
            return reply
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not finish in {timeout} s: {reply}")


@pytest.fixture(scope="module")
def server(serve, tmp_path_factory):
    state = str(tmp_path_factory.mktemp("state"))
    with files_server(serve, tmp_path_factory.mktemp("downloads"), state_dir=state, max_file_chars=100_000) as s:
        yield s


def test_a_job_reports_progress_as_it_runs_and_its_result_is_the_files_translation(server):
    content = document(1200)  # a job of a few seconds: progress written every 0.2 s is seen between 0 and all
    status, submitted = submit(server, content)
    assert status == 202 and submitted["status"] == "queued", submitted
    request = f"http://{server.http_address}/jobs/{submitted['id']}/events"
    events = []
    with urllib.request.urlopen(request, timeout=120) as stream:
        name = ""
        for raw in stream:
            line = raw.decode().strip()
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[len("data: ") :])))
    progress = [e for n, e in events if n == "progress" and e["total"]]
    assert progress and progress[0]["done"] < progress[0]["total"], events  # seen before the end
    assert any(0 < e["done"] < e["total"] for e in progress), events  # moving, not only 0 and all
    assert any(e["remaining_s"] is not None for e in progress), events
    last_name, last = events[-1]
    assert last_name == "done" and last["done"] == last["total"] >= 300, last
    assert last["model"] == "translator-en-de", last  # named by none: the one the router chose
    status, result, headers = call(server, f"/jobs/{submitted['id']}/result")
    assert status == 200 and "report.de.docx" in headers["Content-Disposition"]  # as /download_file names it
    assert texts(result) == texts(translated(server, "report.docx", content))


def test_a_cancelled_job_stops_and_has_no_result(server):
    # 3,500 paragraphs (97,000 characters, within the server's 100,000): several seconds of decoding
    # (the bundled translator decodes a few hundred sentences a second); the cancel lands once the
    # file is read and split, while its sentences decode, whatever the machine's speed
    status, submitted = submit(server, document(3500))
    assert status == 202
    deadline = time.monotonic() + 60
    while (running := job(server, submitted["id"])[1])["total"] == 0 and time.monotonic() < deadline:
        assert running["status"] in ("queued", "running"), running
        time.sleep(0.02)
    request = urllib.request.Request(f"http://{server.http_address}/jobs/{submitted['id']}", method="DELETE")
    with urllib.request.urlopen(request, timeout=30) as reply:
        cancelled = json.loads(reply.read())
    assert cancelled["status"] == "cancelled", cancelled
    time.sleep(1.5)  # past a tick of the runner: the job's task is stopped, its progress stays
    status, after = job(server, submitted["id"])
    assert after["status"] == "cancelled" and after["done"] < after["total"], after
    time.sleep(0.5)
    assert job(server, submitted["id"])[1]["done"] == after["done"]  # nothing decodes it any more
    status, reply, _ = call(server, f"/jobs/{submitted['id']}/result")
    assert status == 409 and b"cancelled" in reply


def test_unknown_and_unsupported_jobs_get_clear_errors(server):
    status, reply = job(server, "no-such-job")
    assert status == 404 and "no file job" in reply["error"]
    body, content_type = office.multipart({"source": "en", "target": "de"}, "notes.xyz", b"hello")
    status, reply, _ = call(server, "/jobs", body, content_type)
    assert status == 400, reply
    body, content_type = office.multipart({"source": "en"}, "report.docx", document(1))
    status, reply, _ = call(server, "/jobs", body, content_type)
    assert status == 400 and b"target" in reply
    # what a job would fail at once is refused at once, as /translate_file refuses it
    status, reply = submit(server, document(1), target="fr")
    assert status == 400 and "no model serves" in reply["error"], reply
    status, reply = submit(server, b"")
    assert status == 400 and "empty" in reply["error"], reply


def test_one_key_never_sees_anothers_job_and_jobs_are_bounded_per_key(serve, tmp_path):
    with files_server(
        serve, tmp_path / "downloads", state_dir=str(tmp_path / "state"), auth_tokens="alice,bob", max_jobs_per_key=1
    ) as keyed:
        alice, bob = {"Authorization": "Bearer alice"}, {"Authorization": "Bearer bob"}
        status, submitted = submit(keyed, document(3), alice)
        assert status == 202, submitted
        assert job(keyed, submitted["id"], bob)[0] == 404
        assert job(keyed, submitted["id"])[0] == 400  # no key: upstream's "contact the operator"
        assert job(keyed, submitted["id"], {"Authorization": "Bearer eve"})[0] == 403
        assert call(keyed, f"/jobs/{submitted['id']}/result", headers=bob)[0] == 404
        assert job(keyed, submitted["id"], alice)[0] == 200
        status, refused = submit(keyed, document(3), alice)
        assert status == 429 and "--max-jobs-per-key" in refused["error"]
        assert submit(keyed, document(3), bob)[0] == 202  # bob's bound is his own
        # a finished job leaves the key's place in the queue (it stays, for its result, until it expires)
        assert finished_with(keyed, submitted["id"], alice)["status"] == "done"
        status, again = submit(keyed, document(3), alice)
        assert status == 202, again
        assert job(keyed, submitted["id"], alice)[0] == 200


def test_jobs_expire(serve, tmp_path):
    with files_server(serve, tmp_path / "downloads", state_dir=str(tmp_path / "state"), job_retention_s=1.0) as s:
        status, submitted = submit(s, document(2))
        assert status == 202
        deadline = time.monotonic() + 30
        while job(s, submitted["id"])[0] == 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert job(s, submitted["id"])[0] == 404
        assert not list((tmp_path / "state" / "jobs").iterdir())  # its files went with it


@pytest.mark.slow
def test_a_job_interrupted_halfway_resumes_on_restart_without_redoing_its_finished_half(tmp_path):
    content = document(PARAGRAPHS)
    args = ("--state-dir", str(tmp_path / "state"), "--download-dir", str(tmp_path / "downloads"))
    args += ("--language-detection", "off", "--max-file-chars", "1000000")
    first = ServerProcess(REPO, *args)
    try:
        status, submitted = submit(first, content)
        assert status == 202, submitted
        started = time.monotonic()
        while True:
            status, seen = job(first, submitted["id"])
            if seen["total"] and seen["done"] >= seen["total"] // 2:
                break
            assert seen["status"] in ("queued", "running") and time.monotonic() - started < 300, seen
            time.sleep(0.05)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(30)
    finally:
        first.stop()
    second = ServerProcess(REPO, *args)
    try:
        done = finished(second, submitted["id"], timeout=600)
        assert done["status"] == "done", done
        assert done["total"] == seen["total"] >= PARAGRAPHS
        assert seen["done"] <= done["reused"] < done["total"], (seen, done)
        assert done["reused"] + done["decoded"] == done["total"], done  # the engine decoded only the rest
        status, result, _ = call(second, f"/jobs/{submitted['id']}/result")
        assert status == 200
        assert texts(result) == texts(translated(second, "report.docx", content))
    finally:
        second.stop()


PARAGRAPHS = 8000  # about 200 pages of 40 short paragraphs


def test_a_job_of_a_server_stopped_gracefully_resumes_on_the_next(serve, tmp_path):
    content = document(600)
    settings = dict(state_dir=str(tmp_path / "state"), max_file_chars=100_000)
    with files_server(serve, tmp_path / "downloads", **settings) as first:
        status, submitted = submit(first, content)
        assert status == 202
        while not (seen := job(first, submitted["id"])[1])["done"]:
            assert seen["status"] in ("queued", "running"), seen
            time.sleep(0.02)
    with files_server(serve, tmp_path / "downloads", **settings) as second:
        assert job(second, submitted["id"])[1]["status"] in ("queued", "running", "done")
        done = finished(second, submitted["id"])
        assert done["status"] == "done" and seen["done"] <= done["reused"] < done["total"], (seen, done)
        assert done["reused"] + done["decoded"] == done["total"]
        status, result, _ = call(second, f"/jobs/{submitted['id']}/result")
        assert texts(result) == texts(translated(second, "report.docx", content))


def mondays(paragraphs: int) -> bytes:
    """A .docx whose every paragraph holds the term "Monday", each unique."""
    return office.docx([[(f"Monday, March 3, 2025 ({i}).", "")] for i in range(paragraphs)])


def stored_glossary(server, entries: dict[str, str]) -> str:
    doc = {"name": "days", "source": "en", "target": "de", "entries": entries}
    status, reply, _ = call(server, "/glossaries", json.dumps(doc).encode(), "application/json")
    assert status == 201, reply
    return json.loads(reply)["id"]


def test_a_file_and_a_job_take_a_stored_glossary_and_an_unknown_one_is_refused(server):
    content = mondays(3)
    glossary_id = stored_glossary(server, {"Monday": "Wochenbeginn"})
    status, submitted = submit(server, content, glossary_id=glossary_id)
    assert status == 202 and submitted["glossary_id"] == glossary_id, submitted
    assert finished(server, submitted["id"])["status"] == "done"
    status, result, _ = call(server, f"/jobs/{submitted['id']}/result")
    assert status == 200 and texts(result).count("Wochenbeginn") == 3 and "Montag" not in texts(result)
    synchronous = texts(translated(server, "report.docx", content, glossary_id=glossary_id))
    assert synchronous == texts(result)
    plain = texts(translated(server, "report.docx", content))
    assert plain.count("Montag") == 3 and "Wochenbeginn" not in plain
    for fields, status_code, words in (
        ({"glossary_id": "no-such-glossary"}, 404, "no glossary"),
        ({"glossary_id": glossary_id, "source": "auto"}, 400, "name the source language"),
    ):
        status, reply = submit(server, content, **fields)
        assert status == status_code and words in reply["error"], reply
        status, reply = translate_file(server, "report.docx", content, **fields)
        assert status == status_code and words in reply["error"], reply


def test_a_job_resumed_on_restart_keeps_its_glossary_though_it_was_deleted_meanwhile(serve, tmp_path):
    content = mondays(600)
    settings = dict(state_dir=str(tmp_path / "state"), max_file_chars=100_000)
    with files_server(serve, tmp_path / "downloads", **settings) as first:
        glossary_id = stored_glossary(first, {"Monday": "Wochenbeginn"})
        status, submitted = submit(first, content, glossary_id=glossary_id)
        assert status == 202
        while not (seen := job(first, submitted["id"])[1])["done"]:
            assert seen["status"] in ("queued", "running"), seen
            time.sleep(0.02)
        request = urllib.request.Request(f"http://{first.http_address}/glossaries/{glossary_id}", method="DELETE")
        with urllib.request.urlopen(request, timeout=30) as reply:
            assert reply.status == 204
    with files_server(serve, tmp_path / "downloads", **settings) as second:
        done = finished(second, submitted["id"])
        assert done["status"] == "done" and seen["done"] <= done["reused"] < done["total"], (seen, done)
        status, result, _ = call(second, f"/jobs/{submitted['id']}/result")
        assert texts(result).count("Wochenbeginn") == 600 and "Montag" not in texts(result)


def test_a_full_disk_refuses_a_job_and_a_glossary_with_503_and_keeps_no_partial_upload(tmp_path):
    state = tmp_path / "state"
    args = ("--state-dir", str(state), "--download-dir", str(tmp_path / "downloads"), "--metrics-port", "-1")
    args += ("--max-stored-glossary-entries", "100000", "--max-glossaries-per-key", "1000")
    server = ServerProcess(REPO, *args, file_size_limit=1 << 20)  # no file grows past 1 MiB, as on a full disk
    try:
        status, refused = submit(server, bytes(2 << 20))  # its upload cannot be written whole
        assert status == 503 and "cannot keep the file" in refused["error"], refused
        assert str(state) not in refused["error"]
        assert not list((state / "jobs").iterdir())
        # glossaries until the store's file cannot grow: refused as unavailable, never a 500
        for i in range(100):
            entries = {f"term {i} {k}": f"Begriff {k}" for k in range(2000)}
            body = {"name": f"g{i}", "source": "en", "target": "de", "entries": entries}
            status, reply = post_json(server, "/glossaries", body)
            if status != 201:
                break
        assert status == 503 and "did not answer" in reply["error"], (status, reply)
        assert str(state) not in reply["error"]  # the store's file is the operator's, in the log
        assert server.logged("state.sqlite3 did not answer"), "".join(server.log)
    finally:
        server.stop()
    assert not any("Traceback" in line for line in server.log), "".join(server.log)


def test_servers_of_other_models_on_one_state_folder_leave_a_job_to_one_that_translates_it(serve, repo, tmp_path):
    state = str(tmp_path / "state")
    with files_server(serve, tmp_path / "downloads", state_dir=state, running_jobs=1) as translator:
        with serve(repo, state_dir=state, running_jobs=4):  # image classifiers only: no pair to translate
            ids = [submit(translator, document(100))[1]["id"] for _ in range(6)]  # most wait in the queue
            ended = [finished(translator, job_id) for job_id in ids]
    assert all(job["status"] == "done" for job in ended), ended
