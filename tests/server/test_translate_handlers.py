"""The Translate / TranslateStream handlers against a stand-in with the engine's API and
types: option mapping, replies, stream deltas, cancellation reaching the engine, engine
errors mapped to statuses. The real engine is tested end to end in test_translate.py.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import grpc
import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
from attnserve.server.runtime.registry import LoadedModel
from attnserve.server.shared.errors import InvalidRequest, Overloaded
from attnserve.server.translation import DecodeOptions, EngineSettings, Hypothesis, StreamEvent, TranslationResult
from attnserve.server.translation.prepared import ModelLimits


class FakeEngine:
    """Upper-cases words one step at a time; 'busy' -> Overloaded; 'bad' -> InvalidRequest."""

    max_source_len = 512  # what the documents of the translation service read: its tokenizer and source limit
    settings = EngineSettings()
    manifest = None  # no languages of its own
    # what the service checks options against: 16 new tokens at most, no special ids
    limits = ModelLimits(
        settings, SimpleNamespace(never_ids=(), pad_id=0, eos_id=2, cache_bytes_per_token=0), 512, 16, 1
    )

    def __init__(self) -> None:
        self.tokenizer = Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
        self.tokenizer.pre_tokenizer = Whitespace()
        self.options: list[DecodeOptions] = []
        self.active_sequences = self.queued = self.kv_cache_bytes = self.tokens_in_flight = 0
        self.kv_cache_capacity = self.kv_cache_row_bytes = 0
        self.step_attention = False  # as an engine whose decoder does not return its steps' attention
        self.closed_streams = 0
        self.on_step = None

    def prepare(self, texts, options, tokenised=None, max_new_tokens=None):  # tokenised: the document splitter's ids
        if any(t == "bad" for t in texts):
            raise InvalidRequest("text 'bad' is refused")
        return list(texts), options  # the real engine's Prepared holds token ids instead

    async def translate(self, prepared, deadline=None):
        texts, options = prepared
        self.options.append(options)
        if "busy" in texts:
            raise Overloaded("too many tokens in flight")
        return [
            TranslationResult(
                [Hypothesis(t.upper(), [7, 2], -1.5, -0.75, "eos")], len(t.split()) + 1, 1.0, 2.0, 3.0, 4.0
            )
            for t in texts
        ]

    async def stream(self, prepared, deadline=None):
        (text,), options = prepared
        self.options.append(options)
        self.active_sequences += 1
        try:
            words = text.split()
            for i, word in enumerate(words):
                await asyncio.sleep(0.05 if word == "slow" else 0)
                yield StreamEvent((" " if i else "") + word.upper(), (10 + i,), None)
                if self.on_step is not None:
                    self.on_step(1, 1)
            yield StreamEvent("", (2,), "eos")
        finally:
            self.active_sequences -= 1
            self.closed_streams += 1

    async def start(self):
        pass

    async def stop(self, grace_s):
        pass


@pytest.fixture
def server(serve, repo, vit_dirs):
    with serve(repo) as handle:
        digits = handle.app.registry.models["digits"]
        engine = FakeEngine()
        handle.app.registry.models["fake"] = LoadedModel(
            "fake", "translation", digits.model_dir, digits.manifest, "cpu", 0.0, engine=engine
        )
        handle.app.metrics.watch_engine("fake", engine)
        handle.engine = engine
        yield handle


def test_translate_reply_and_option_mapping(server):
    with server.client() as client:
        (result,) = client.translate(
            "hello world", beam_size=3, num_hypotheses=2, length_penalty=0.0, max_new_tokens=9, top_k=4,
            return_scores=True, return_token_ids=True,
        )  # fmt: skip
        assert result.text == "HELLO WORLD" and result.source_tokens == 3
        hyp = result.hypotheses[0]
        assert (hyp.token_ids, hyp.score, hyp.logprob, hyp.finish_reason) == ([7, 2], -0.75, -1.5, "eos")
        assert result.timing == {"queue_ms": 1.0, "encode_ms": 2.0, "decode_ms": 3.0, "first_token_ms": 4.0}
        (plain,) = client.translate("x", "fake")  # no scores / ids unless asked for
        assert plain.hypotheses[0].score is None and plain.hypotheses[0].token_ids == []
        client.translate("x", temperature=0.7, top_p=0.5, seed=11)
    beam, default, sampled = server.engine.options
    # more than one hypothesis asked for: the search keeps all its beam's, so duplicates can make way
    assert beam == DecodeOptions(beam_size=3, num_hypotheses=3, length_penalty=0.0, max_new_tokens=9, top_k=4)
    assert default == DecodeOptions(return_scores=False)  # unset optionals take the engine's defaults
    assert sampled == DecodeOptions(temperature=pytest.approx(0.7), top_p=0.5, seed=11, return_scores=False)


def test_mode_sampling_defaults_temperature_to_one(server):
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.InferenceServiceStub(channel)
        options = pb.DecodingOptions(mode=pb.DECODING_MODE_SAMPLING)
        stub.Translate(pb.TranslateRequest(texts=["x"], options=options), timeout=10)
    assert server.engine.options[-1].temperature == 1.0


def test_stream_deltas_and_finish_reason(server):
    with server.client() as client:
        chunks = list(client.translate_stream("a b c", return_token_ids=True))
    assert "".join(c.delta for c in chunks) == "A B C"
    assert [t for c in chunks for t in c.token_ids] == [10, 11, 12, 2]
    assert chunks[-1].finish_reason == "eos" and all(not c.finish_reason for c in chunks[:-1])
    assert server.metric("attnserve_tokens_generated_total", model="fake") == 3


def test_cancelled_stream_closes_the_engine_stream(server):
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.InferenceServiceStub(channel)
        call = stub.TranslateStream(pb.TranslateRequest(texts=["a " + "slow " * 100]), timeout=30)
        next(call)
        assert server.metric("attnserve_active_sequences", model="fake") == 1
        call.cancel()
        deadline = time.monotonic() + 5
        while server.engine.active_sequences and time.monotonic() < deadline:
            time.sleep(0.01)
    assert server.engine.active_sequences == 0 and server.engine.closed_streams == 1
    assert server.metric("attnserve_active_sequences", model="fake") == 0


@pytest.mark.parametrize(
    ("texts", "options", "code", "fragment"),
    [
        (["bad"], {}, grpc.StatusCode.INVALID_ARGUMENT, "text 'bad' is refused"),
        (["busy"], {}, grpc.StatusCode.RESOURCE_EXHAUSTED, "too many tokens in flight"),
        ([], {}, grpc.StatusCode.INVALID_ARGUMENT, "texts is empty"),
        (["x"], {"mode": 7}, grpc.StatusCode.INVALID_ARGUMENT, "options.mode: unknown value 7"),
        (["x"], {"temperature": -1}, grpc.StatusCode.INVALID_ARGUMENT, "temperature"),
        (["x"], {"length_penalty": float("nan")}, grpc.StatusCode.INVALID_ARGUMENT, "finite"),
        (
            ["x"],
            {"mode": pb.DECODING_MODE_BEAM_SEARCH, "temperature": 0.5},
            grpc.StatusCode.INVALID_ARGUMENT,
            "mode beam_search",
        ),
    ],
)
def test_engine_and_option_errors_map_to_statuses(server, texts, options, code, fragment):
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.InferenceServiceStub(channel)
        request = pb.TranslateRequest(model="fake", texts=texts, options=pb.DecodingOptions(**options))
        with pytest.raises(grpc.RpcError) as err:
            stub.Translate(request, timeout=10)
        assert err.value.code() == code and fragment in err.value.details()
        assert stub.Translate(pb.TranslateRequest(model="fake", texts=["ok"]), timeout=10).translations
