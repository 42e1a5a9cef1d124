"""DeepL's v2 API (``server/doors/http/deepl_routes.py``) with DeepL's official Python client,
unchanged, pointed at a live server with the bundled English -> German translator: text and
html, languages, a glossary created and used (and by every other door), a .docx through
``/v2/document``; the keys, the per-key bounds and errors in DeepL's shapes."""

from __future__ import annotations

import io
import json
import zipfile

import deepl
import grpc
import openpyxl
import pytest
from lxml import etree

from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
from tests.server.http.test_files import call, files_server, translate_file
from tests.support import localization_files as localization
from tests.support import office_files as office

KEYS = "alice,bob"


@pytest.fixture(scope="module")
def server(serve, tmp_path_factory):
    state = str(tmp_path_factory.mktemp("state"))
    overrides = dict(state_dir=state, auth_tokens=KEYS, max_glossaries_per_key=3)
    with files_server(serve, tmp_path_factory.mktemp("downloads"), **overrides) as handle:
        yield handle


def client(server, key: str = "alice") -> deepl.Translator:
    return deepl.Translator(key, server_url=f"http://{server.http_address}")


def test_the_client_translates_texts_and_html(server):
    translator = client(server)
    results = translator.translate_text(["Monday, March 3, 2025", "at 3:45 PM"], source_lang="EN", target_lang="DE")
    assert [r.text for r in results] == ["Montag, 3. März 2025", "um 15:45 Uhr"]
    assert results[0].detected_source_lang == "EN" and results[0].billed_characters == 21
    html = translator.translate_text("<p>Monday, March 3, 2025</p>", target_lang="DE", tag_handling="html")
    assert html.text == "<p>Montag, 3. März 2025</p>" and html.detected_source_lang == "EN"
    ignored = translator.translate_text("at 3:45 PM", target_lang="DE", formality="prefer_more", context="a memo")
    assert ignored.text == "um 15:45 Uhr"  # options attnserve does not have are accepted and ignored


def test_formality_a_target_lacks_is_refused_as_deepl_refuses_it(server, tmp_path):
    """No served target has formality (/v2/languages: supports_formality false): DeepL answers
    ``more`` or ``less`` for such a target with a 400, and only its ``prefer_`` values fall back
    to the default; a translation in the wrong register must not come back as if asked."""
    translator = client(server)
    assert not any(lang.supports_formality for lang in translator.get_target_languages())
    for formality in ("more", "less", deepl.Formality.MORE):
        with pytest.raises(deepl.DeepLException, match="'formality' is not supported for given 'target_lang'") as err:
            translator.translate_text("at 3:45 PM", target_lang="DE", formality=formality)
        assert err.value.http_status_code == 400
    for formality in ("default", "prefer_less", deepl.Formality.PREFER_MORE):
        assert translator.translate_text("at 3:45 PM", target_lang="DE", formality=formality).text == "um 15:45 Uhr"
    with pytest.raises(deepl.DeepLException, match="Value for 'formality' not supported"):
        translator.translate_text("at 3:45 PM", target_lang="DE", formality="polite")
    # model_type: each pair has one model here, whichever DeepL value is asked; a misspelt one is DeepL's 400
    assert (
        translator.translate_text("at 3:45 PM", target_lang="DE", model_type="latency_optimized").text == "um 15:45 Uhr"
    )
    with pytest.raises(deepl.DeepLException, match="Value for 'model_type' not supported"):
        translator.translate_text("at 3:45 PM", target_lang="DE", model_type="quality")
    source = tmp_path / "memo.docx"
    source.write_bytes(office.docx([[("at 3:45 PM", "")]]))
    with pytest.raises(deepl.DeepLException, match="'formality' is not supported for given 'target_lang'"):
        translator.translate_document_from_filepath(
            source, tmp_path / "memo.de.docx", target_lang="DE", formality="less"
        )


def test_blank_entries_of_a_batch_come_back_as_sent(server):
    # DeepL answers [""] with an empty translation; tables of strings (an app's messages, a
    # spreadsheet column) hold blank entries, and the other entries must still be translated
    translator = client(server)
    results = translator.translate_text(["Monday, March 3, 2025", "", "  ", "at 3:45 PM"], target_lang="DE")
    assert [r.text for r in results] == ["Montag, 3. März 2025", "", "  ", "um 15:45 Uhr"]
    assert [r.detected_source_lang for r in results] == ["EN"] * 4


def test_the_client_lists_languages_and_usage(server):
    translator = client(server)
    assert [(lang.code, lang.name) for lang in translator.get_source_languages()] == [("EN", "English")]
    assert [lang.code for lang in translator.get_target_languages()] == ["DE"]
    assert [(p.source_lang, p.target_lang) for p in translator.get_glossary_languages()] == [("en", "de")]
    assert not translator.get_usage().any_limit_reached


def test_a_glossary_is_created_used_listed_and_deleted_per_key(server):
    translator = client(server)
    glossary = translator.create_glossary("dates", "EN", "DE", {"Monday": "Wochenbeginn", "March": "MÄRZ"})
    assert glossary.entry_count == 2 and glossary.ready and glossary.source_lang == "EN"
    done = translator.translate_text("Monday, March 3, 2025", source_lang="EN", target_lang="DE", glossary=glossary)
    assert done.text == "Wochenbeginn, 3. MÄRZ 2025"
    assert translator.get_glossary_entries(glossary) == {"Monday": "Wochenbeginn", "March": "MÄRZ"}
    assert glossary.glossary_id in [g.glossary_id for g in translator.list_glossaries()]
    other = client(server, "bob")
    assert glossary.glossary_id not in [g.glossary_id for g in other.list_glossaries()]
    with pytest.raises(deepl.GlossaryNotFoundException):
        other.get_glossary(glossary.glossary_id)
    with pytest.raises(deepl.DeepLException, match="no glossary"):  # bob cannot use alice's glossary either
        other.translate_text("Monday", source_lang="EN", target_lang="DE", glossary=glossary.glossary_id)
    translator.delete_glossary(glossary)
    with pytest.raises(deepl.GlossaryNotFoundException):
        translator.get_glossary(glossary.glossary_id)


def test_a_csv_glossary_and_the_per_key_bound(server):
    translator = client(server, "bob")
    made = [translator.create_glossary_from_csv(f"g{i}", "EN", "DE", "PM,p. m.\n") for i in range(3)]
    with pytest.raises(deepl.QuotaExceededException, match="max-glossaries-per-key"):
        translator.create_glossary_from_csv("one too many", "EN", "DE", "PM,p. m.\n")
    for glossary in made:
        translator.delete_glossary(glossary)


def test_a_stored_glossary_is_used_by_v1_kserve_and_libretranslate(server):
    glossary = client(server).create_glossary("one", "EN", "DE", {"Monday": "Wochenbeginn"})
    text, bearer = "Monday, March 3, 2025", {"Authorization": "Bearer alice"}
    with grpc.insecure_channel(server.address) as channel:
        reply = pb_grpc.InferenceServiceStub(channel).Translate(
            pb.TranslateRequest(
                texts=[text],
                glossary_id=glossary.glossary_id,
                options=pb.DecodingOptions(source_language="en", target_language="de"),
            ),
            metadata=(("authorization", "Bearer alice"),),
        )
    assert reply.translations[0].hypotheses[0].text == "Wochenbeginn, 3. März 2025"
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [text]}]}
    body["parameters"] = {"glossary_id": glossary.glossary_id}
    status, reply, _ = call(
        server, "/v2/models/translator-en-de/infer", json.dumps(body).encode(), "application/json", bearer
    )
    assert status == 200 and json.loads(reply)["outputs"][0]["data"] == ["Wochenbeginn, 3. März 2025"], reply
    fields = {"q": text, "source": "en", "target": "de", "glossary_id": glossary.glossary_id, "api_key": "alice"}
    status, reply, _ = call(server, "/translate", json.dumps(fields).encode(), "application/json")
    assert status == 200 and json.loads(reply)["translatedText"] == "Wochenbeginn, 3. März 2025", reply
    fields["api_key"] = "bob"  # another key's glossary is not found
    status, reply, _ = call(server, "/translate", json.dumps(fields).encode(), "application/json")
    assert status == 404, reply


def test_a_docx_is_translated_through_the_document_routes(server, tmp_path):
    source = tmp_path / "memo.docx"
    source.write_bytes(office.docx([[("Monday, March 3, 2025", "")], [("at 3:45 PM", "")]]))
    out = tmp_path / "memo.de.docx"
    client(server).translate_document_from_filepath(source, out, source_lang="EN", target_lang="DE")
    with zipfile.ZipFile(io.BytesIO(out.read_bytes())) as package:
        xml = package.read("word/document.xml").decode()
    assert "Montag, 3. März 2025" in xml and "um 15:45 Uhr" in xml


def test_a_done_documents_status_bills_the_characters_translated(server, tmp_path):
    """``billed_characters`` of a done document, as DeepL's client reads it: the characters of text
    its translation counted (what TranslateFile's summary reports as ``characters``), not 0."""
    paragraphs = ["Monday, March 3, 2025", "at 3:45 PM"]
    sent = office.docx([[(text, "")] for text in paragraphs])
    translator = client(server)
    handle = translator.translate_document_upload(sent, target_lang="DE", source_lang="EN", filename="memo.docx")
    assert translator.translate_document_wait_until_done(handle).done
    status = translator.translate_document_get_status(handle)
    assert status.billed_characters == sum(map(len, paragraphs)) == 31
    (tmp_path / "memo.docx").write_bytes(sent)
    with server.client(timeout=60, token="alice") as v1:
        assert v1.translate_file(tmp_path / "memo.docx", "de", "en").characters == 31


def test_an_html_documents_markup_is_not_billed(server):
    """A page whose styles and attributes are far over --max-file-chars (3,000 here) is
    translated, and billed its text's characters, not its source's."""
    style = "color: #333333; font-family: Georgia, serif; " * 100
    page = f'<html><head><style>p {{ {style} }}</style></head><body><p style="{style}">Monday, March 3, 2025</p>'
    translator = client(server)
    handle = translator.translate_document_upload(page.encode(), target_lang="DE", filename="page.html")
    assert translator.translate_document_wait_until_done(handle).done
    assert translator.translate_document_get_status(handle).billed_characters == 21 < 3000 < len(page)
    assert translator.translate_document_download(handle).content.decode() == page.replace(
        "Monday, March 3, 2025", "Montag, 3. März 2025"
    )


def test_output_format_is_the_documents_own_or_refused(server, tmp_path):
    """A document comes back in its own format. DeepL's client asks for the output path's format
    (``output_format``): a .docx saved as .pdf is a 400 naming it, never a .docx named .pdf; .htm
    and .html are one format."""
    source = tmp_path / "memo.docx"
    source.write_bytes(office.docx([[("Monday, March 3, 2025", "")]]))
    translator = client(server)
    with pytest.raises(deepl.DeepLException, match="output_format.*'pdf'.*own format [(].docx"):
        translator.translate_document_from_filepath(source, tmp_path / "memo.pdf", target_lang="DE")
    with open(source, "rb") as sent:
        out = io.BytesIO()
        translator.translate_document(sent, out, target_lang="DE", output_format="DOCX")
    assert "Montag, 3. März 2025" in _document_xml(out.getvalue())
    page = tmp_path / "page.htm"
    page.write_text("<p>Monday, March 3, 2025</p>")
    translator.translate_document_from_filepath(page, tmp_path / "page.de.html", target_lang="DE")
    assert (tmp_path / "page.de.html").read_text() == "<p>Montag, 3. März 2025</p>"


def test_a_utf16_subtitle_file_comes_back_translated_in_utf16(server, tmp_path):
    """Subtitle editors and Notepad on Windows save "Unicode" as UTF-16 with a byte-order mark."""
    source = tmp_path / "talk.srt"
    source.write_bytes("\ufeff1\r\n00:00:01,000 --> 00:00:04,000\r\nMonday, March 3, 2025\r\n".encode("utf-16-le"))
    out = tmp_path / "talk.de.srt"
    client(server).translate_document_from_filepath(source, out, source_lang="EN", target_lang="DE")
    expected = "\ufeff1\r\n00:00:01,000 --> 00:00:04,000\r\nMontag, 3. März 2025\r\n"
    assert out.read_bytes() == expected.encode("utf-16-le")


@pytest.mark.parametrize("filename", ["🙂.txt", "???.txt", "(1).txt"])
def test_a_document_named_with_symbols_alone_is_translated(server, filename):
    """A name whose stem is only emoji or punctuation keeps its extension, which picks the
    file's reader: the upload is not accepted and then failed as a file of no format."""
    out = io.BytesIO()
    client(server).translate_document(b"Monday, March 3, 2025\n", out, target_lang="DE", filename=filename)
    assert out.getvalue() == "Montag, 3. März 2025\n".encode()


@pytest.mark.parametrize(
    ("languages", "field"), [({"target_lang": "FR"}, "target_lang"), ({"source_lang": "FR"}, "source_lang")]
)
def test_a_document_for_a_language_no_model_knows_names_that_field(server, languages, field):
    """As /v2/translate answers: DeepL's clients are told which of the two languages is not served."""
    with pytest.raises(deepl.DeepLException, match=f"Value for '{field}' not supported: .*'FR'"):
        client(server).translate_document(
            b"Monday.\n", io.BytesIO(), filename="memo.txt", **{"target_lang": "DE", **languages}
        )


def test_a_docx_is_translated_with_a_stored_glossary_and_an_unknown_one_is_refused(server, tmp_path):
    translator = client(server)
    glossary = translator.create_glossary("days", "EN", "DE", {"Monday": "Wochenbeginn"})
    source = tmp_path / "memo.docx"
    source.write_bytes(office.docx([[("Monday, March 3, 2025", "")], [("at 3:45 PM", "")]]))
    plain, with_glossary = tmp_path / "plain.docx", tmp_path / "glossary.docx"
    translator.translate_document_from_filepath(source, plain, source_lang="EN", target_lang="DE")
    translator.translate_document_from_filepath(
        source, with_glossary, source_lang="EN", target_lang="DE", glossary=glossary
    )
    plain_xml, glossary_xml = (_document_xml(p) for p in (plain, with_glossary))
    assert "Montag, 3. März 2025" in plain_xml and "Wochenbeginn" not in plain_xml
    assert "Wochenbeginn, 3. März 2025" in glossary_xml and "um 15:45 Uhr" in glossary_xml
    key = {"Authorization": "DeepL-Auth-Key alice"}
    for fields, status_code, words in (
        ({"glossary_id": "no-such-glossary"}, 404, "no glossary"),
        ({"glossary_id": glossary.glossary_id, "source_lang": ""}, 400, "name the source language"),
        ({"glossary_id": glossary.glossary_id, "target_lang": "FR"}, 400, "is for en -> de"),
    ):
        form = {"source_lang": "EN", "target_lang": "DE"} | fields
        body, content_type = office.multipart({k: v for k, v in form.items() if v}, "memo.docx", source.read_bytes())
        status, reply, _ = call(server, "/v2/document", body, content_type, key)
        assert status == status_code and words in json.loads(reply)["message"], reply
    with pytest.raises(deepl.DeepLException, match="no glossary"):  # bob's key does not find alice's glossary
        client(server, "bob").translate_document_from_filepath(
            source, tmp_path / "bob.docx", source_lang="EN", target_lang="DE", glossary=glossary.glossary_id
        )
    # LibreTranslate's file route, its key in the form: alice's glossary is found with alice's key only
    status, reply = translate_file(
        server, "memo.docx", source.read_bytes(), api_key="bob", glossary_id=glossary.glossary_id
    )
    assert status == 404 and "no glossary" in reply["error"], reply
    status, reply = translate_file(
        server, "memo.docx", source.read_bytes(), api_key="alice", glossary_id=glossary.glossary_id
    )
    assert status == 200, reply
    download = reply["translatedFileUrl"].split(server.http_address, 1)[1] + "?api_key=alice"
    status, data, _ = call(server, download)
    assert status == 200 and "Wochenbeginn, 3. März 2025" in _document_xml(data)
    translator.delete_glossary(glossary)


def _document_xml(docx) -> str:
    with zipfile.ZipFile(io.BytesIO(docx if isinstance(docx, bytes) else docx.read_bytes())) as package:
        return package.read("word/document.xml").decode()


def test_errors_are_in_deepls_shape_and_statuses(server):
    with pytest.raises(deepl.AuthorizationException):
        client(server, "mallory").translate_text("at 3:45 PM", target_lang="DE")
    status, reply, _ = call(server, "/v2/translate", b"text=x&target_lang=DE")  # no key at all
    assert status == 403 and "message" in json.loads(reply)
    status, reply, _ = call(server, "/v2/translate?auth_key=bob", b"text=at+3%3A45+PM&target_lang=DE")
    assert status == 200 and json.loads(reply)["translations"][0]["text"] == "um 15:45 Uhr", reply
    key = {"Authorization": "DeepL-Auth-Key alice"}
    for form, words in (
        (b"target_lang=DE", "Parameter 'text' not specified."),
        (b"text=x&target_lang=XX-YY-ZZ", "target_lang"),
        (b"text=x&target_lang=DE&tag_handling=latex", "tag_handling"),
        (b"text=x&target_lang=DE&split_sentences=2", "split_sentences"),
    ):
        status, reply, _ = call(server, "/v2/translate", form, "application/x-www-form-urlencoded", key)
        assert status == 400 and words in json.loads(reply)["message"], reply
    status, reply, _ = call(
        server, "/v2/translate", b"text=x&text=y&target_lang=FR", "application/x-www-form-urlencoded", key
    )
    assert status == 400 and "target_lang" in json.loads(reply)["message"], reply
    # a source language no model knows is named as the source, not blamed on the target
    with pytest.raises(deepl.DeepLException, match="Value for 'source_lang' not supported: .*'FR'"):
        client(server).translate_text("at 3:45 PM", source_lang="FR", target_lang="DE")
    status, reply, _ = call(server, "/v2/glossaries/nope", headers=key)
    assert status == 404 and "message" in json.loads(reply)
    # a field of the wrong JSON type is named as such, not as missing
    for path, doc in (
        ("/v2/translate", {"text": ["x"], "target_lang": 5}),
        ("/v2/glossaries", {"name": "g", "source_lang": "en", "target_lang": "de", "entries": {"a": "b"}}),
    ):
        status, reply, _ = call(server, path, json.dumps(doc).encode(), "application/json", key)
        assert status == 400 and "is not a string" in json.loads(reply)["message"], reply
    status, reply, _ = call(server, "/v2/translate", b"x" * (4 << 20), "application/x-www-form-urlencoded", key)
    assert status == 413, reply


def test_unknown_paths_and_methods_of_deepls_api_answer_in_its_shape(server):
    """A path under /v2/ or /v3/ that the server does not route (a DeepL endpoint it lacks, a
    typo) is DeepL's 404 ``{"message": ...}``, which DeepL's client puts in its exception; a
    known path with another method is a 405 in that shape. KServe's and Triton's paths under
    /v2 keep their ``{"error": ...}`` (tests/server/kserve/test_http.py)."""
    writer = deepl.DeepLClient("alice", server_url=f"http://{server.http_address}")
    with pytest.raises(deepl.DeepLException) as err:
        writer.rephrase_text("at 3:45 PM", target_lang="DE")  # DeepL Write: not served here
    assert err.value.http_status_code == 404 and "Not Found: POST '/v2/write/rephrase'" in str(err.value)
    key = {"Authorization": "DeepL-Auth-Key alice"}
    for path, body in (("/v2/translatee", b"text=x&target_lang=DE"), ("/v3/nothing", None)):
        status, reply, _ = call(server, path, body, "application/x-www-form-urlencoded", key)
        assert status == 404 and set(json.loads(reply)) == {"message"} and path in json.loads(reply)["message"]
    status, reply, headers = call(server, "/v2/document", None, "", key)  # GET: DeepL's uploads are POSTed
    assert status == 405 and headers["Allow"] == "POST", reply
    assert json.loads(reply) == {"message": "Method Not Allowed: GET '/v2/document'; it takes POST"}
    status, reply, _ = call(server, "/v2/models/translator-en-de/nothing")
    assert status == 404 and json.loads(reply) == {"error": "Not Found"}


def test_a_form_with_repeated_text_gets_one_translation_each(server):
    key = {"Authorization": "DeepL-Auth-Key alice"}
    form = b"text=Monday%2C+March+3%2C+2025&text=at+3%3A45+PM&target_lang=DE&source_lang=EN&unknown_option=1"
    status, reply, _ = call(server, "/v2/translate", form, "application/x-www-form-urlencoded", key)
    assert status == 200, reply
    assert [t["text"] for t in json.loads(reply)["translations"]] == ["Montag, 3. März 2025", "um 15:45 Uhr"]


def test_an_xlsx_and_an_xliff_file_are_translated_through_the_document_routes(server, tmp_path):
    """DeepL translates .xlsx and .xlf / .xliff documents; so does this server: a workbook's cells
    (a formula and a number as they were, the sheet's name kept) and an XLIFF file's targets
    (inline tags kept, ``translate="no"`` left alone), the .xliff asked for as .xlf."""
    translator = client(server)
    cells = (
        '<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1"><v>42</v></c></row>'
        '<row r="2"><c r="A2"><f>B1*2</f><v>84</v></c><c r="B2" t="s"><v>1</v></c></row>'
    )
    source = tmp_path / "plan.xlsx"
    source.write_bytes(localization.xlsx(["Monday, March 3, 2025", [("at ", False), ("3:45 PM", True)]], cells))
    out = tmp_path / "plan.de.xlsx"
    translator.translate_document_from_filepath(source, out, source_lang="EN", target_lang="DE")
    sheet = openpyxl.load_workbook(out)[localization.SHEET_NAME]
    assert sheet["A1"].value == "Montag, 3. März 2025" and sheet["B2"].value == "um 15:45 Uhr"
    assert sheet["B1"].value == 42 and sheet["A2"].value == "=B1*2"

    units = (
        '<trans-unit id="1"><source>Monday, <g id="1">March 3</g>, 2025</source></trans-unit>'
        '<trans-unit id="2" translate="no"><source>at 3:45 PM</source></trans-unit>'
    )
    page = tmp_path / "app.xliff"
    page.write_bytes(localization.xliff12(units))
    with open(page, "rb") as sent:
        out_xliff = io.BytesIO()
        translator.translate_document(sent, out_xliff, target_lang="DE", filename="app.xliff", output_format="xlf")
    root = etree.fromstring(out_xliff.getvalue())
    ns = "{urn:oasis:names:tc:xliff:document:1.2}"
    assert root.find(f"{ns}file").get("target-language") == "de"
    first, skipped = root.iter(f"{ns}trans-unit")
    target = first.find(f"{ns}target")
    assert "".join(target.itertext()) == "Montag, 3. März 2025" and target.find(f"{ns}g").get("id") == "1"
    assert skipped.find(f"{ns}target") is None


@pytest.fixture
def sentences(monkeypatch):
    """The sentences the model is given, per request: what the splitter made of each text."""
    from attnserve.server.service import documents

    seen: list[list[str]] = []
    original = documents.piece_work

    def recording(valid, prepared):
        work = original(valid, prepared)
        seen.append([sentence for sentence, _, _ in work])
        return work

    monkeypatch.setattr(documents, "piece_work", recording)
    return seen


def test_ignore_tags_come_back_as_sent_and_what_is_around_them_translated(server, sentences):
    """DeepL's ``ignore_tags``: placeholders and code inside a text are never translated; the
    element stays one piece of its sentence, which the model reads without it."""
    translator = client(server)
    kept = "<x id='1'>at 3:45 PM &amp;  <y/></x>"
    done = translator.translate_text(
        f"Monday, March 3, 2025 {kept}", target_lang="DE", tag_handling="xml", ignore_tags="x"
    )
    assert done.text == f"Montag, 3. März 2025 {kept}"
    assert sentences[-1] == ["Monday, March 3, 2025"]
    html = "<p>Monday, March 3, 2025 <code>at 3:45 PM</code></p>"  # html too; a JSON list, as newer clients send
    done = translator.translate_text(html, target_lang="DE", tag_handling="html", ignore_tags=["code", "kbd"])
    assert done.text == "<p>Montag, 3. März 2025 <code>at 3:45 PM</code></p>"
    # XML's names are case-sensitive: <X> is not the x ignored (html's names match in any case)
    done = translator.translate_text("<X>at 3:45 PM</X>", target_lang="DE", tag_handling="xml", ignore_tags="x")
    assert done.text == "<X>um 15:45 Uhr</X>"
    done = translator.translate_text("<P>at 3:45 PM</P>", target_lang="DE", tag_handling="html", ignore_tags="p")
    assert done.text == "<P>at 3:45 PM</P>"
    key = {"Authorization": "DeepL-Auth-Key alice"}  # a form, comma-separated, as older clients send
    form = b"text=%3Ca%3Eat+3%3A45+PM%3C%2Fa%3E+%3Cb%3Eat+3%3A45+PM%3C%2Fb%3E&target_lang=DE&tag_handling=xml"
    status, reply, _ = call(
        server, "/v2/translate", form + b"&ignore_tags=a%2C+b", "application/x-www-form-urlencoded", key
    )
    assert status == 200 and json.loads(reply)["translations"][0]["text"] == "<a>at 3:45 PM</a> <b>at 3:45 PM</b>", (
        reply
    )


def test_a_custom_tag_inside_running_text_keeps_its_sentence_whole(server, sentences):
    """xml: a tag html does not know, inside a sentence, is markup of that sentence (DeepL's
    outline detection), not the end of it; in html, ``non_splitting_tags`` says so."""
    translator = client(server)
    translator.translate_text("Press <key>Enter</key> to go on", target_lang="DE", tag_handling="xml")
    assert sentences[-1] == ["Press Enter to go on"]
    done = translator.translate_text(
        "<par>Monday, <day>March 3</day>, 2025</par>", target_lang="DE", tag_handling="xml"
    )
    assert sentences[-1] == ["Monday, March 3, 2025"]
    assert done.text.startswith("<par>Montag, ") and done.text.endswith("2025</par>"), done.text
    assert done.text.count("<day>") == done.text.count("</day>") == 1 and "3. März" in done.text, done.text
    html = "<div>Press <key>Enter</key> to go on</div>"
    translator.translate_text(html, target_lang="DE", tag_handling="html", non_splitting_tags="key")
    assert sentences[-1] == ["Press Enter to go on"]


def test_splitting_tags_end_sentences(server, sentences):
    translator = client(server)
    text = "<span>Monday, March 3, 2025</span><span>at 3:45 PM</span>"
    done = translator.translate_text(text, target_lang="DE", tag_handling="xml", splitting_tags=["span"])
    assert sentences[-1] == ["Monday, March 3, 2025", "at 3:45 PM"]
    assert done.text == "<span>Montag, 3. März 2025</span><span>um 15:45 Uhr</span>"


def test_outline_detection_off_splits_only_at_splitting_tags(server, sentences):
    """DeepL's structured XML: by default the elements holding text are its outline and split;
    with ``outline_detection=0`` only ``splitting_tags`` do."""
    translator = client(server)
    text = "<doc>\n  <par>Monday, March 3, 2025</par>\n  <par>at 3:45 PM</par>\n</doc>"
    expected = "<doc>\n  <par>Montag, 3. März 2025</par>\n  <par>um 15:45 Uhr</par>\n</doc>"
    assert translator.translate_text(text, target_lang="DE", tag_handling="xml").text == expected
    assert sentences[-1] == ["Monday, March 3, 2025", "at 3:45 PM"]
    translator.translate_text(text, target_lang="DE", tag_handling="xml", outline_detection=False)
    assert sentences[-1] == ["Monday, March 3, 2025 at 3:45 PM"]
    done = translator.translate_text(
        text, target_lang="DE", tag_handling="xml", outline_detection=False, splitting_tags="par"
    )
    assert done.text == expected and sentences[-1] == ["Monday, March 3, 2025", "at 3:45 PM"]


def test_split_sentences_nonewlines_and_0_do_not_end_a_sentence_at_a_newline(server, sentences):
    """DeepL's ``split_sentences``: ``1`` (the default) ends sentences at punctuation and newlines,
    ``nonewlines`` at punctuation only (subtitle and CAT tools send a sentence wrapped over lines
    so), ``0`` nowhere (a text is one sentence). The line break comes back inside the translation."""
    translator = client(server)
    wrapped = "Monday, March 3,\n2025"
    translator.translate_text(wrapped, target_lang="DE")
    assert sentences[-1] == ["Monday, March 3,", "2025"]
    done = translator.translate_text(wrapped, target_lang="DE", split_sentences=deepl.SplitSentences.NO_NEWLINES)
    assert sentences[-1] == ["Monday, March 3, 2025"] and done.text == "Montag, 3. März\n2025", done.text
    two = "Monday, March 3, 2025. at 3:45 PM\n"
    done = translator.translate_text(two, target_lang="DE", split_sentences="nonewlines")
    assert (
        sentences[-1] == ["Monday, March 3, 2025.", "at 3:45 PM"]
        and done.text == "Montag, 3. März 2025. um 15:45 Uhr\n"
    )
    translator.translate_text(two, target_lang="DE", split_sentences=deepl.SplitSentences.OFF)
    assert sentences[-1] == ["Monday, March 3, 2025. at 3:45 PM"]
    key = {"Authorization": "DeepL-Auth-Key alice"}  # a form, as DeepL's older clients send it
    form = b"text=Monday%2C+March+3%2C%0A2025&target_lang=DE&split_sentences=nonewlines"
    status, reply, _ = call(server, "/v2/translate", form, "application/x-www-form-urlencoded", key)
    assert status == 200 and json.loads(reply)["translations"][0]["text"] == "Montag, 3. März\n2025", reply


def test_a_bad_tag_list_is_a_400_in_deepls_shape(server):
    translator = client(server)
    with pytest.raises(deepl.DeepLException, match="ignore_tags: '1x' is not a tag name"):
        translator.translate_text("at 3:45 PM", target_lang="DE", tag_handling="xml", ignore_tags="1x")
    with pytest.raises(deepl.DeepLException, match="'p' is in both splitting_tags and non_splitting_tags"):
        translator.translate_text(
            "at 3:45 PM", target_lang="DE", tag_handling="xml", splitting_tags="p", non_splitting_tags="p"
        )
    key = {"Authorization": "DeepL-Auth-Key alice"}
    for doc, words in (
        ({"splitting_tags": "p,<b>"}, "splitting_tags: '<b>' is not a tag name"),
        ({"non_splitting_tags": [5]}, "Value for 'non_splitting_tags' not supported: 5 is not a string"),
        ({"outline_detection": "maybe"}, "Value for 'outline_detection' not supported"),
    ):
        body = {"text": ["at 3:45 PM"], "target_lang": "DE", "tag_handling": "xml"} | doc
        status, reply, _ = call(server, "/v2/translate", json.dumps(body).encode(), "application/json", key)
        assert status == 400 and words in json.loads(reply)["message"], reply


def _broken_docx() -> bytes:
    """A .docx whose document.xml is cut halfway: it uploads, and its job fails as it is read."""
    whole, out = office.docx([[("Monday, March 3, 2025", "")] for _ in range(20)]), io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(whole)) as package, zipfile.ZipFile(out, "w") as broken:
        for name in package.namelist():
            data = package.read(name)
            broken.writestr(name, data[: len(data) // 2] if name == "word/document.xml" else data)
    return out.getvalue()


def test_a_document_not_done_is_not_ready_and_a_failed_ones_download_says_why(server):
    """DeepL answers a download before the document is done with 503, which its client reads as
    "document not ready" (and retries); a document that failed names its error. Not 409, which
    the client only reports as an unexpected status code."""
    translator = client(server)
    waiting = [  # more than --running-jobs: the last waits queued while the others run
        translator.translate_document_upload(
            office.docx([[(f"Monday, March 3, 2025 ({i}, {n}).", "")] for i in range(100)]),
            target_lang="DE", source_lang="EN", filename="memo.docx",
        )
        for n in range(4)
    ]  # fmt: skip
    last = waiting[-1]
    form = json.dumps({"document_key": last.document_key}).encode()
    key = {"Authorization": "DeepL-Auth-Key alice"}
    status, reply, _ = call(server, f"/v2/document/{last.document_id}/result", form, "application/json", key)
    assert status == 503 and "not ready" in json.loads(reply)["message"], reply
    for handle in waiting:
        assert translator.translate_document_wait_until_done(handle).done
    failed = translator.translate_document_upload(_broken_docx(), target_lang="DE", filename="broken.docx")
    assert translator.translate_document_wait_until_done(failed).status == deepl.DocumentStatus.Status.ERROR
    with pytest.raises(deepl.DeepLException, match="^Bad request"):
        translator.translate_document_download(failed, io.BytesIO())
    form = json.dumps({"document_key": failed.document_key}).encode()
    status, reply, _ = call(server, f"/v2/document/{failed.document_id}/result", form, "application/json", key)
    assert status == 400 and "failed: " in json.loads(reply)["message"] and "not well-formed" in str(reply), reply


def test_a_document_is_downloaded_once_then_gone(server):
    """DeepL removes a translated document once it is downloaded: a second download and its status
    are "not found" (the job routes' too: its record and files are deleted)."""
    translator = client(server, "bob")
    sent = office.docx([[("Monday, March 3, 2025", "")]])
    handle = translator.translate_document_upload(sent, target_lang="DE", source_lang="EN", filename="memo.docx")
    assert translator.translate_document_wait_until_done(handle).done
    out = io.BytesIO()
    translator.translate_document_download(handle, out)
    assert "Montag, 3. März 2025" in _document_xml(out.getvalue())
    with pytest.raises(deepl.DeepLException, match="^Not found"):
        translator.translate_document_download(handle, io.BytesIO())
    with pytest.raises(deepl.DeepLException, match="^Not found"):
        translator.translate_document_get_status(handle)
    status, reply, _ = call(server, f"/jobs/{handle.document_id}", headers={"Authorization": "Bearer bob"})
    assert status == 404, reply


def test_a_wrong_document_key_or_id_is_not_found_as_deepl_answers(server):
    """DeepL answers a document id that does not exist, or a wrong document_key, with 404
    ("Document not found"); a missing document_key is a 400 naming it."""
    translator = client(server)
    sent = office.docx([[("Monday, March 3, 2025", "")]])
    handle = translator.translate_document_upload(sent, target_lang="DE", source_lang="EN", filename="memo.docx")
    for wrong in (deepl.DocumentHandle(handle.document_id, "0" * 32), deepl.DocumentHandle("no-such-id", "0" * 32)):
        with pytest.raises(deepl.DeepLException, match="^Not found"):
            translator.translate_document_get_status(wrong)
        with pytest.raises(deepl.DeepLException, match="^Not found"):
            translator.translate_document_download(wrong, io.BytesIO())
    key = {"Authorization": "DeepL-Auth-Key alice"}
    for form, status_code in (({"document_key": "schlüssel"}, 404), ({}, 400), ({"document_key": ""}, 400)):
        status, reply, _ = call(
            server, f"/v2/document/{handle.document_id}", json.dumps(form).encode(), "application/json", key
        )
        assert status == status_code and "ocument" in json.loads(reply)["message"], reply
    assert translator.translate_document_wait_until_done(handle).done  # the right key still finds it
