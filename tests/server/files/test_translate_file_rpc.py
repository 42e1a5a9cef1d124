"""attnserve.v1 ``TranslateFile`` on the bundled translator: progress streamed (sentences done /
total) and then the file, through the Python client and ``attnserve-client translate-file``."""

from __future__ import annotations

import io
import json
import sys
import time
import zipfile
from pathlib import Path

import grpc
import pytest
from fpdf import FPDF
from lxml import etree

from attnserve.benchmarks.pdfs import A4
from attnserve.client import AttnServeError
from attnserve.client.cli import ProgressBar
from attnserve.client.cli import main as client_main
from attnserve.server.service import sentence_flow
from tests.support import localization_files as localization
from tests.support import office_files as office
from tests.support import pdf_pages

REPO = Path(__file__).resolve().parents[3] / "models" / "repo"
LINES = [f"on Monday, March {day}, 2025 at {day % 12 + 1}:15 PM" for day in range(1, 29)]  # 28 distinct
W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


@pytest.fixture(scope="module")
def server(serve):
    with serve(REPO, language_detection="off") as handle:
        yield handle


def test_progress_then_the_file_as_translate_gives_it(server, tmp_path):
    text = "\n".join(LINES + LINES[:4]) + "\n"  # 32 lines; 4 repeats decoded once, counted for each
    path = tmp_path / "dates.txt"
    path.write_text(text)
    events: list[tuple[int, int]] = []
    with server.client(timeout=120) as client:
        done = client.translate_file(path, "de", "en", progress=lambda d, t: events.append((d, t)))
        (expected,) = client.translate(text, target_language="de", source_language="en")
    assert done.content.decode() == expected.text
    # named as the HTTP doors and a job's result name it: written under it, it leaves dates.txt alone
    assert (done.filename, done.model, done.sentences) == ("dates.de.txt", "translator-en-de", 32)
    assert (done.source_language, done.target_language, done.characters) == ("en", "de", len(text))
    assert events[0] == (0, 32) and events[-1] == (32, 32)
    # Steps that finish together reach the client as their latest value (the door sends the newest), so how
    # many arrive depends on timing; that the service tells a step per engine call: test_service_documents.
    assert [d for d, _ in events] == sorted(d for d, _ in events)


def test_the_translation_is_named_for_its_language_and_safely(server):
    """A raw TranslateFile call: the reply names the translation NAME.<target>.EXT, with the language
    the model resolved to when the request names none, and a name that is safe to write."""
    from attnserve.protos.attnserve.v1 import inference_pb2 as pb
    from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

    content = "\n".join(LINES[:2]).encode()
    requests = {
        "memo.de.txt": pb.TranslateFileRequest(content=content, filename="memo.txt", target_language="de"),
        "notes.de.txt": pb.TranslateFileRequest(content=content, filename="notes.txt"),  # the pair picks de
        "x.de.txt": pb.TranslateFileRequest(content=content, filename="../../x.txt", target_language="de"),
    }
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.InferenceServiceStub(channel)
        named = {want: list(stub.TranslateFile(r, timeout=60))[-1].done.filename for want, r in requests.items()}
    assert named == {want: want for want in requests}


def test_a_docx_through_the_rpc_keeps_its_runs(server, tmp_path):
    path = tmp_path / "memo.docx"
    path.write_bytes(office.docx([[("We meet ", ""), (LINES[0], "b")], [(LINES[1], "")]]))
    with server.client(timeout=120) as client:
        done = client.translate_file(path, "de", "en")
        expected = [t.text for t in client.translate([f"We meet {LINES[0]}", LINES[1]], target_language="de")]
    with zipfile.ZipFile(io.BytesIO(done.content)) as package:
        body = etree.fromstring(package.read("word/document.xml"))
        assert package.read("word/media/image1.png") == office.PNG
    runs = [["".join(r.itertext()) for r in p.iter(f"{W}r")] for p in body.iter(f"{W}p")]
    assert [len(r) for r in runs] == [2, 1]
    assert [" ".join("".join(r).split()) for r in runs] == [" ".join(t.split()) for t in expected]
    assert done.media_type.endswith("wordprocessingml.document")


def test_an_xlsx_and_an_xliff_file_through_the_rpc(server, tmp_path):
    cells = '<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1"><v>7</v></c></row>'
    workbook = tmp_path / "plan.xlsx"
    workbook.write_bytes(localization.xlsx([LINES[0]], cells))
    strings = tmp_path / "app.xlf"
    strings.write_bytes(localization.xliff21(f'<unit id="u"><segment><source>{LINES[1]}</source></segment></unit>'))
    with server.client(timeout=120) as client:
        sheet, units = client.translate_file(workbook, "de", "en"), client.translate_file(strings, "de", "en")
        expected = [t.text for t in client.translate(LINES[:2], target_language="de")]
    with zipfile.ZipFile(io.BytesIO(sheet.content)) as package:
        assert f"<t>{expected[0]}</t>" in package.read("xl/sharedStrings.xml").decode()
        assert "<v>7</v>" in package.read("xl/worksheets/sheet1.xml").decode()
    assert sheet.media_type.endswith("spreadsheetml.sheet") and units.media_type.startswith("application/xliff+xml")
    assert f"<target>{expected[1]}</target>" in units.content.decode()


def test_a_file_split_in_pieces_comes_back_byte_for_byte_as_split_whole(server, tmp_path, monkeypatch):
    # 56 paragraphs, a third in two runs (placed by alignment), each repeated 28 paragraphs on:
    # in pieces of 150-300 characters, the later pieces are split while the first ones decode,
    # and a repeat takes the result of its first place, in another piece
    paragraphs = [
        [("We meet ", ""), (LINES[i % 28], "b")] if i % 28 % 3 == 0 else [(LINES[i % 28] + ".", "")] for i in range(56)
    ]
    path = tmp_path / "memo.docx"
    path.write_bytes(office.docx(paragraphs))

    def translated(first: int, most: int):
        monkeypatch.setattr(sentence_flow, "FIRST_PIECE_CHARS", first)
        monkeypatch.setattr(sentence_flow, "MOST_PIECE_CHARS", most)
        events: list[tuple[int, int]] = []
        with server.client(timeout=120) as client:
            return client.translate_file(path, "de", "en", progress=lambda d, t: events.append((d, t))), events

    whole, told_whole = translated(10**9, 10**9)
    pieces, told_pieces = translated(150, 300)
    texts = [" ".join(text for text, _ in p) for p in paragraphs]
    assert len(sentence_flow.pieces(texts, 150, 300)) >= 8
    assert pieces.content == whole.content and pieces.sentences == whole.sentences == 56
    assert told_whole[0] == (0, 56) and told_pieces[-1] == (56, 56)  # the whole's total is known before it decodes
    assert [d for d, _ in told_pieces] == sorted(d for d, _ in told_pieces)
    assert all(t in (0, 56) for _, t in told_pieces)  # 0: not known yet, never a guess


def test_a_pdfs_link_lands_on_its_translated_words(server, tmp_path):
    """A link over "March 3, 2025" in a PDF: a click on the translation lands on "3. März 2025"."""
    pdf = FPDF(unit="pt", format=A4)
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    pdf.set_xy(56, 56)
    pdf.write(14, "on Monday, ")
    pdf.write(14, "March 3, 2025", link="https://example.com/")
    pdf.write(14, " at 4:15 PM")
    path = tmp_path / "invitation.pdf"
    path.write_bytes(bytes(pdf.output()))
    with server.client(timeout=120) as client:
        done = client.translate_file(path, "de", "en")
    assert [t.text for t in pdf_pages.pages(done.content)[0].texts] == ["am Montag, 3. März 2025 um 16:15 Uhr"]
    assert pdf_pages.links(done.content) == [("https://example.com/", ["3. März 2025"])]


def test_a_20_page_pdf_through_the_rpc_comes_back_translated_in_place(server, tmp_path):
    source, rects, texts = pdf_pages.phrase_pages(20)
    path = tmp_path / "brochure.pdf"
    path.write_bytes(source)
    with server.client(timeout=120) as client:
        done = client.translate_file(path, "de", "en")
        expected = [t.text for t in client.translate(texts, target_language="de", source_language="en")]
    assert done.media_type == "application/pdf" and done.characters == sum(map(len, texts))
    pdf_pages.assert_translated_in_place(source, done.content, rects, expected)


def test_bad_files_are_invalid_argument(server, tmp_path):
    for name, data in (("a.pdf", b"%PDF"), ("bomb.docx", office.zip_bomb(200 << 20))):
        (tmp_path / name).write_bytes(data)
        with server.client() as client, pytest.raises(AttnServeError) as caught:
            client.translate_file(tmp_path / name, "de", "en")
        assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert ("not a readable PDF" if name.endswith("pdf") else "unpacks to") in caught.value.details


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_cli_writes_the_file_and_draws_a_progress_bar(server, tmp_path, capsys, monkeypatch):
    source = tmp_path / "notes.md"
    source.write_text("# " + LINES[0] + "\n\n" + "\n".join(f"- {line}" for line in LINES[1:9]) + "\n")
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert client_main(["--address", server.address, "translate-file", str(source), "--to", "de", "--from", "en"]) == 0
    out = tmp_path / "notes.de.md"
    lines = out.read_text().splitlines()
    assert lines[0].startswith("# ") and lines[2].startswith("- ") and len(lines) == 10
    assert str(out) in capsys.readouterr().out
    assert "notes.md [" + "#" * 30 + "] 9/9 sentences" in terminal.getvalue()

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert (
        client_main(["--address", server.address, "translate-file", str(tmp_path / "missing.docx"), "--to", "de"]) == 2
    )
    (tmp_path / "x.pdf").write_bytes(b"%PDF")
    assert client_main(["--address", server.address, "translate-file", str(tmp_path / "x.pdf"), "--to", "de"]) == 1
    assert "INVALID_ARGUMENT" in sys.stderr.getvalue() and "PDF" in sys.stderr.getvalue()


def test_the_progress_bar_shows_sentences_done_before_the_total_is_known(monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    bar = ProgressBar("big.docx")
    bar(40, 0)  # a large file's first sentences, decoded while the rest of it is split
    assert terminal.getvalue().endswith("big.docx [" + "." * 30 + "] 40/? sentences")
    bar(40, 400)
    assert terminal.getvalue().endswith("big.docx [" + "#" * 3 + "." * 27 + "] 40/400 sentences")


def test_a_server_spawns_a_file_worker_as_it_starts_and_its_first_file_spawns_none(serve, tmp_path):
    with serve(REPO, language_detection="off", file_workers=1) as fresh:
        workers = fresh.app.files.workers
        assert workers.spawned == 1  # at start, before any file
        deadline = time.monotonic() + 60
        while not workers.ready_workers:  # its imports, in the background
            assert time.monotonic() < deadline, "the file worker spawned at start was not ready in 60 s"
            time.sleep(0.05)
        path = tmp_path / "dates.txt"
        path.write_text(LINES[0])
        with fresh.client(timeout=120) as client:
            assert client.translate_file(path, "de", "en").content
        assert workers.spawned == 1


def test_a_file_stream_cancelled_as_it_waits_for_progress_leaves_no_task_behind(server):
    import asyncio

    from attnserve.protos.attnserve.v1 import inference_pb2 as pb
    from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

    lines = [f"on {day} March {year} at {day % 12 + 1}:15 PM" for year in range(2001, 2013) for day in range(1, 29)]
    request = pb.TranslateFileRequest(
        content="\n".join(lines).encode(), filename="dates.txt", source_language="en", target_language="de"
    )

    async def waiting() -> list[str]:  # the door's waits for the file's progress still pending
        return [repr(t) for t in asyncio.all_tasks() if "Queue.get" in repr(t)]

    with grpc.insecure_channel(server.address) as channel:
        call = pb_grpc.InferenceServiceStub(channel).TranslateFile(request, timeout=60)
        assert next(call).progress.sentences_total == len(lines)  # decoding under way
        call.cancel()
    deadline = time.monotonic() + 5
    while (left := server.loop_thread.run(waiting())) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == []


def test_a_file_for_a_model_without_languages_and_no_target_keeps_its_name(serve, tmp_path):
    """A model that declares no languages, asked for no target: there is no language to name the
    translation for, so it is named as sent (as a file job's result is), not ``memo..txt``."""
    from attnserve.protos.attnserve.v1 import inference_pb2 as pb
    from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

    model_dir = tmp_path / "repo" / "plain"
    model_dir.mkdir(parents=True)
    for path in (REPO / "translator-en-de").iterdir():
        if path.name != "model.json":
            (model_dir / path.name).symlink_to(path)
    manifest = json.loads((REPO / "translator-en-de" / "model.json").read_text())
    manifest["name"] = "plain"
    del manifest["languages"]
    (model_dir / "model.json").write_text(json.dumps(manifest))
    request = pb.TranslateFileRequest(content="\n".join(LINES[:2]).encode(), filename="memo.txt", model="plain")
    with serve(tmp_path / "repo", language_detection="off") as server, grpc.insecure_channel(server.address) as channel:
        done = list(pb_grpc.InferenceServiceStub(channel).TranslateFile(request, timeout=60))[-1].done
    assert (done.filename, done.target_language, done.model) == ("memo.txt", "", "plain")
