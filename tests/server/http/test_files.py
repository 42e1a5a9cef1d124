"""LibreTranslate's file routes on the bundled English -> German translator, spoken with plain
urllib and LibreTranslate's field names (``file``, ``source``, ``target``, ``api_key``): each
format comes back with its structure (paragraphs, slides, runs and their styles, images) and
the translation ``/translate`` gives for the same text; bad files get a 400 and leave the
server healthy; downloads are kept, guarded by the api key, survive a restart and expire."""

from __future__ import annotations

import io
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

import pytest
from lxml import etree

from attnserve.server.service import run_alignment
from tests.support import localization_files as localization
from tests.support import office_files as office
from tests.support import pdf_pages

REPO = Path(__file__).resolve().parents[3] / "models" / "repo"
MAX_FILE_BYTES = 4 << 20
MAX_FILE_CHARS = 3000
PHRASES = ["on Monday, March 3, 2025", "at 3:45 PM", "more than 1,500 miles", "in the 12th century"]
W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
S = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
XLIFF = "{urn:oasis:names:tc:xliff:document:1.2}"


def files_server(serve, directory: Path, **overrides):
    settings = dict(
        http_port=0,
        max_file_bytes=MAX_FILE_BYTES,
        max_file_chars=MAX_FILE_CHARS,
        download_dir=str(directory),
        language_detection="off",
    )
    return serve(REPO, **{**settings, **overrides})


@pytest.fixture(scope="module")
def server(serve, tmp_path_factory):
    with files_server(serve, tmp_path_factory.mktemp("downloads")) as handle:
        yield handle


def call(server, path: str, body: bytes | None = None, content_type: str = "", headers: dict | None = None):
    """(status, body bytes, headers) of one request."""
    request = urllib.request.Request(f"http://{server.http_address}{path}", data=body, headers=headers or {})
    if content_type:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, reply.read(), reply.headers
    except urllib.error.HTTPError as err:
        return err.code, err.read(), err.headers


def translate_file(server, filename: str, content: bytes, headers: dict | None = None, **fields: str):
    body, content_type = office.multipart({"source": "en", "target": "de", **fields}, filename, content)
    status, reply, _ = call(server, "/translate_file", body, content_type, headers)
    return status, json.loads(reply)


def translated(server, filename: str, content: bytes, **fields: str) -> bytes:
    status, reply = translate_file(server, filename, content, **fields)
    assert status == 200, reply
    url = reply["translatedFileUrl"]
    assert url.startswith(f"http://{server.http_address}/download_file/")
    status, data, headers = call(server, url.split(server.http_address, 1)[1])
    stem, dot, suffix = filename.rpartition(".")  # saved as the CLI names it: report.de.docx
    saved_as = f"{stem}.{fields.get('target', 'de')}.{suffix}" if dot else f"{filename}.{fields.get('target', 'de')}"
    assert status == 200 and f'filename="{saved_as.replace(" ", "_")}"' in headers["Content-Disposition"]
    return data


def translate_texts(server, texts: list[str], format: str = "text") -> list[str]:
    body = json.dumps({"q": texts, "source": "en", "target": "de", "format": format}).encode()
    status, reply, _ = call(server, "/translate", body, "application/json")
    assert status == 200, reply
    return json.loads(reply)["translatedText"]


def words(text: str) -> str:
    return " ".join(text.split())


def part(data: bytes, name: str) -> etree._Element:
    with zipfile.ZipFile(io.BytesIO(data)) as package:
        return etree.fromstring(package.read(name))


def test_frontend_settings_report_files(server):
    status, body, _ = call(server, "/frontend/settings")
    settings = json.loads(body)
    assert status == 200 and settings["filesTranslation"] is True
    assert {".txt", ".md", ".html", ".srt", ".docx", ".pptx", ".xlsx", ".odt", ".odp", ".epub", ".pdf", ".xlf"} <= set(
        settings["supportedFilesFormat"]
    )


def test_docx_paragraphs_and_run_styles_with_the_translation_of_translate(server):
    paragraphs = [[("We met ", ""), (PHRASES[0], "b")], [(PHRASES[1], "i")], [("", "")], [(PHRASES[2], "")]]
    out = translated(server, "my report.docx", office.docx(paragraphs))
    expected = translate_texts(server, [f"We met {PHRASES[0]}", PHRASES[1], PHRASES[2]])
    body = part(out, "word/document.xml")
    got = [["".join(r.itertext()) for r in p.iter(f"{W}r")] for p in body.iter(f"{W}p")]
    assert [len(runs) for runs in got] == [2, 1, 1, 1]  # every paragraph and run is still there
    assert [words("".join(runs)) for runs in got] == [*map(words, expected[:2]), "", words(expected[2])]
    styles = [
        [etree.tostring(r.find(f"{W}rPr")) if r.find(f"{W}rPr") is not None else b"" for r in p.iter(f"{W}r")]
        for p in body.iter(f"{W}p")
    ]
    assert styles == [[b"", b'<w:rPr xmlns:w="' + W[1:-1].encode() + b'"><w:b/></w:rPr>'], [styles[1][0]], [b""], [b""]]
    assert b"<w:i/>" in styles[1][0]
    with zipfile.ZipFile(io.BytesIO(out)) as package:
        assert package.read("word/media/image1.png") == office.PNG


def test_docx_run_styles_follow_the_words_they_wrap_by_alignment(server, monkeypatch):
    # the decoder returns its steps' attention, which the engine keeps: there is no aligner session
    assert server.app.registry.models["translator-en-de"].aligner is None
    paragraphs = [
        [("Monday, ", ""), ("March", "b"), (" 3, 2025", "")],
        [("on ", ""), ("Monday", "i"), (", March 3, 2025 at 3:45 PM", "")],
    ]
    body = part(translated(server, "dates.docx", office.docx(paragraphs)), "word/document.xml")
    got = [["".join(r.itertext()) for r in p.iter(f"{W}r")] for p in body.iter(f"{W}p")]
    expected = translate_texts(server, ["Monday, March 3, 2025", "on Monday, March 3, 2025 at 3:45 PM"])
    assert [words("".join(runs)) for runs in got] == [words(e) for e in expected]
    assert expected[0] == "Montag, 3. März 2025"  # "March 3" -> "3. März": the words reorder
    assert got[0] == ["Montag, 3. ", "März ", "2025"]  # the bold run holds März (by proportion it would get "3.")
    html = translate_texts(server, ["Monday, <b>March</b> 3, 2025"], "html")
    assert html == ["Montag, 3. <b>März</b> 2025"]  # placed alike
    assert got[1][1].split() == ["Montag,"]  # the italic run holds the weekday


def test_many_styled_paragraphs_are_aligned_in_several_tasks_as_they_decode(server, monkeypatch):
    monkeypatch.setattr(run_alignment, "ALIGN_BATCH", 2)  # a task per two paragraphs whose sentences are done
    days = (3, 4, 5, 3, 6, 7, 3, 8)  # repeats are aligned once and placed alike
    paragraphs = [[("Monday, ", ""), ("March", "b"), (f" {n}, 2025", "")] for n in days] + [[(PHRASES[1], "")]]
    body = part(translated(server, "dates.docx", office.docx(paragraphs)), "word/document.xml")
    got = [["".join(r.itertext()) for r in p.iter(f"{W}r")] for p in body.iter(f"{W}p")]
    assert [runs[0].split() for runs in got[: len(days)]] == [["Montag,", f"{n}."] for n in days]
    assert [runs[1].split() for runs in got[: len(days)]] == [["März"]] * len(days)
    assert words(got[-1][0]) == words(translate_texts(server, [PHRASES[1]])[0])


def field_result(t: etree._Element) -> bool:
    """Whether the ``w:t`` is a field's result: in a ``w:fldSimple``, or in the run after a complex
    field's ``separate`` (as ``office.docx`` writes them)."""
    run = t.getparent()
    before = run.getprevious()
    separate = before is not None and before.find(f"{W}fldChar[@{W}fldCharType='separate']") is not None
    return run.getparent().tag == f"{W}fldSimple" or separate


def test_docx_fields_keep_the_numbers_word_shows_and_the_words_around_them_are_translated(server):
    # Word shows a field's stored result and does not compute it again when the file opens
    paragraphs = [
        [("Figure ", ""), ("3", "field SEQ Figure \\* ARABIC"), (f": sales {PHRASES[0]}", "")],
        [("As shown in Figure ", ""), ("3", "complex REF _Ref1 \\h"), (" on page 12.", "")],
    ]
    footer = [[("Page ", ""), ("7", "complex PAGE"), (" of ", ""), ("9", "field NUMPAGES")]]
    out = translated(server, "figures.docx", office.docx(paragraphs, footer))
    document, page = part(out, "word/document.xml"), part(out, "word/footer1.xml")
    found = [
        [(t.text, field_result(t)) for t in p.iter(f"{W}t")] for p in [*document.iter(f"{W}p"), *page.iter(f"{W}p")]
    ]
    assert [[text for text, result in p if result] for p in found] == [["3"], ["3"], ["7", "9"]]
    expected = translate_texts(server, [f"Figure : sales {PHRASES[0]}", "As shown in Figure on page 12."])
    around = [" ".join(text or "" for text, result in p if not result) for p in found]
    assert [words(a) for a in around[:2]] == [words(e) for e in expected]
    footer_words = words("".join(text or "" for text, _ in found[2])).split()
    assert {"7", "9"} <= set(footer_words), footer_words  # set off by spaces, however the words around fall


def test_a_20_page_pdf_comes_back_translated_in_place(server):
    source, rects, texts = pdf_pages.phrase_pages(20)
    out = translated(server, "brochure.pdf", source)
    pdf_pages.assert_translated_in_place(source, out, rects, translate_texts(server, texts))


def test_pptx_slides_odt_odp_srt_md_txt_html_and_epub(server):
    expected = dict(zip(PHRASES, translate_texts(server, PHRASES)))
    german = [words(expected[p]) for p in PHRASES]

    slides = part(
        translated(server, "deck.pptx", office.pptx([[[(PHRASES[0], "b")]], [[(PHRASES[1], "")]]])),
        "ppt/slides/slide2.xml",
    )
    assert [words(t.text) for t in slides.iter(f"{A}t")] == [german[1]]

    for kind, data in (
        ("odt", office.odt([[(PHRASES[0], "b")], [(PHRASES[1], "")]])),
        ("odp", office.odp([[[(PHRASES[0], "b")], [(PHRASES[1], "")]]])),
    ):
        content = part(translated(server, f"file.{kind}", data), "content.xml")
        assert [words("".join(p.itertext())) for p in content.iter(f"{TEXT}p")] == german[:2]
        assert [s.get(f"{TEXT}style-name") for s in content.iter(f"{TEXT}span")] == ["B"]

    srt = f"1\n00:00:01,000 --> 00:00:02,000\n{PHRASES[1]}\n\n2\n00:00:03,000 --> 00:00:04,000\n{PHRASES[2]}\n\n"
    assert translated(server, "film.srt", srt.encode()).decode() == (
        f"1\n00:00:01,000 --> 00:00:02,000\n{german[1]}\n\n2\n00:00:03,000 --> 00:00:04,000\n{german[2]}\n\n"
    )
    md = f"# {PHRASES[3]}\n\n- {PHRASES[1]}\n\n```\n{PHRASES[0]}\n```\n"
    assert (
        translated(server, "notes.md", md.encode()).decode()
        == f"# {german[3]}\n\n- {german[1]}\n\n```\n{PHRASES[0]}\n```\n"
    )
    text = f"{PHRASES[0]}\n\n{PHRASES[2]}\n"
    assert translated(server, "a.txt", text.encode()).decode() == translate_texts(server, [text])[0]
    page = f'<html><body><h1 class="x">{PHRASES[3]}</h1><script>var a = "{PHRASES[0]}";</script></body></html>'
    assert translated(server, "page.html", page.encode()).decode() == translate_texts(server, [page], "html")[0]
    book = translated(server, "book.epub", office.epub([f"<p>{PHRASES[1]}</p>"]))
    with zipfile.ZipFile(io.BytesIO(book)) as package:
        assert package.namelist()[0] == "mimetype" and package.read("OEBPS/image1.png") == office.PNG
        assert f"<p>{expected[PHRASES[1]]}</p>" in package.read("OEBPS/chapter0.xhtml").decode()


def test_an_xlsx_and_an_xliff_file_through_translate_file(server):
    expected = translate_texts(server, PHRASES[:2])
    cells = '<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1"><f>1+1</f><v>2</v></c></row>'
    sheet = translated(server, "plan.xlsx", localization.xlsx([PHRASES[0]], cells))
    assert [words(t.text) for t in part(sheet, "xl/sharedStrings.xml").iter(f"{S}t")] == [words(expected[0])]
    assert part(sheet, "xl/worksheets/sheet1.xml").find(f".//{S}f").text == "1+1"
    units = f'<trans-unit id="1"><source>{PHRASES[1]}</source></trans-unit>'
    out = etree.fromstring(translated(server, "app.xliff", localization.xliff12(units)))
    assert [words(t.text) for t in out.iter(f"{XLIFF}target")] == [words(expected[1])]


def test_srt_styling_tags_and_position_overrides_come_back_around_the_translation(server):
    cue = "{}\n00:00:0{},000 --> 00:00:0{},500\n{}\n\n".format
    tagged = [f"<i>{PHRASES[0]}</i>", f'<font color="#ff0000">{PHRASES[1]}</font>']
    srt = cue(1, 1, 1, tagged[0]) + cue(2, 2, 2, "{\\an8}" + PHRASES[3]) + cue(3, 3, 3, tagged[1])
    html = translate_texts(server, tagged, "html")
    assert html[0].startswith("<i>") and "</font>" in html[1]
    plain = translate_texts(server, [PHRASES[3]])[0]  # a cue without tags reads as in the text mode
    assert translated(server, "film.srt", srt.encode()).decode() == (
        cue(1, 1, 1, html[0]) + cue(2, 2, 2, "{\\an8}" + plain) + cue(3, 3, 3, html[1])
    )


def test_a_markdown_file_is_translated_as_translate_does_markdown_and_its_front_matter_is_kept(server):
    # tables, nested list items, a fence inside a longer fence and a fence in a block quote, as
    # CommonMark reads them, not line by line: cells keep their pipes, code comes back as sent
    expected = dict(zip(PHRASES, translate_texts(server, PHRASES)))
    front = f"---\ntitle: {PHRASES[0]}\n---\n"
    code = f"````markdown\n```python\nx = '{PHRASES[0]}'\n```\n````\n\n> ```bash\n> echo '{PHRASES[1]}'\n> ```\n"
    body = (
        f"| Date | Time |\n|---|---|\n| {PHRASES[0]} | {PHRASES[1]} |\n\n- {PHRASES[2]}\n    - {PHRASES[3]}\n\n{code}"
    )
    out = translated(server, "notes.md", (front + body).encode()).decode()
    assert out == front + translate_texts(server, [body], "markdown")[0]
    rows = out.split("\n")
    cells = [cell.strip() for cell in rows[5].strip("|").split("|")]
    assert rows[4] == "|---|---|" and cells == [expected[PHRASES[0]], expected[PHRASES[1]]]
    assert words(rows[8][6:]) == words(expected[PHRASES[3]]) and rows[8].startswith("    - ")
    assert out.endswith("\n\n" + code)


@pytest.mark.parametrize(
    ("filename", "content", "message"),
    [
        ("scan.pdf", b"%PDF-1.7\n", "the file is not a readable PDF"),
        ("broken.docx", office.docx([[("x", "")]])[:300], "not a valid .docx"),
        ("bomb.docx", office.zip_bomb(40 << 20), "unpacks to"),
        ("empty.docx", office.docx([[("", "")]] * 100_000), "no text to translate"),
        ("big.txt", b"a" * (MAX_FILE_BYTES + 1), "at most 4,194,304 (--max-file-bytes)"),
        ("long.txt", ("three o'clock. " * 400).encode(), "at most 3,000 per file (--max-file-chars)"),
        (
            "typo.srt",
            f"1\n00:00:01,000 --> 00:00:02,000\n{PHRASES[0]}\n\n2\n00:00:03,000 -> 00:00:04,000\nBye.\n".encode(),
            "line 6 ('00:00:03,000 -> 00:00:04,000'), after the index line '2', is not a timing line",
        ),
    ],
)
def test_bad_files_get_400_and_the_server_stays_healthy(server, filename, content, message):
    status, reply = translate_file(server, filename, content)
    assert status == 400 and message in reply["error"], reply
    assert translate_texts(server, [PHRASES[1]])[0].strip()  # the server still translates


@pytest.mark.parametrize(
    "filename, saved_as",
    [
        ("报告.txt", "报告.de.txt"),
        ("März-Bericht.txt", "März-Bericht.de.txt"),
        ("my notes ü.txt", "my_notes_ü.de.txt"),
        ("Q" * 300 + ".txt", "Q" * 113 + ".de.txt"),  # a long name is cut in its stem, never in its language
        # a browser sends my "report".txt as my %22report%22.txt (and CR, LF as %0D, %0A): no "22" in the name
        ("my %22report%22.txt", "my_report_.de.txt"),
        ("two%0D%0Alines.txt", "two_lines.de.txt"),
        ("50%20off.txt", "50_20off.de.txt"),  # browsers escape nothing else, not even "%": sent as typed
        ("🙂.txt", "file.de.txt"),  # a stem of symbols alone: its extension stays
        ("???.md", "file.de.md"),
    ],
    ids=[
        "chinese",
        "german",
        "spaces",
        "long",
        "browser-quotes",
        "browser-newline",
        "other-percent",
        "emoji",
        "symbols",
    ],
)
def test_a_file_name_in_any_script_comes_back_as_it_was_sent(server, filename, saved_as):
    # letters outside ASCII were replaced, and a name of them alone was lost: 报告.txt came back as de.txt
    status, reply = translate_file(server, filename, PHRASES[0].encode())
    assert status == 200, reply
    status, data, headers = call(server, reply["translatedFileUrl"].split(server.http_address, 1)[1])
    assert status == 200 and f"filename*=UTF-8''{urllib.parse.quote(saved_as)}" in headers["Content-Disposition"]


@pytest.mark.parametrize("target, saved_as", [("DE", "a.de.txt"), ("de-de", "a.de-DE.txt")])
def test_a_download_names_its_language_as_bcp_47_spells_it(server, target, saved_as):
    status, reply = translate_file(server, "a.txt", PHRASES[0].encode(), target=target)
    assert status == 200, reply
    status, data, headers = call(server, reply["translatedFileUrl"].split(server.http_address, 1)[1])
    assert status == 200 and f"filename*=UTF-8''{saved_as}" in headers["Content-Disposition"]


def test_missing_fields_are_named(server):
    status, reply = translate_file(server, "a.txt", PHRASES[0].encode(), target="")
    assert (status, reply["error"]) == (400, "Invalid request: missing target parameter")
    status, body, _ = call(server, "/translate_file", b"{}", "application/json")
    assert status == 400 and "multipart/form-data" in json.loads(body)["error"]


def test_downloads_belong_to_the_key_that_asked(serve, tmp_path):
    with files_server(serve, tmp_path, auth_tokens="key-one,key-two") as keyed:
        status, reply = translate_file(keyed, "a.txt", PHRASES[1].encode())
        assert (status, reply["error"]) == (400, "Please contact the server operator to get an API key")
        status, reply = translate_file(keyed, "a.txt", PHRASES[1].encode(), api_key="key-one")
        path = reply["translatedFileUrl"].split(keyed.http_address, 1)[1]
        status, body, _ = call(keyed, f"{path}?api_key=key-two")
        assert status == 403 and b"another key" in body
        status, body, _ = call(keyed, path)
        assert status == 403 and b"with the api key it was translated with" in body  # no key sent: not "another"
        status, data, _ = call(keyed, path, headers={"Authorization": "Bearer key-one"})
        assert status == 200 and data.decode() == translate_texts_keyed(keyed, PHRASES[1])


def translate_texts_keyed(server, text: str) -> str:
    body = json.dumps({"q": text, "source": "en", "target": "de", "api_key": "key-one"}).encode()
    return json.loads(call(server, "/translate", body, "application/json")[1])["translatedText"]


def test_a_restart_keeps_the_downloads_until_they_expire(serve, tmp_path):
    with files_server(serve, tmp_path, download_retention_s=3.0) as first:
        _, reply = translate_file(first, "a.txt", PHRASES[1].encode())
        name = reply["translatedFileUrl"].rsplit("/", 1)[1]
        expected = call(first, f"/download_file/{name}")[1]
    assert (tmp_path / name).exists()
    with files_server(serve, tmp_path, download_retention_s=3.0) as second:
        assert call(second, f"/download_file/{name}")[1] == expected  # promised before the restart, kept
        time.sleep(3.2)
        status, body, _ = call(second, f"/download_file/{name}")
        assert status == 404 and "expired" in json.loads(body)["error"]
        assert not (tmp_path / name).exists()
        guessed = call(second, "/download_file/" + "A" * 32 + ".a.txt")
        assert guessed[0] == 404


def test_the_download_url_starts_with_the_public_url_and_expired_files_are_swept(serve, tmp_path):
    public = "https://translate.example.org/tools"
    with files_server(serve, tmp_path, public_url=public, download_retention_s=1.0) as server:
        status, reply = translate_file(server, "a.txt", PHRASES[1].encode(), headers={"Host": "evil.example"})
        assert status == 200 and reply["translatedFileUrl"].startswith(f"{public}/download_file/"), reply
        name = reply["translatedFileUrl"].rsplit("/", 1)[1]
        assert call(server, f"/download_file/{name}")[0] == 200
        deadline = time.monotonic() + 10
        while (tmp_path / name).exists() and time.monotonic() < deadline:
            time.sleep(0.1)  # no request: the timer deletes it
        assert not (tmp_path / name).exists() and not (tmp_path / f"{name}.json").exists()


def test_without_a_public_url_the_download_url_follows_the_host_header(server):
    status, reply = translate_file(server, "a.txt", PHRASES[1].encode(), headers={"Host": "example.org:8080"})
    assert status == 200 and reply["translatedFileUrl"].startswith("http://example.org:8080/download_file/"), reply
