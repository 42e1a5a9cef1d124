"""The translation cache (``server/service/translation_cache.py``): a hit gives what a decode
gives, through every door, compared with a server whose cache is off; its key is everything the
engine is given; it stays within its bytes, least recently used first; a reload empties it for
the model; sampling never touches it; its metrics say what it did.

The live servers hold the KServe tests' word reverser ("t5 t9 t17" -> "t17 t9 t5") under a name
that declares English -> German, as the door-parity tests do, so every door reaches it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import io
import json
import shutil
import time
import tracemalloc
import urllib.request
import zipfile
from types import SimpleNamespace

import grpc
import numpy as np
import pytest

from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
from attnserve.server.service.translation_cache import MB, TranslationCache, field_values
from attnserve.server.shared.config import Settings
from attnserve.server.translation import DecodeOptions, Hypothesis, TranslationResult
from attnserve.server.translation.prepared import Prepared
from tests.support import office_files as office

from ..kserve.conftest import reverser_dir  # noqa: F401 - the reverser fixture
from ..test_door_parity import DOORS, PAIR

MODEL = "rev-en-de"
DEFAULT_MB = Settings.__dataclass_fields__["translation_cache_mb"].default


# ----------------------------------------------------------------------- the key


def _valid(model: str = "m", fingerprint: str = "v1", source: str = "en", target: str = "de"):
    return SimpleNamespace(model=SimpleNamespace(name=model, fingerprint=fingerprint), source_language=source,
                           target_language=target)  # fmt: skip


def _changed(name: str, value):
    """Another value of a field, from its default's type; a field of a new type fails here
    until this test learns it (and with it, that the cache keys on it)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 0.5
    if value is None:
        return 1
    if isinstance(value, tuple):
        return (*value, 5)
    pytest.fail(f"DecodeOptions.{name}: no way to change a {type(value).__name__} here; teach the test")


def test_the_key_is_everything_the_engine_is_given():
    # what the engine decodes from: a Prepared's fields. A field added to it must be added to the key
    assert [f.name for f in dataclasses.fields(Prepared)] == ["sources", "options", "max_new_tokens"]
    cache = TranslationCache(MB)
    base = Prepared([[5, 9, 2]], DecodeOptions(), 12)
    (key,) = cache.keys_of(_valid(), base)
    differing = {
        "model": cache.keys_of(_valid(model="other"), base),
        "version": cache.keys_of(_valid(fingerprint="v2"), base),
        "source language": cache.keys_of(_valid(source="fr"), base),
        "target language": cache.keys_of(_valid(target="fr"), base),
        "sentence": cache.keys_of(_valid(), dataclasses.replace(base, sources=[[5, 9, 3]])),
        "max_new_tokens": cache.keys_of(_valid(), dataclasses.replace(base, max_new_tokens=11)),
    }
    for f in dataclasses.fields(DecodeOptions):  # every option, whatever it is called
        options = dataclasses.replace(base.options, **{f.name: _changed(f.name, getattr(base.options, f.name))})
        differing[f"option {f.name}"] = cache.keys_of(_valid(), dataclasses.replace(base, options=options))
    assert {what: keys[0] != key for what, keys in differing.items()} == {what: True for what in differing}
    assert cache.keys_of(_valid(), Prepared([[5, 9, 2]], DecodeOptions(), 12)) == [key]  # equal input, equal key


def test_a_field_left_out_of_equality_is_still_in_the_key():
    @dataclasses.dataclass(frozen=True)
    class Options:
        beam_size: int = 1
        hidden: int = dataclasses.field(default=0, compare=False)

    assert Options(hidden=0) == Options(hidden=1)  # what a key built on == would miss
    assert field_values(Options(hidden=0)) != field_values(Options(hidden=1))


# ---------------------------------------------------------------------- bytes, LRU


def _result(tokens: int = 30, text_chars: int = 100, attention: bool = False) -> TranslationResult:
    ids = list(range(300, 300 + tokens))
    weights = np.full((tokens, tokens), 1.0 / tokens, np.float32) if attention else None
    hypothesis = Hypothesis("x" * text_chars, ids, -3.5, -0.1, "eos", attention=weights)
    return TranslationResult([hypothesis], tokens, 1.0, 2.0, 3.0, 4.0)


def _put(cache: TranslationCache, n: int, model: str = "m", **result) -> list[tuple]:
    keys = cache.keys_of(_valid(model), Prepared([[i, 7, 2] for i in range(n)], DecodeOptions(), 12))
    for key in keys:
        cache.put(key, model, _result(**result))
    return keys


def test_eviction_keeps_the_bytes_and_drops_the_least_recently_used():
    probe = TranslationCache(MB)
    _put(probe, 1)
    entry = probe.bytes
    cache = TranslationCache(10 * entry)
    keys = _put(cache, 10)
    assert len(cache) == 10 and cache.bytes == 10 * entry
    assert cache.get(keys[0]) is not None  # used: now the most recent
    more = cache.keys_of(_valid(), Prepared([[i, 8, 2] for i in range(3)], DecodeOptions(), 12))
    for key in more:
        cache.put(key, "m", _result())
    assert cache.bytes <= cache.max_bytes and len(cache) == 10
    assert [cache.get(k) is not None for k in keys[:5]] == [True, False, False, False, True]
    assert all(cache.get(k) is not None for k in more)
    assert cache.evictions.labels("m")._value.get() == 3


def test_an_entry_larger_than_the_cache_is_not_kept():
    cache = TranslationCache(4096)
    _put(cache, 1, attention=True)  # 30 x 30 float32 is 3,600 bytes of attention alone
    assert len(cache) == 0 and cache.bytes == 0


@pytest.mark.parametrize("attention", [False, True])
def test_the_bytes_counted_cover_what_python_holds(attention):
    """2,000 sentences of 30 tokens through the cache; once the engine's results and the request are
    gone, what is still allocated is what the cache holds: its count covers it, within 2x."""
    cache = TranslationCache(1 << 30)

    async def engine(prepared: Prepared, deadline=None) -> list[TranslationResult]:
        return [_result(attention=attention) for _ in prepared.sources]

    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        prepared = Prepared([[i, 7, 2] for i in range(2000)], DecodeOptions(), 12)
        asyncio.run(cache.translate(_valid(), prepared, engine, None))
        del prepared
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(cache) == 2000 and held <= cache.bytes <= 2 * held


def test_hits_are_the_decoded_results_with_no_time_spent():
    cache = TranslationCache(MB)
    (key,) = _put(cache, 1, attention=True)
    hit, original = cache.get(key), _result(attention=True)
    assert hit.hypotheses[0] == original.hypotheses[0]  # text, ids, scores, finish
    np.testing.assert_array_equal(hit.hypotheses[0].attention, original.hypotheses[0].attention)
    assert (hit.queue_ms, hit.encode_ms, hit.decode_ms, hit.first_token_ms) == (0.0, 0.0, 0.0, 0.0)
    with pytest.raises(ValueError):  # shared by every hit: nobody may change it
        hit.hypotheses[0].attention[0, 0] = 1.0


class _Engine:
    """Counts what it is asked to decode; each text's result names its ids."""

    def __init__(self) -> None:
        self.decoded: list[list[int]] = []

    async def translate(self, prepared: Prepared, deadline=None) -> list[TranslationResult]:
        self.decoded += prepared.sources
        return [TranslationResult([Hypothesis(str(s), list(s), -1.0, -1.0, "eos")], 3, 1, 1, 1, 1)
                for s in prepared.sources]  # fmt: skip


GREEDY = DecodeOptions()


def _through(cache: TranslationCache, engine: _Engine, sources, options=GREEDY):
    prepared = Prepared(sources, options, 12)
    return asyncio.run(cache.translate(_valid(), prepared, engine.translate, None))


def test_only_the_misses_go_to_the_engine_in_order():
    cache, engine = TranslationCache(MB), _Engine()
    first = _through(cache, engine, [[5, 2], [6, 2]])
    again = _through(cache, engine, [[7, 2], [5, 2], [6, 2], [8, 2]])
    assert engine.decoded == [[5, 2], [6, 2], [7, 2], [8, 2]]
    assert [r.hypotheses[0].text for r in again] == ["[7, 2]", "[5, 2]", "[6, 2]", "[8, 2]"]
    assert [r.hypotheses[0] for r in again[1:3]] == [r.hypotheses[0] for r in first]
    assert (cache.hits.labels("m")._value.get(), cache.misses.labels("m")._value.get()) == (2, 4)


def test_a_decode_begun_before_a_reload_is_answered_but_not_kept():
    cache = TranslationCache(MB)

    class Reloading(_Engine):
        async def translate(self, prepared: Prepared, deadline=None) -> list[TranslationResult]:
            cache.forget("m")  # the model's new version swaps in while these decode on the old one
            return await super().translate(prepared, deadline)

    (result,) = _through(cache, Reloading(), [[5, 2]])
    assert result.hypotheses[0].text == "[5, 2]" and len(cache) == 0 and cache.bytes == 0
    _through(cache, _Engine(), [[5, 2]])
    assert len(cache) == 1


def test_sampling_never_touches_the_cache_and_zero_turns_it_off():
    sampled = DecodeOptions(temperature=0.7, seed=1)
    cache, engine = TranslationCache(MB), _Engine()
    for _ in range(2):
        _through(cache, engine, [[5, 2]], sampled)
    assert engine.decoded == [[5, 2]] * 2 and len(cache) == 0
    assert cache.hits.labels("m")._value.get() == cache.misses.labels("m")._value.get() == 0
    off, engine = TranslationCache(0), _Engine()
    for _ in range(2):
        _through(off, engine, [[5, 2]])
    assert engine.decoded == [[5, 2]] * 2 and len(off) == 0


# ------------------------------------------------------------------- live servers


@pytest.fixture(scope="module")
def repo(reverser_dir, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("cache")
    shutil.copytree(reverser_dir, root / MODEL)
    manifest = json.loads((root / MODEL / "model.json").read_text())
    manifest |= {"name": MODEL, "languages": {"source": ["en"], "target": ["de"]}}
    (root / MODEL / "model.json").write_text(json.dumps(manifest))
    return root


def _serving(serve, repo, tmp_path_factory, **settings):
    """A live server with the cache at its default size (the test servers' is off: conftest.py)."""
    downloads = str(tmp_path_factory.mktemp("downloads"))
    settings = {"translation_cache_mb": DEFAULT_MB, **settings}
    return serve(repo, http_port=0, max_beam_size=4, language_detection="off", download_dir=downloads, **settings)


@pytest.fixture(scope="module")
def servers(serve, repo, tmp_path_factory):
    """(cache on at its default size, cache off), each with a gRPC channel."""
    with (
        _serving(serve, repo, tmp_path_factory) as on,
        _serving(serve, repo, tmp_path_factory, translation_cache_mb=0) as off,
    ):  # noqa: E501
        assert DEFAULT_MB == 64 and on.app.translation.cache.max_bytes == 64 * MB  # on by default
        assert not off.app.translation.cache.enabled
        with grpc.insecure_channel(on.address) as a, grpc.insecure_channel(off.address) as b:
            on.channel, off.channel = a, b
            yield on, off


def _counts(server) -> dict[str, float]:
    """The cache's metrics and the tokens decoded, once the engine has settled."""
    engine = server.app.registry.models[MODEL].engine
    deadline = time.monotonic() + 10
    while (engine.active_sequences or engine.queued) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # the scheduler's step callback of the last token
    metric = server.metric
    return {
        "hits": metric("attnserve_translation_cache_hits_total", model=MODEL),
        "misses": metric("attnserve_translation_cache_misses_total", model=MODEL),
        "bytes": metric("attnserve_translation_cache_bytes", model=MODEL),
        "tokens": metric("attnserve_tokens_generated_total", model=MODEL),
    }


def _moved(server, before: dict[str, float]) -> dict[str, float]:
    after = _counts(server)
    return {k: after[k] - before[k] for k in after}


def _v1(server, texts: list[str], **options) -> list[list[tuple]]:
    stub = pb_grpc.InferenceServiceStub(server.channel)
    wanted = pb.DecodingOptions(**PAIR, return_scores=True, return_token_ids=True, **options)
    reply = stub.Translate(pb.TranslateRequest(model=MODEL, texts=texts, options=wanted), timeout=60)
    return [[(h.text, h.score, h.logprob, tuple(h.token_ids)) for h in t.hypotheses] for t in reply.translations]


def test_hits_through_every_door_answer_what_a_server_without_the_cache_answers(servers):
    on, off = servers
    texts = ["t5 t9 t17\nt4 t6", "t11 t12 t13"]
    for door, send in DOORS.items():
        first = send(on, texts, PAIR)
        before = _counts(on)
        again = send(on, texts, PAIR)
        assert _moved(on, before) == {"hits": 3, "misses": 0, "bytes": 0, "tokens": 0}, door  # nothing decoded
        assert first == again == send(off, texts, PAIR), door
    for options in ({}, {"beam_size": 4, "num_hypotheses": 3, "length_penalty": 0.6}):  # scores and n-best too
        first = _v1(on, texts, **options)
        before = _counts(on)
        assert first == _v1(on, texts, **options) == _v1(off, texts, **options), options
        assert (_moved(on, before)["hits"], _moved(on, before)["misses"]) == (3, 0), options  # the second: 3 sentences
    assert {k: v for k, v in _counts(off).items() if k != "tokens"} == {"hits": 0, "misses": 0, "bytes": 0}


def test_a_documents_repeated_sentences_and_a_resubmitted_document_come_from_the_cache(servers):
    on, _ = servers
    text = "t7 t8 t9\nt10 t11\nt7 t8 t9\nt10 t11"  # two sentences, twice each
    before = _counts(on)
    first = _v1(on, [text])
    moved = _moved(on, before)
    assert (moved["hits"], moved["misses"]) == (0, 2) and moved["tokens"] > 0 and moved["bytes"] > 0
    before = _counts(on)
    assert _v1(on, [text]) == first
    assert _moved(on, before) == {"hits": 2, "misses": 0, "bytes": 0, "tokens": 0}


def _file(server, data: bytes) -> bytes:
    body, content_type = office.multipart({"source": "en", "target": "de"}, "doc.docx", data)
    request = urllib.request.Request(f"http://{server.http_address}/translate_file", body)
    request.add_header("Content-Type", content_type)
    with urllib.request.urlopen(request, timeout=60) as reply:
        url = json.loads(reply.read())["translatedFileUrl"]
    with urllib.request.urlopen(url, timeout=60) as reply:
        return reply.read()


def test_a_resubmitted_file_with_styled_runs_comes_from_the_cache(servers):
    on, off = servers
    paragraphs = [[("t5 ", ""), ("t9", "b"), (" t17", "")], [("t4 t6 t8", "i")], [("t13 ", ""), ("t14", "b")]]
    data = office.docx(paragraphs)
    before = _counts(on)
    first = _file(on, data)
    assert _moved(on, before)["misses"] == 3
    before = _counts(on)
    again = _file(on, data)
    assert _moved(on, before) == {"hits": 3, "misses": 0, "bytes": 0, "tokens": 0}
    document = [zipfile.ZipFile(io.BytesIO(d)).read("word/document.xml") for d in (first, again, _file(off, data))]
    assert document[0] == document[1] == document[2] and b"t17" in document[0]


def test_sampling_bypasses_the_cache_on_a_server(servers):
    on, _ = servers
    before = _counts(on)
    for _ in range(2):
        _v1(on, ["t15 t16 t17"], temperature=0.8, seed=3)
    moved = _moved(on, before)
    assert (moved["hits"], moved["misses"], moved["bytes"]) == (0, 0, 0) and moved["tokens"] > 0


def test_a_reload_empties_the_cache_for_the_model(serve, repo, tmp_path_factory, tmp_path):
    shutil.copytree(repo, tmp_path / "repo")  # its own: the module's servers watch theirs
    repo = tmp_path / "repo"
    with _serving(serve, repo, tmp_path_factory, repository_poll_seconds=0) as server:
        with grpc.insecure_channel(server.address) as channel:
            server.channel = channel
            expected = _v1(server, ["t5 t6", "t7 t8"])
            cache = server.app.translation.cache
            assert len(cache) == 2 and _counts(server)["bytes"] == cache.model_bytes(MODEL) > 0
            manifest = json.loads((repo / MODEL / "model.json").read_text())
            (repo / MODEL / "model.json").write_text(json.dumps({**manifest, "extra": {"task": "v2"}}))
            (outcome,) = server.loop_thread.run(server.app.reload([MODEL]))
            assert outcome.action == "reloaded"
            assert len(cache) == 0 and _counts(server)["bytes"] == 0
            before = _counts(server)
            assert _v1(server, ["t5 t6", "t7 t8"]) == expected  # the new version decodes them again
            assert _moved(server, before)["misses"] == 2
