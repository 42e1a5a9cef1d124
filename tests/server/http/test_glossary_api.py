"""attnserve's stored-glossary API over HTTP (``/glossaries``) and gRPC (``CreateGlossary``,
``ListGlossaries``, ``GetGlossary``, ``DeleteGlossary``) on the bundled English -> German
translator: a glossary made through one is seen by the other and used by id, per token, within
the server's bounds."""

from __future__ import annotations

import json
import urllib.request

import grpc
import pytest

from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
from tests.server.http.test_files import call, files_server

ALICE, BOB = {"Authorization": "Bearer alice"}, {"Authorization": "Bearer bob"}


@pytest.fixture(scope="module")
def server(serve, tmp_path_factory):
    overrides = dict(state_dir=str(tmp_path_factory.mktemp("state")), auth_tokens="alice,bob")
    with files_server(serve, tmp_path_factory.mktemp("downloads"), max_stored_glossary_entries=3, **overrides) as s:
        with grpc.insecure_channel(s.address) as channel:
            s.stub = pb_grpc.InferenceServiceStub(channel)
            yield s


def post(server, path: str, doc: dict, headers: dict) -> tuple[int, dict]:
    status, reply, _ = call(server, path, json.dumps(doc).encode(), "application/json", headers)
    return status, json.loads(reply) if reply else {}


def test_a_glossary_stored_over_http_is_seen_over_grpc_and_used_by_id(server):
    doc = {"name": "dates", "source": "en", "target": "de", "entries": {"Monday": "Wochenbeginn", "March": ""}}
    status, made = post(server, "/glossaries", doc, ALICE)
    assert status == 201 and made["entry_count"] == 2 and made["entries"] == doc["entries"], made
    alice = (("authorization", "Bearer alice"),)
    got = server.stub.GetGlossary(pb.GlossaryRequest(id=made["id"]), metadata=alice)
    assert [(e.source, e.target) for e in got.entries] == [("Monday", "Wochenbeginn"), ("March", "")]
    listed = server.stub.ListGlossaries(pb.ListGlossariesRequest(), metadata=alice)
    assert [g.id for g in listed.glossaries] == [made["id"]]
    options = pb.DecodingOptions(source_language="en", target_language="de")
    request = pb.TranslateRequest(texts=["Monday, March 3, 2025"], options=options, glossary_id=made["id"])
    reply = server.stub.Translate(request, metadata=alice)
    assert reply.translations[0].hypotheses[0].text.startswith("Wochenbeginn, 3. March")
    streamed = "".join(c.delta for c in server.stub.TranslateStream(request, metadata=alice))
    assert streamed == reply.translations[0].hypotheses[0].text
    with pytest.raises(grpc.RpcError) as refused:  # bob does not see alice's glossary
        server.stub.Translate(request, metadata=(("authorization", "Bearer bob"),))
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    status, _, _ = call(server, f"/glossaries/{made['id']}", headers=BOB)
    assert status == 404
    status, reply, _ = call(server, f"/glossaries/{made['id']}", headers=ALICE)
    assert status == 200 and json.loads(reply)["entries"] == doc["entries"]


def test_a_glossary_stored_over_grpc_is_deleted_over_http(server):
    alice = (("authorization", "Bearer alice"),)
    entries = [pb.GlossaryEntry(source="PM", target="Uhr")]
    made = server.stub.CreateGlossary(
        pb.CreateGlossaryRequest(name="t", source_language="EN", target_language="de", entries=entries), metadata=alice
    )
    assert made.source_language == "en" and made.entry_count == 1
    assert delete(server, f"/glossaries/{made.id}", ALICE) == 204
    with pytest.raises(grpc.RpcError) as gone:
        server.stub.GetGlossary(pb.GlossaryRequest(id=made.id), metadata=alice)
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND


def delete(server, path: str, headers: dict) -> int:
    request = urllib.request.Request(f"http://{server.http_address}{path}", headers=headers, method="DELETE")
    with urllib.request.urlopen(request, timeout=30) as reply:
        return reply.status


@pytest.mark.parametrize(
    "doc, words",
    [
        ({"name": "x", "source": "en", "target": "fr", "entries": {"a": "b"}}, "no model serves en -> fr"),
        ({"name": "x", "source": "en", "target": "de", "entries": {}}, "at least one entry"),
        ({"name": "x", "source": "en", "target": "de", "entries": {str(i): "x" for i in range(4)}}, "at most 3"),
        ({"name": "", "source": "en", "target": "de", "entries": {"a": "b"}}, "name"),
        ({"name": "x", "source": "en", "target": "de", "entries": ["a"]}, "entries"),
        # a control character could not come out verbatim (a tab came out a space, a NUL ate the words beside it)
        ({"name": "x", "source": "en", "target": "de", "entries": {"May": "Mai\tx"}}, "U+0009"),
        ({"name": "x", "source": "en", "target": "de", "entries": {"May\x00": "Mai"}}, "U+0000"),
    ],
)
def test_bad_glossaries_are_refused_naming_the_reason(server, doc, words):
    status, reply = post(server, "/glossaries", doc, ALICE)
    assert status == 400 and words in reply["error"], reply


def test_the_routes_need_a_token(server):
    status, reply, _ = call(server, "/glossaries")
    assert status == 401, reply
