"""Servers on one state store, on both backends (two processes of ``--workers`` on one state
folder, or two replicas on one PostgreSQL): a glossary created through DeepL's API on one server
is listed and used by a v1, a KServe and a LibreTranslate request on another running beside it,
and by a server started after both stopped; a document (a file job) uploaded to one is followed
and downloaded from the other; a store a server made before DeepL's v3 glossaries keeps its
glossary, which one replica edits through v3 and the other then uses."""

from __future__ import annotations

import io
import json
import zipfile

import deepl
import grpc
import pytest
from deepl.api_data import MultilingualGlossaryDictionaryEntries

from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
from attnserve.server.shared.security import key_digest
from attnserve.server.state import open_database
from tests.server.http.test_files import call, files_server
from tests.server.state.test_glossary_store import OLD_SCHEMA
from tests.support import office_files as office

pytestmark = pytest.mark.integration  # live servers, two and three at a time

TEXT, EXPECTED = "Monday, March 3, 2025", "Wochenbeginn, 3. März 2025"
BEARER = {"Authorization": "Bearer alice"}


def through_every_door(server, glossary_id: str) -> list[str]:
    with grpc.insecure_channel(server.address) as channel:
        reply = pb_grpc.InferenceServiceStub(channel).Translate(
            pb.TranslateRequest(
                texts=[TEXT],
                glossary_id=glossary_id,
                options=pb.DecodingOptions(source_language="en", target_language="de"),
            ),
            metadata=(("authorization", "Bearer alice"),),
        )
    out = [reply.translations[0].hypotheses[0].text]
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [TEXT]}]}
    body["parameters"] = {"glossary_id": glossary_id}
    path = "/v2/models/translator-en-de/infer"
    status, reply, _ = call(server, path, json.dumps(body).encode(), "application/json", BEARER)
    assert status == 200, reply
    out.append(json.loads(reply)["outputs"][0]["data"][0])
    fields = {"q": TEXT, "source": "en", "target": "de", "glossary_id": glossary_id, "api_key": "alice"}
    status, reply, _ = call(server, "/translate", json.dumps(fields).encode(), "application/json")
    assert status == 200, reply
    out.append(json.loads(reply)["translatedText"])
    return out


def replica(serve, state_url: str, tmp_path, name: str):
    settings = dict(state_dir=str(tmp_path / "state"), state_url=state_url, auth_tokens="alice,bob")
    if state_url:  # replicas on several machines: each its own folder, one PostgreSQL
        settings["state_dir"] = str(tmp_path / f"state-{name}")
    return files_server(serve, tmp_path / f"downloads-{name}", **settings)


def test_servers_on_one_store_share_glossaries_and_keep_them_over_a_restart(serve, state_url, tmp_path):
    def server(name: str):
        return replica(serve, state_url, tmp_path, name)

    with server("a") as a, server("b") as b:
        created = deepl.Translator("alice", server_url=f"http://{a.http_address}").create_glossary(
            "days", "EN", "DE", {"Monday": "Wochenbeginn"}
        )
        seen = deepl.Translator("alice", server_url=f"http://{b.http_address}").list_glossaries()
        assert [g.glossary_id for g in seen] == [created.glossary_id]
        assert through_every_door(b, created.glossary_id) == [EXPECTED] * 3
    with server("c") as c:
        assert through_every_door(c, created.glossary_id) == [EXPECTED] * 3


def test_a_document_uploaded_to_one_server_is_followed_and_downloaded_from_another(serve, state_url, tmp_path):
    settings = dict(state_dir=str(tmp_path / "state"), state_url=state_url)  # replicas share the files' volume
    with files_server(serve, tmp_path / "a", **settings) as a, files_server(serve, tmp_path / "b", **settings) as b:
        memo = office.docx([[("Monday, March 3, 2025", "")]])
        handle = deepl.Translator("any", server_url=f"http://{a.http_address}").translate_document_upload(
            memo, target_lang="DE", source_lang="EN", filename="memo.docx"
        )
        other = deepl.Translator("any", server_url=f"http://{b.http_address}")
        assert other.translate_document_wait_until_done(handle).done
        out = io.BytesIO()
        other.translate_document_download(handle, out)
        with zipfile.ZipFile(out) as package:
            assert "Montag, 3. März 2025" in package.read("word/document.xml").decode()


def test_a_store_from_before_v3_glossaries_keeps_its_glossary_which_v3_edits_on_another_replica(
    serve, state_url, tmp_path
):
    old = open_database(state_url, tmp_path / "state")  # the store as a server before v3 glossaries left it
    old.create(OLD_SCHEMA)
    terms = json.dumps([["Monday", "Wochenbeginn"]])
    old.run("INSERT INTO glossaries VALUES ('before', ?, 'days', 'en', 'de', 1, ?, 1.0)", (key_digest("alice"), terms))
    old.close()
    with replica(serve, state_url, tmp_path, "a") as a, replica(serve, state_url, tmp_path, "b") as b:
        kept = deepl.Translator("alice", server_url=f"http://{a.http_address}").get_glossary("before")
        assert (kept.name, kept.source_lang, kept.target_lang, kept.entry_count) == ("days", "EN", "DE", 1)
        assert through_every_door(a, "before") == [EXPECTED] * 3
        march = MultilingualGlossaryDictionaryEntries("EN", "DE", {"March": "MÄRZ"})
        deepl.DeepLClient("alice", server_url=f"http://{b.http_address}").update_multilingual_glossary_dictionary(
            "before", march
        )
        seen = deepl.DeepLClient("alice", server_url=f"http://{a.http_address}").get_multilingual_glossary("before")
        assert [(d.source_lang, d.target_lang, d.entry_count) for d in seen.dictionaries] == [("EN", "DE", 2)]
        assert through_every_door(a, "before") == ["Wochenbeginn, 3. MÄRZ 2025"] * 3
