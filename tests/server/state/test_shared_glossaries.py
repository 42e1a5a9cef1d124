"""Stored glossaries shared by servers on one state store, on both backends: a glossary created
through DeepL's API on one server is listed and used by a v1, a KServe and a LibreTranslate
request on another running beside it (two processes of ``--workers`` on one state folder, or two
replicas on one PostgreSQL), and by a server started after both stopped."""

from __future__ import annotations

import json

import deepl
import grpc

from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
from tests.server.http.test_files import call, files_server

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


def test_servers_on_one_store_share_glossaries_and_keep_them_over_a_restart(serve, state_url, tmp_path):
    def server(name: str):
        settings = dict(state_dir=str(tmp_path / "state"), state_url=state_url, auth_tokens="alice,bob")
        if state_url:  # replicas on several machines: each its own folder, one PostgreSQL
            settings["state_dir"] = str(tmp_path / f"state-{name}")
        return files_server(serve, tmp_path / f"downloads-{name}", **settings)

    with server("a") as a, server("b") as b:
        created = deepl.Translator("alice", server_url=f"http://{a.http_address}").create_glossary(
            "days", "EN", "DE", {"Monday": "Wochenbeginn"}
        )
        seen = deepl.Translator("alice", server_url=f"http://{b.http_address}").list_glossaries()
        assert [g.glossary_id for g in seen] == [created.glossary_id]
        assert through_every_door(b, created.glossary_id) == [EXPECTED] * 3
    with server("c") as c:
        assert through_every_door(c, created.glossary_id) == [EXPECTED] * 3
