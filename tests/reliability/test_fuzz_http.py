"""Fuzzing the HTTP routes beside KServe v2: Triton's generate / generate_stream and the
LibreTranslate API. Malformed and deeply nested JSON, wrong types in every field, broken
forms and multipart bodies, raw bytes, bodies over the size limit.

Documented outcomes only: 200, 400, 404, 413, 429, each error with a JSON ``{"error": ...}``
(a stream that already started may end with a ``data: {"error": ...}`` event). Never 500,
never a hang; after every example the translator still answers as before and nothing of
its decode batch is left behind.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

MAX_MESSAGE = 1 << 16
CALL_TIMEOUT = 60.0
FUZZ = settings(
    max_examples=80,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
HTTP_OK = {200, 400, 404, 413, 429}
TRIED: Counter = Counter()
STATUSES: Counter = Counter()
MODEL = "mt-en-de"


@pytest.fixture(scope="module")
def http_repo(tmp_path_factory, mt) -> Path:
    root = tmp_path_factory.mktemp("fuzz-http-repo")
    shutil.copytree(mt.model_dir, root / MODEL)
    manifest = json.loads((root / MODEL / "model.json").read_text())
    manifest.update(name=MODEL, languages={"source": ["en"], "target": ["de"]})
    (root / MODEL / "model.json").write_text(json.dumps(manifest))
    return root


@pytest.fixture(scope="module")
def server(serve, http_repo):
    with serve(
        http_repo,
        http_port=0,
        max_message_bytes=MAX_MESSAGE,
        max_texts_per_request=8,
        max_beam_size=4,
        max_active_sequences=16,
    ) as handle:
        yield handle


def _send(server, method: str, path: str, body: bytes | None, headers: dict) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://{server.http_address}{path}", data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=CALL_TIMEOUT) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _check(server, method: str, path: str, body: bytes | None, headers: dict) -> int:
    status, payload = _send(server, method, path, body, headers)
    STATUSES[f"{path.rsplit('/', 1)[-1]} {status}"] += 1
    # /detect with language detection off: 403, as LibreTranslate answers a disabled feature
    detection_off = path == "/detect" and server.app.settings.language_detection == "off"
    assert status in HTTP_OK or (status == 403 and detection_off), (status, payload[:300])
    if status != 200:
        doc = json.loads(payload)
        assert isinstance(doc["error"], str) and "Traceback" not in doc["error"], doc
        assert status != 403 or doc["error"].startswith("Language detection is disabled"), doc
    elif path.endswith("generate_stream"):
        for event in (json.loads(e[len("data: ") :]) for e in payload.decode().split("\n\n") if e):
            assert "text_output" in event or not event["error"].startswith("internal error"), event
    else:
        json.loads(payload)
    return status


@pytest.fixture(scope="module")
def still_serving(server):
    """The same text translated again, identically, and the translator idle."""
    body = json.dumps({"q": "t5 t9 t17", "source": "en", "target": "de"}).encode()
    headers = {"Content-Type": "application/json"}
    status, expected = _send(server, "POST", "/translate", body, headers)
    assert status == 200
    engine = server.app.registry.models[MODEL].engine

    def check() -> None:
        assert _send(server, "POST", "/translate", body, headers) == (200, expected)
        assert engine.queued == 0

    return check


# ------------------------------------------------------------------------- strategies

JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10)),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
TEXTS = st.one_of(
    st.lists(st.sampled_from(["t5", "t17", "t42", "hello", "</s>", "<b>", "&amp;"]), max_size=12).map(" ".join),
    st.text(max_size=30),
    st.sampled_from(["", "   ", "t5 " * 3000, "🙂" * 50, "\x00", "\ud800"]),
)
LANGS = st.one_of(st.sampled_from(["en", "de", "auto"]), st.sampled_from(["fr", "", "EN", "xx"]), JSON_VALUES)
PARAMS = st.dictionaries(
    st.sampled_from(["beam_size", "num_hypotheses", "max_new_tokens", "temperature", "top_k", "top_p", "seed"])
    | st.sampled_from(["mode", "length_penalty", "timeout", "priority", "temprature"]),
    st.one_of(st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(), st.text(max_size=8)),
    max_size=4,
)


WORDS = st.lists(st.sampled_from(["t5", "t17", "t42", "t9"]), min_size=1, max_size=8).map(" ".join)
VALID_FIELDS = st.fixed_dictionaries(
    {
        "q": st.one_of(WORDS, st.lists(WORDS, min_size=1, max_size=4)),
        "source": st.sampled_from(["en", "auto"]),
        "target": st.just("de"),
    },
    optional={"alternatives": st.integers(0, 3), "format": st.just("text")},
)


@st.composite
def libretranslate_fields(draw) -> dict:
    if draw(st.booleans()):
        return draw(VALID_FIELDS)
    fields = {
        "q": draw(st.one_of(TEXTS, st.lists(TEXTS, max_size=10), JSON_VALUES)),
        "source": draw(LANGS),
        "target": draw(LANGS),
    }
    if draw(st.booleans()):
        fields["format"] = draw(st.one_of(st.sampled_from(["text", "html", "xml", ""]), JSON_VALUES))
    if draw(st.booleans()):
        fields["alternatives"] = draw(st.one_of(st.integers(-5, 10**20), st.text(max_size=6), JSON_VALUES))
    if draw(st.booleans()):
        fields["api_key"] = draw(st.one_of(st.text(max_size=8), JSON_VALUES))
    keys = draw(st.lists(st.sampled_from(sorted(fields)), max_size=1))  # a field left out
    return {k: fields[k] for k in fields if k not in keys or k == "q"}


def _encode(draw, fields: dict) -> tuple[bytes, dict]:
    kind = draw(st.sampled_from(["json", "form", "multipart", "bytes", "nested"]))
    if kind == "json":
        return json.dumps(fields).encode(), {"Content-Type": "application/json"}
    if kind == "form":
        flat = {k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()}
        return urllib.parse.urlencode(flat).encode(), {"Content-Type": "application/x-www-form-urlencoded"}
    if kind == "multipart":
        boundary = draw(st.sampled_from(["b0undary", "", "x" * 80]))
        parts = "".join(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields.items()
        )
        tail = draw(st.sampled_from([f"--{boundary}--\r\n", "", "--"]))
        body = (parts + tail).encode("utf-8", "surrogatepass")
        return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    if kind == "nested":  # deeper than the JSON parser recurses
        depth = draw(st.sampled_from([10, 5000, 30_000]))
        return ("[" * depth + "]" * depth).encode(), {"Content-Type": "application/json"}
    content_type = draw(st.sampled_from(["application/json", "application/x-www-form-urlencoded", "text/plain"]))
    return draw(st.binary(max_size=300)), {"Content-Type": content_type}


@st.composite
def libretranslate_bodies(draw) -> tuple[bytes, dict]:
    return _encode(draw, draw(libretranslate_fields()))


@st.composite
def generate_bodies(draw) -> tuple[bytes, dict]:
    doc = {"text_input": draw(st.one_of(TEXTS, JSON_VALUES)), "parameters": draw(st.one_of(PARAMS, JSON_VALUES))}
    if draw(st.booleans()):
        doc.pop(draw(st.sampled_from(sorted(doc))))
    if draw(st.booleans()):
        doc[draw(st.text(max_size=8))] = draw(JSON_VALUES)
    body, headers = _encode(draw, doc)
    return body, headers


# ----------------------------------------------------------------------------- tests


@FUZZ
@given(path=st.sampled_from(["/translate", "/detect"]), body=libretranslate_bodies())
def test_fuzz_libretranslate(server, still_serving, path, body):
    TRIED[path] += 1
    _check(server, "POST", path, *body)
    still_serving()


@FUZZ
@given(
    route=st.sampled_from(["generate", "generate_stream"]),
    model=st.sampled_from([MODEL, MODEL, "nope"]),
    body=generate_bodies(),
)
def test_fuzz_generate(server, still_serving, route, model, body):
    TRIED[route] += 1
    _check(server, "POST", f"/v2/models/{model}/{route}", *body)
    still_serving()


@pytest.mark.parametrize(
    "path", ["/translate", "/detect", f"/v2/models/{MODEL}/generate", f"/v2/models/{MODEL}/generate_stream"]
)
@pytest.mark.parametrize("encoding", ["json", "form", "multipart"])
def test_bodies_over_the_limit_are_413(server, still_serving, path, encoding):
    TRIED["oversize"] += 1
    huge = "t5 " * MAX_MESSAGE
    if encoding == "json":
        body, content_type = json.dumps({"q": huge, "text_input": huge}).encode(), "application/json"
    elif encoding == "form":
        body, content_type = urllib.parse.urlencode({"q": huge}).encode(), "application/x-www-form-urlencoded"
    else:
        body = f'--b\r\nContent-Disposition: form-data; name="q"\r\n\r\n{huge}\r\n--b--\r\n'.encode()
        content_type = "multipart/form-data; boundary=b"
    status, payload = _send(server, "POST", path, body, {"Content-Type": content_type})
    assert status == 413 and "over the limit" in json.loads(payload)["error"]
    still_serving()


def test_languages_and_settings_ignore_a_body(server):
    TRIED["GET"] += 2
    for path in ("/languages", "/frontend/settings"):
        assert _check(server, "GET", path, b"api_key=x&junk=%ff", {}) == 200


def test_report_inputs_tried(figures, server):
    """Runs last in this module: reports the counts; nothing failed inside the server."""
    for kind, n in sorted(TRIED.items()):
        figures(f"http fuzz inputs tried ({kind})", n)
    for status, n in sorted(STATUSES.items()):
        figures(f"http fuzz replies {status}", n)
    assert sum(TRIED.values()) > 0
    for metric in server.app.metrics.registry.collect():
        for sample in metric.samples:
            if sample.name == "attnserve_requests_total":
                assert sample.labels["status"] != "INTERNAL" or sample.value == 0, sample
