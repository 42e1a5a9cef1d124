"""The same requests through all six doors (attnserve.v1 gRPC, KServe v2 gRPC and REST,
Triton's generate, LibreTranslate, DeepL's v2 API) get the same translations and the same class of error,
and the same work is booked in the same metrics whichever door (or stream) carried it.

The server holds the KServe tests' word reverser ("t5 t9 t17" -> "t17 t9 t5") under a name
that declares English -> German, so LibreTranslate (which routes by the pair) reaches it;
the other doors name it and send the same pair (DeepL's routes by the pair too).
"""

from __future__ import annotations

import functools
import json
import shutil
import time
import urllib.error
import urllib.request

import grpc
import pytest

from attnserve.protos.attnserve.triton import grpc_service_pb2 as gs
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

from .kserve.conftest import reverser_dir  # noqa: F401 - the reverser fixture

MODEL = "rev-en-de"
MAX_TEXT_CHARS = 200
HTTP_CLASS = {400: "invalid", 404: "not_found", 429: "overloaded", 504: "deadline"}
GRPC_CLASS = {
    grpc.StatusCode.INVALID_ARGUMENT: "invalid",
    grpc.StatusCode.NOT_FOUND: "not_found",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "overloaded",
    grpc.StatusCode.DEADLINE_EXCEEDED: "deadline",
}
KSERVE = "/inference.GRPCInferenceService/"


@pytest.fixture(scope="module")
def server(serve, reverser_dir, tmp_path_factory):  # noqa: F811
    repo = tmp_path_factory.mktemp("parity")
    shutil.copytree(reverser_dir, repo / MODEL)
    manifest = json.loads((repo / MODEL / "model.json").read_text())
    manifest |= {"name": MODEL, "languages": {"source": ["en"], "target": ["de"]}}
    (repo / MODEL / "model.json").write_text(json.dumps(manifest))
    settings = dict(http_port=0, max_beam_size=4, max_text_chars=MAX_TEXT_CHARS, stream_interval_ms=0)
    settings["translation_cache_mb"] = 64  # as the server runs by default (the test servers' is off)
    with serve(repo, language_detection="off", **settings) as handle:
        with grpc.insecure_channel(handle.address) as channel:
            handle.channel = channel
            yield handle


class Refused(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind


def _post(server, path: str, doc: dict, error: str = "error") -> dict:
    request = urllib.request.Request(
        f"http://{server.http_address}{path}", json.dumps(doc).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return json.loads(reply.read())
    except urllib.error.HTTPError as err:
        raise Refused(HTTP_CLASS.get(err.code, str(err.code)), json.loads(err.read())[error]) from None


def _grpc(call, request):
    try:
        return call(request, timeout=60)
    except grpc.RpcError as err:
        raise Refused(GRPC_CLASS.get(err.code(), str(err.code())), err.details()) from None


def _parameters(case: dict) -> dict:
    """The case's options as request parameters (KServe, generate)."""
    out = {k: case[k] for k in ("source_language", "target_language", "format", "beam_size") if k in case}
    return out


def via_v1(server, texts: list[str], case: dict) -> list[str]:
    stub = pb_grpc.InferenceServiceStub(server.channel)
    options = pb.DecodingOptions(
        source_language=case.get("source_language", ""),
        target_language=case.get("target_language", ""),
        beam_size=case.get("beam_size", 0),
    )
    fmt = pb.TEXT_FORMAT_HTML if case.get("format") == "html" else pb.TEXT_FORMAT_TEXT
    request = pb.TranslateRequest(model=case.get("model", MODEL), texts=texts, options=options, format=fmt)
    return [t.hypotheses[0].text for t in _grpc(stub.Translate, request).translations]


def _kserve_parameters(case: dict) -> dict:
    out = {}
    for key, value in _parameters(case).items():
        out[key] = (
            gs.InferParameter(int64_param=value) if isinstance(value, int) else gs.InferParameter(string_param=value)
        )
    return out


def via_kserve_grpc(server, texts: list[str], case: dict) -> list[str]:
    infer = server.channel.unary_unary(
        KSERVE + "ModelInfer",
        request_serializer=gs.ModelInferRequest.SerializeToString,
        response_deserializer=gs.ModelInferResponse.FromString,
    )
    request = gs.ModelInferRequest(model_name=case.get("model", MODEL), parameters=_kserve_parameters(case))
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(texts)]).contents.bytes_contents.extend(
        t.encode() for t in texts
    )
    reply = _grpc(infer, request)
    raw = reply.raw_output_contents[0]
    out, at = [], 0
    while at < len(raw):
        n = int.from_bytes(raw[at : at + 4], "little")
        out.append(raw[at + 4 : at + 4 + n].decode())
        at += 4 + n
    return out


def via_kserve_rest(server, texts: list[str], case: dict) -> list[str]:
    doc = {
        "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts)], "data": texts}],
        "parameters": _parameters(case),
    }
    return _post(server, f"/v2/models/{case.get('model', MODEL)}/infer", doc)["outputs"][0]["data"]


def via_generate(server, texts: list[str], case: dict) -> list[str]:
    path = f"/v2/models/{case.get('model', MODEL)}/generate"  # one text per request
    return [_post(server, path, {"text_input": t, "parameters": _parameters(case)})["text_output"] for t in texts]


def via_libretranslate(server, texts: list[str], case: dict) -> list[str]:
    if "model" in case:
        pytest.skip("LibreTranslate names no model: the language pair picks it")
    doc = {"q": texts, "source": case.get("source_language", "en"), "target": case.get("target_language", "de")}
    if "format" in case:
        doc["format"] = case["format"]
    if "beam_size" in case:
        doc["alternatives"] = case["beam_size"] - 1
    return _post(server, "/translate", doc)["translatedText"]


def via_deepl(server, texts: list[str], case: dict) -> list[str]:
    if "model" in case or "beam_size" in case:
        pytest.skip("DeepL's API names no model and has no decoding options")
    doc = {"text": texts, "source_lang": case["source_language"].upper(), "target_lang": case["target_language"]}
    if case.get("format") == "html":
        doc["tag_handling"] = "html"
    return [t["text"] for t in _post(server, "/v2/translate", doc, error="message")["translations"]]


DOORS = {
    "v1": via_v1,
    "kserve-grpc": via_kserve_grpc,
    "kserve-rest": via_kserve_rest,
    "generate": via_generate,
    "libretranslate": via_libretranslate,
    "deepl": via_deepl,
}
PAIR = {"source_language": "en", "target_language": "de"}
ANSWERED = {
    "texts": (["t5 t9 t17", "t4 t6"], PAIR, ["t17 t9 t5", "t6 t4"]),
    "blank lines": (["t5 t9\n\nt17 t4\n  t6\n"], PAIR, ["t9 t5\n\nt4 t17\n  t6\n"]),
    "html": (["<p>t5 t9</p><p>t17</p>"], {**PAIR, "format": "html"}, ["<p>t9 t5</p><p>t17</p>"]),
    # LibreTranslate and DeepL answer a batch's blank entries as sent: so does every door
    "blank texts": (["t5 t9", "", "  "], PAIR, ["t9 t5", "", "  "]),
}
REFUSED = {
    "over the character limit": (["t5 " * 100], PAIR, "invalid", str(MAX_TEXT_CHARS)),
    "unknown model": (["t5"], {**PAIR, "model": "nope"}, "not_found", "nope"),
    "unknown language pair": (["t5"], {"source_language": "en", "target_language": "xx"}, "invalid", "xx"),
    "option out of range": (["t5"], {**PAIR, "beam_size": 99}, "invalid", ""),
}


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("case", ANSWERED)
def test_every_door_gives_the_same_translations(server, door, case):
    texts, options, expected = ANSWERED[case]
    assert DOORS[door](server, texts, options) == expected


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("case", REFUSED)
def test_every_door_refuses_with_the_same_class_of_error(server, door, case):
    texts, options, kind, fragment = REFUSED[case]
    with pytest.raises(Refused) as err:
        DOORS[door](server, texts, options)
    assert err.value.kind == kind and fragment in str(err.value)


# ------------------------------------------------------------------- metrics


def v1_stream(server, text: str) -> None:
    stub = pb_grpc.InferenceServiceStub(server.channel)
    request = pb.TranslateRequest(model=MODEL, texts=[text], options=pb.DecodingOptions(**PAIR))
    chunks = list(stub.TranslateStream(request, timeout=60))
    assert chunks[-1].finish_reason == pb.FINISH_REASON_EOS


def kserve_stream(server, text: str) -> None:
    stream = server.channel.stream_stream(
        KSERVE + "ModelStreamInfer",
        request_serializer=gs.ModelInferRequest.SerializeToString,
        response_deserializer=gs.ModelStreamInferResponse.FromString,
    )
    request = gs.ModelInferRequest(model_name=MODEL, parameters=_kserve_parameters(PAIR))
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[1]).contents.bytes_contents.append(text.encode())
    replies = list(stream(iter([request]), timeout=60))
    assert not any(r.error_message for r in replies)
    assert replies[-1].infer_response.parameters["triton_final_response"].bool_param


def generate_stream(server, text: str) -> None:
    request = urllib.request.Request(
        f"http://{server.http_address}/v2/models/{MODEL}/generate_stream",
        json.dumps({"text_input": text, "parameters": PAIR}).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        assert b'"error"' not in reply.read()


WORK = {  # door -> (metrics method label, one text translated through it)
    "v1": ("Translate", lambda server, text: via_v1(server, [text], PAIR)),
    "v1 stream": ("TranslateStream", v1_stream),
    "kserve-grpc": ("kserve.ModelInfer", lambda server, text: via_kserve_grpc(server, [text], PAIR)),
    "kserve-grpc stream": ("kserve.ModelStreamInfer", kserve_stream),
    "kserve-rest": ("kserve.http.ModelInfer", lambda server, text: via_kserve_rest(server, [text], PAIR)),
    "generate": ("triton.http.Generate", lambda server, text: via_generate(server, [text], PAIR)),
    "generate stream": ("triton.http.GenerateStream", generate_stream),
    "libretranslate": ("libretranslate.translate", lambda server, text: via_libretranslate(server, [text], PAIR)),
    "deepl": ("deepl.translate", lambda server, text: via_deepl(server, [text], PAIR)),
}


def booked(server, method: str) -> dict[str, float]:
    """What the server has booked for MODEL: metrics and KServe's statistics."""
    engine = server.app.registry.models[MODEL].engine
    deadline = time.monotonic() + 10
    while (engine.active_sequences or engine.queued) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # the scheduler's step callback of the last token
    stats = server.app.calls.stats.get(MODEL)
    metric = functools.partial(server.metric, model=MODEL)
    return {
        "requests": metric("attnserve_requests_total", method=method, status="OK"),
        "queue_time": metric("attnserve_queue_time_seconds_count"),
        "sentences": metric("attnserve_request_sentences_sum"),
        "split_requests": metric("attnserve_request_sentences_count"),
        "characters": metric("attnserve_request_characters_sum"),
        "tokens": metric("attnserve_tokens_generated_total"),
        "inference_count": stats.inference_count if stats else 0,
        "queue_count": stats.queue.count if stats else 0,
        "successes": stats.success.count if stats else 0,
    }


def test_every_door_books_the_same_work_the_same_way(server):
    # two sentences (lines) of as many words and characters for every door, none sent before, so
    # every door's are decoded (a repeated sentence would come from the translation cache)
    words = [f"t{i}" for i in range(10, 24)]
    line = lambda i, ks: " ".join(words[(i + k) % len(words)] for k in ks)  # noqa: E731
    texts = [f"{line(i, (0, 1, 2))}\n{line(i, (3, 4))}" for i in range(len(WORK))]
    booked_by = {}
    for (door, (method, send)), text in zip(WORK.items(), texts):
        before = booked(server, method)
        send(server, text)
        after = booked(server, method)
        booked_by[door] = {k: after[k] - before[k] for k in after}
    expected = {
        "requests": 1,
        "queue_time": 1,
        "sentences": 2,
        "split_requests": 1,
        "characters": len(texts[0]),
        "tokens": booked_by["v1"]["tokens"],
        "inference_count": 1,
        "queue_count": 1,
        "successes": 1,
    }
    assert expected["tokens"] >= 7  # three words, two words and their end tokens
    assert booked_by == {door: expected for door in WORK}
