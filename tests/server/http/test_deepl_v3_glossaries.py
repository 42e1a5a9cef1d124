"""DeepL's v3 glossaries (``server/doors/http/deepl_v3_glossary_routes.py``) with DeepL's current
client, ``deepl.DeepLClient``, unchanged, against a live server serving English -> German and the
same weights declared English -> French (a second pair a glossary can hold a dictionary for):
every v3 call, translation with a glossary's dictionary for the request's pair (through DeepL's
text and document routes, gRPC, KServe and LibreTranslate), v2 glossaries seen through v3, the
per-key bound and entry limit, and the errors in DeepL's shapes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import deepl
import grpc
import pytest
from deepl.api_data import MultilingualGlossaryDictionaryEntries as Entries

from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
from tests.server.http.test_deepl import _document_xml
from tests.server.http.test_files import REPO
from tests.support import office_files as office

TEXT = "Monday, March 3, 2025"
GERMAN, FRENCH = "Wochenbeginn, 3. März 2025", "Lundi, 3. März 2025"  # the en-fr model writes German dates
DAYS = [Entries("EN", "DE", {"Monday": "Wochenbeginn"}), Entries("EN", "FR", {"Monday": "Lundi"})]


@pytest.fixture(scope="module")
def server(serve, tmp_path_factory):
    repo = tmp_path_factory.mktemp("two-pairs")
    (repo / "translator-en-de").symlink_to(REPO / "translator-en-de")
    french = repo / "translator-en-fr"
    french.mkdir()
    for part in (REPO / "translator-en-de").iterdir():
        if part.name != "model.json":
            (french / part.name).symlink_to(part)
    manifest = json.loads((REPO / "translator-en-de" / "model.json").read_text())
    manifest["name"] = "translator-en-fr"
    manifest["languages"] |= {"target": ["fr"], "default_target": "fr"}
    (french / "model.json").write_text(json.dumps(manifest))
    overrides = dict(auth_tokens="alice,bob,carol", max_glossaries_per_key=3, max_stored_glossary_entries=4)
    with serve(repo, http_port=0, language_detection="off", **overrides) as handle:
        yield handle


def client(server, key: str = "alice") -> deepl.DeepLClient:
    return deepl.DeepLClient(key, server_url=f"http://{server.http_address}")


def send(server, method: str, path: str, doc=None, key: str = "alice") -> tuple[int, dict]:
    headers = {"Authorization": f"DeepL-Auth-Key {key}", "Content-Type": "application/json"}
    data = None if doc is None else json.dumps(doc).encode()
    request = urllib.request.Request(f"http://{server.http_address}{path}", data, headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def pairs(info) -> list[tuple[str, str, int]]:
    return [(d.source_lang, d.target_lang, d.entry_count) for d in info.dictionaries]


def test_a_glossary_of_two_dictionaries_is_created_read_and_used_for_each_pair(server):
    deepl_client = client(server)
    made = deepl_client.create_multilingual_glossary("days", DAYS)
    assert made.name == "days" and pairs(made) == [("EN", "DE", 1), ("EN", "FR", 1)]
    got = deepl_client.get_multilingual_glossary(made.glossary_id)
    assert (got.name, pairs(got), got.creation_time) == ("days", pairs(made), made.creation_time)
    assert made.glossary_id in [g.glossary_id for g in deepl_client.list_multilingual_glossaries()]
    for target, expected in (("DE", GERMAN), ("FR", FRENCH)):
        done = deepl_client.translate_text(TEXT, source_lang="EN", target_lang=target, glossary=made)
        assert done.text == expected
        found = deepl_client.get_multilingual_glossary_entries(made, "EN", target).dictionaries
        assert [(d.source_lang, d.target_lang) for d in found] == [("en", target.lower())]
        assert deepl.convert_tsv_to_dict(found[0].entries) == {"Monday": expected.split(",")[0]}
    plain = deepl_client.translate_text(TEXT, source_lang="EN", target_lang="FR")
    assert plain.text == "Montag, 3. März 2025"  # the glossary's terms come from its dictionary alone
    deepl_client.delete_multilingual_glossary(made)
    with pytest.raises(deepl.GlossaryNotFoundException):
        deepl_client.get_multilingual_glossary(made.glossary_id)


def test_glossary_ids_naming_one_glossary_is_used_and_several_are_refused(server, tmp_path):
    """DeepL's newer clients send ``glossary_ids`` (a list); one glossary there is applied as
    ``glossary_id`` is, in texts and documents, and several are a 400, never ignored."""
    deepl_client = client(server)
    made = deepl_client.create_multilingual_glossary("ids", DAYS)
    done = deepl_client.translate_text(TEXT, source_lang="EN", target_lang="DE", glossary_ids=[made])
    assert done.text == GERMAN
    source, out = tmp_path / "memo.docx", tmp_path / "memo.de.docx"
    source.write_bytes(office.docx([[(TEXT, "")]]))
    deepl_client.translate_document_from_filepath(source, out, source_lang="EN", target_lang="DE", glossary_ids=[made])
    assert GERMAN in _document_xml(out)
    other = deepl_client.create_multilingual_glossary("other", DAYS)
    with pytest.raises(deepl.DeepLException, match="2 glossaries; this server applies one"):
        deepl_client.translate_text(TEXT, source_lang="EN", target_lang="DE", glossary_ids=[made, other])
    for glossary in (made, other):
        deepl_client.delete_multilingual_glossary(glossary)


def test_a_glossary_is_renamed_merged_into_replaced_and_loses_a_dictionary(server):
    deepl_client = client(server)
    made = deepl_client.create_multilingual_glossary("days", DAYS[:1])
    renamed = deepl_client.update_multilingual_glossary_name(made, "weekdays")
    assert renamed.name == "weekdays" and pairs(renamed) == [("EN", "DE", 1)]
    merged = deepl_client.update_multilingual_glossary_dictionary(
        made, Entries("EN", "DE", {"Monday": "Montag (Wochenbeginn)", "March": "MÄRZ"})
    )
    assert merged.name == "weekdays" and pairs(merged) == [("EN", "DE", 2)]  # Monday replaced, March added
    done = deepl_client.translate_text(TEXT, source_lang="EN", target_lang="DE", glossary=made.glossary_id)
    assert done.text == "Montag (Wochenbeginn), 3. MÄRZ 2025"
    added = deepl_client.update_multilingual_glossary_dictionary_from_csv(made, "EN", "FR", "Monday,Lundi\n")
    assert pairs(added) == [("EN", "DE", 2), ("EN", "FR", 1)]
    replaced = deepl_client.replace_multilingual_glossary_dictionary(made, Entries("EN", "DE", {"March": "Lenz"}))
    assert (replaced.source_lang, replaced.target_lang, replaced.entry_count) == ("EN", "DE", 1)
    done = deepl_client.translate_text(TEXT, source_lang="EN", target_lang="DE", glossary=made.glossary_id)
    assert done.text == "Montag, 3. Lenz 2025"  # Monday's entry went with the replaced dictionary
    deepl_client.delete_multilingual_glossary_dictionary(made, source_lang="EN", target_lang="DE")
    assert pairs(deepl_client.get_multilingual_glossary(made.glossary_id)) == [("EN", "FR", 1)]
    with pytest.raises(deepl.DeepLException, match=r"Bad request.*is for en -> fr; the request names en -> de"):
        deepl_client.translate_text(TEXT, source_lang="EN", target_lang="DE", glossary=made.glossary_id)
    done = deepl_client.translate_text(TEXT, source_lang="EN", target_lang="FR", glossary=made.glossary_id)
    assert done.text == FRENCH
    deepl_client.delete_multilingual_glossary(made)


def test_a_v2_glossary_is_one_dictionary_through_v3_and_a_v3_one_of_two_is_not_read_by_v2(server):
    deepl_client = client(server, "carol")
    old = deepl_client.create_glossary("v2", "EN", "DE", {"Monday": "Wochenbeginn"})
    seen = deepl_client.get_multilingual_glossary(old.glossary_id)
    assert (seen.name, pairs(seen)) == ("v2", [("EN", "DE", 1)])
    assert [g.glossary_id for g in deepl_client.list_multilingual_glossaries()] == [old.glossary_id]
    deepl_client.update_multilingual_glossary_dictionary(old.glossary_id, Entries("EN", "DE", {"March": "MÄRZ"}))
    assert deepl_client.get_glossary_entries(old) == {"Monday": "Wochenbeginn", "March": "MÄRZ"}  # v2 reads it
    two = deepl_client.create_multilingual_glossary("two", DAYS)
    assert [g.glossary_id for g in deepl_client.list_glossaries()] == [old.glossary_id]  # v2 lists one-pair ones
    with pytest.raises(deepl.DeepLException, match="has 2 dictionaries .*/v3/glossaries"):
        deepl_client.get_glossary(two.glossary_id)
    deepl_client.delete_glossary(two.glossary_id)  # v2's delete deletes any glossary
    deepl_client.delete_multilingual_glossary(old.glossary_id)
    assert deepl_client.list_multilingual_glossaries() == []


def test_a_v3_glossary_is_used_per_pair_by_documents_grpc_kserve_and_libretranslate(server, tmp_path):
    made = client(server).create_multilingual_glossary("days", DAYS)
    source = tmp_path / "memo.docx"
    source.write_bytes(office.docx([[(TEXT, "")]]))
    out = tmp_path / "memo.fr.docx"
    client(server).translate_document_from_filepath(source, out, source_lang="EN", target_lang="FR", glossary=made)
    assert FRENCH in _document_xml(out)
    with grpc.insecure_channel(server.address) as channel:
        reply = pb_grpc.InferenceServiceStub(channel).Translate(
            pb.TranslateRequest(
                texts=[TEXT],
                glossary_id=made.glossary_id,
                options=pb.DecodingOptions(source_language="en", target_language="fr"),
            ),
            metadata=(("authorization", "Bearer alice"),),
        )
    assert reply.translations[0].hypotheses[0].text == FRENCH
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [TEXT]}]}
    for model, expected in (("translator-en-de", GERMAN), ("translator-en-fr", FRENCH)):
        body["parameters"] = {"glossary_id": made.glossary_id}  # the model's pair chooses the dictionary
        request = urllib.request.Request(
            f"http://{server.http_address}/v2/models/{model}/infer",
            json.dumps(body).encode(),
            {"Authorization": "Bearer alice", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            assert json.loads(reply.read())["outputs"][0]["data"] == [expected]
    fields = {"q": TEXT, "source": "en", "target": "de", "glossary_id": made.glossary_id, "api_key": "alice"}
    request = urllib.request.Request(
        f"http://{server.http_address}/translate", json.dumps(fields).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        assert json.loads(reply.read())["translatedText"] == GERMAN
    client(server).delete_multilingual_glossary(made)


def test_errors_are_deepls_unknown_and_other_keys_ids_bad_entries_and_missing_pairs(server):
    deepl_client, bob = client(server), client(server, "bob")
    made = deepl_client.create_multilingual_glossary("days", DAYS[:1])
    calls = (
        ("get_multilingual_glossary", ()),
        ("update_multilingual_glossary_name", ("mine",)),
        ("update_multilingual_glossary_dictionary", (DAYS[1],)),
        ("replace_multilingual_glossary_dictionary", (DAYS[1],)),
        ("get_multilingual_glossary_entries", ("EN", "DE")),
        ("delete_multilingual_glossary_dictionary", (None, "EN", "DE")),
        ("delete_multilingual_glossary", ()),
    )
    for who, glossary_id in ((deepl_client, "no-such-glossary"), (bob, made.glossary_id)):
        for name, args in calls:
            with pytest.raises(deepl.GlossaryNotFoundException, match="no glossary"):
                getattr(who, name)(glossary_id, *args)
    with pytest.raises(deepl.DeepLException, match="no glossary"):
        bob.translate_text(TEXT, source_lang="EN", target_lang="DE", glossary=made.glossary_id)
    assert bob.list_multilingual_glossaries() == []
    with pytest.raises(deepl.GlossaryNotFoundException, match="no dictionary for en -> fr; it has en -> de"):
        deepl_client.get_multilingual_glossary_entries(made, "EN", "FR")
    with pytest.raises(deepl.GlossaryNotFoundException, match="no dictionary for en -> fr"):
        deepl_client.delete_multilingual_glossary_dictionary(made, source_lang="EN", target_lang="FR")
    with pytest.raises(deepl.DeepLException, match="Bad request.*is for en -> de; the request names en -> fr"):
        deepl_client.translate_text(TEXT, source_lang="EN", target_lang="FR", glossary=made.glossary_id)
    too_many = {f"term {i}": f"Begriff {i}" for i in range(4)}  # with Monday, 5: over --max-stored-glossary-entries
    with pytest.raises(deepl.DeepLException, match="5 entries; this server stores at most 4 per glossary"):
        deepl_client.update_multilingual_glossary_dictionary(made, Entries("EN", "FR", too_many))
    with pytest.raises(deepl.DeepLException, match="no model serves en -> it"):
        deepl_client.create_multilingual_glossary("x", [Entries("EN", "IT", {"Monday": "lunedì"})])
    assert pairs(deepl_client.get_multilingual_glossary(made.glossary_id)) == [("EN", "DE", 1)]  # left as it was
    deepl_client.delete_multilingual_glossary(made)


def test_bad_requests_are_400s_naming_the_field_and_the_bound_is_shared_with_v2(server):
    entries = {"source_lang": "en", "target_lang": "de", "entries": "Monday\tWochenbeginn", "entries_format": "tsv"}
    for doc, words in (
        ({"dictionaries": [entries]}, "Parameter 'name' not specified."),
        ({"name": "g"}, "Parameter 'dictionaries' not specified."),
        ({"name": "g", "dictionaries": ["en\tde"]}, "expected a JSON list of objects"),
        ({"name": "g", "dictionaries": [entries | {"entries": "Monday Wochenbeginn"}]}, "glossary entry 1"),
        ({"name": "g", "dictionaries": [entries | {"entries_format": "xlsx"}]}, "entries_format 'xlsx'"),
        ({"name": "g", "dictionaries": [entries | {"entries_format": 3}]}, "'entries_format' not supported: 3"),
        ({"name": "g", "dictionaries": [entries | {"entries": ["a"]}]}, "'entries' not supported: ['a'] is not"),
        ({"name": "g", "dictionaries": [{"source_lang": "en", "entries": "a\tb"}]}, "dictionaries[0].target_lang"),
        ({"name": "g", "dictionaries": [entries, entries]}, "en -> de twice"),
    ):
        status, reply = send(server, "POST", "/v3/glossaries", doc, key="bob")
        assert status == 400 and words in reply["message"], reply
    status, made = send(server, "POST", "/v3/glossaries", {"name": "g", "dictionaries": [entries]}, key="bob")
    assert status == 201 and made["dictionaries"] == [{"source_lang": "en", "target_lang": "de", "entry_count": 1}]
    status, reply = send(server, "PATCH", f"/v3/glossaries/{made['glossary_id']}", {}, key="bob")
    assert status == 400 and "'name' or 'dictionaries'" in reply["message"], reply
    status, reply = send(server, "GET", f"/v3/glossaries/{made['glossary_id']}/entries?source_lang=en", key="bob")
    assert status == 400 and "Parameter 'target_lang' not specified." in reply["message"], reply
    bob = client(server, "bob")
    bob.create_glossary("v2", "EN", "DE", {"Monday": "Montag"})
    bob.create_multilingual_glossary("v3", DAYS)
    with pytest.raises(deepl.QuotaExceededException, match="max-glossaries-per-key"):
        bob.create_multilingual_glossary("one too many", DAYS)
    for glossary in bob.list_multilingual_glossaries():
        bob.delete_multilingual_glossary(glossary)
