"""Translate and TranslateStream over a real channel against the PyTorch reference decoder."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
import torch

from attnserve.client import AttnServeError
from attnserve.client.cli import main as client_main
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

from .conftest import digit_png

VOCAB = 60
MAX_SOURCE, MAX_TARGET = 16, 300
SOURCES = ["t5 t17 t9", "t30", "t12 t13 t14 t15 t16 t40 t41", "t7 t7 t7 t7", "t55 t4", "t20 t21 t22 t23 t24 t25"]


@pytest.fixture(scope="module")
def mt(tmp_path_factory, vit_dirs):
    """A tiny random translation model, its export, and a repo with it and the digits ViT."""
    from attnserve.export.modeldir import placeholder_tokenizer, write_translation_dir
    from attnserve.models import TranslationConfig, TranslationTransformer

    torch.manual_seed(0)
    cfg = TranslationConfig(
        vocab_size=VOCAB, d_model=32, num_heads=4, encoder_layers=1, decoder_layers=2, ffn_dim=64, dropout=0.0
    )
    model = TranslationTransformer(cfg).eval()
    repo = tmp_path_factory.mktemp("mt-repo")
    tokenizer = placeholder_tokenizer(VOCAB)
    write_translation_dir(
        model, repo / "mt", tokenizer, name="mt", max_source_len=MAX_SOURCE, max_target_len=MAX_TARGET
    )
    (repo / "digits").symlink_to(vit_dirs["digits"], target_is_directory=True)
    return {"model": model, "repo": repo, "tokenizer": tokenizer}


def _src(mt, text: str) -> torch.Tensor:
    return torch.tensor([mt["tokenizer"].encode(text).ids])  # (1, L) with eos


def reference_greedy(mt, text: str, max_new_tokens: int):
    from attnserve.models import greedy_decode

    return greedy_decode(mt["model"], _src(mt, text), max_new_tokens=max_new_tokens)[0]


def reference_beam(mt, text: str, beam: int, max_new_tokens: int, num_hypotheses: int, length_penalty: float = 1.0):
    from attnserve.models import beam_search

    return beam_search(mt["model"], _src(mt, text), beam, max_new_tokens, length_penalty, num_hypotheses)[0]


@pytest.fixture(scope="module")
def server(serve, mt):
    # one message per streamed token (stream_interval_ms=0): the stream tests count them
    with serve(mt["repo"], max_beam_size=4, max_texts_per_request=8, stream_interval_ms=0) as handle:
        yield handle


@pytest.fixture(scope="module")
def stub(server):
    with grpc.insecure_channel(server.address) as channel:
        yield pb_grpc.InferenceServiceStub(channel)


def test_greedy_gives_the_reference_tokens(server, mt):
    with server.client() as client:
        results = client.translate(SOURCES, "mt", max_new_tokens=20, return_token_ids=True, return_scores=True)
    assert len(results) == len(SOURCES)
    for text, result in zip(SOURCES, results):
        ref = reference_greedy(mt, text, 20)
        (hyp,) = result.hypotheses
        assert hyp.token_ids == ref.tokens, text
        assert hyp.finish_reason == ref.finish
        assert hyp.text == mt["tokenizer"].decode(ref.tokens, skip_special_tokens=True)
        assert hyp.logprob == pytest.approx(ref.logprob, abs=1e-3)
        assert result.source_tokens == len(mt["tokenizer"].encode(text).ids)
        assert result.timing["decode_ms"] > 0


def test_beam_search_gives_the_reference_hypotheses(server, mt):
    with server.client() as client:
        results = client.translate(
            SOURCES[:3], "mt", beam_size=3, num_hypotheses=2, max_new_tokens=12, return_token_ids=True,
            return_scores=True, length_penalty=0.6,
        )  # fmt: skip
    for text, result in zip(SOURCES[:3], results):
        ref = reference_beam(mt, text, 3, 12, 2, 0.6)
        assert [h.token_ids for h in result.hypotheses] == [r.tokens for r in ref], text
        assert [h.score for h in result.hypotheses] == pytest.approx([r.score for r in ref], abs=1e-3)


def test_stream_deltas_concatenate_to_the_unary_result(server, mt):
    with server.client() as client:
        for text in SOURCES[:3]:
            (unary,) = client.translate([text], "mt", max_new_tokens=25, return_token_ids=True)
            chunks = list(client.translate_stream(text, "mt", max_new_tokens=25, return_token_ids=True))
            assert "".join(c.delta for c in chunks) == unary.text
            assert [t for c in chunks for t in c.token_ids] == unary.hypotheses[0].token_ids
            assert chunks[-1].finish_reason == unary.hypotheses[0].finish_reason
            assert all(c.finish_reason == "" for c in chunks[:-1])


def test_a_stream_interval_gathers_tokens_into_fewer_messages(serve, mt):
    """The server's default stream interval: the first token alone and at once, the others
    gathered; the client gets the same text and tokens in fewer messages."""
    with serve(mt["repo"], stream_interval_ms=60_000) as handle, handle.client() as client:
        for text in SOURCES[:3]:
            (unary,) = client.translate([text], "mt", max_new_tokens=25, return_token_ids=True)
            tokens = unary.hypotheses[0].token_ids
            chunks = list(client.translate_stream(text, "mt", max_new_tokens=25, return_token_ids=True))
            assert [len(c.token_ids) for c in chunks] == [1, len(tokens) - 1][: len(tokens)]
            assert [t for c in chunks for t in c.token_ids] == tokens
            assert "".join(c.delta for c in chunks) == unary.text
            assert [c.finish_reason for c in chunks] == ["", unary.hypotheses[0].finish_reason]


def test_concurrent_mixed_lengths_each_get_their_own_tokens(server, mt):
    """Continuous batching must not mix rows: every request gets its own reference tokens."""
    jobs = [(SOURCES[i % len(SOURCES)], 3 + (7 * i) % 29) for i in range(24)]
    expected = [reference_greedy(mt, text, n).tokens for text, n in jobs]

    def one(job):
        text, n = job
        with server.client() as client:
            if n % 2:
                chunks = client.translate_stream(text, "mt", max_new_tokens=n, return_token_ids=True)
                return [t for c in chunks for t in c.token_ids]
            return client.translate([text], "mt", max_new_tokens=n, return_token_ids=True)[0].hypotheses[0].token_ids

    with ThreadPoolExecutor(12) as pool:
        got = list(pool.map(one, jobs))
    assert got == expected
    assert server.metric("attnserve_tokens_generated_total", model="mt") >= sum(len(t) for t in expected)
    assert server.metric("attnserve_active_sequences", model="mt") == 0


def test_blank_texts_come_back_as_sent_without_the_model(server):
    """A blank text in a batch is answered as sent (one hypothesis: there is no other text to
    offer), in a stream too; the other texts of the batch are translated as alone."""
    with server.client() as client:
        before = server.metric("attnserve_tokens_generated_total", model="mt")
        results = client.translate(["", "  \n"], "mt", beam_size=2, num_hypotheses=2, return_token_ids=True)
        assert [[h.text for h in r.hypotheses] for r in results] == [[""], ["  \n"]]
        assert all(not h.token_ids for r in results for h in r.hypotheses)
        assert server.metric("attnserve_tokens_generated_total", model="mt") == before  # no decoding
        alone = client.translate(["t5 t6"], "mt")[0].hypotheses[0].text
        assert [r.hypotheses[0].text for r in client.translate([" ", "t5 t6"], "mt")] == [" ", alone]
        assert "".join(c.delta for c in client.translate_stream("  ", "mt")) == "  "


def test_sampling_is_reproducible_with_a_seed(server):
    with server.client() as client:
        kwargs = dict(temperature=0.8, top_k=10, top_p=0.9, seed=123, max_new_tokens=15, return_token_ids=True)
        a = client.translate(["t5 t6"], "mt", **kwargs)[0].hypotheses[0].token_ids
        b = client.translate(["t5 t6"], "mt", **kwargs)[0].hypotheses[0].token_ids
        assert a == b and 1 <= len(a) <= 15


def _options(**kw) -> pb.DecodingOptions:
    return pb.DecodingOptions(**kw)


INVALID = grpc.StatusCode.INVALID_ARGUMENT
TRANSLATE_CASES = {
    "unknown model": (pb.TranslateRequest(model="nope", texts=["t5"]), grpc.StatusCode.NOT_FOUND),
    "no texts": (pb.TranslateRequest(model="mt"), INVALID),
    "unknown format value": (pb.TranslateRequest(model="mt", texts=["t5"], format=7), INVALID),
    "too many texts": (pb.TranslateRequest(model="mt", texts=["t5"] * 9), INVALID),
    "a 1 MB text": (pb.TranslateRequest(model="mt", texts=["t5 " * 350_000]), INVALID),
    "unknown mode value": (pb.TranslateRequest(model="mt", texts=["t5"], options=_options(mode=9)), INVALID),
    "beam over the limit": (pb.TranslateRequest(model="mt", texts=["t5"], options=_options(beam_size=5)), INVALID),
    "more hypotheses than beams": (
        pb.TranslateRequest(model="mt", texts=["t5"], options=_options(beam_size=2, num_hypotheses=3)),
        INVALID,
    ),
    "max_new_tokens over the model's limit": (
        pb.TranslateRequest(model="mt", texts=["t5"], options=_options(max_new_tokens=MAX_TARGET + 1)),
        INVALID,
    ),
    "top_p out of range": (pb.TranslateRequest(model="mt", texts=["t5"], options=_options(top_p=1.5)), INVALID),
    "sampling with beams": (
        pb.TranslateRequest(model="mt", texts=["t5"], options=_options(mode=pb.DECODING_MODE_SAMPLING, beam_size=2)),
        INVALID,
    ),
    "greedy with a temperature": (
        pb.TranslateRequest(model="mt", texts=["t5"], options=_options(mode=pb.DECODING_MODE_GREEDY, temperature=1)),
        INVALID,
    ),
    "classify on a translator": (pb.ClassifyRequest(model="mt", images=[pb.ImageInput(encoded=digit_png(1))]), INVALID),
}


def _good(stub) -> None:
    reply = stub.Translate(pb.TranslateRequest(model="mt", texts=["t5 t6"]), timeout=20)
    assert len(reply.translations) == 1


@pytest.mark.parametrize("case", list(TRANSLATE_CASES))
def test_bad_translate_requests(stub, case):
    request, code = TRANSLATE_CASES[case]
    method = stub.Classify if isinstance(request, pb.ClassifyRequest) else stub.Translate
    with pytest.raises(grpc.RpcError) as err:
        method(request, timeout=20)
    assert err.value.code() == code, err.value.details()
    assert err.value.details() and "Traceback" not in err.value.details()
    _good(stub)


def test_a_model_of_the_other_kind_is_refused_naming_its_kind(stub):
    with pytest.raises(grpc.RpcError) as err:
        stub.Classify(pb.ClassifyRequest(model="mt", images=[pb.ImageInput(encoded=digit_png(1))]), timeout=20)
    assert err.value.details() == "model 'mt' is a translation model, not image-classification"
    with pytest.raises(grpc.RpcError) as err:
        stub.Translate(pb.TranslateRequest(model="digits", texts=["t5"]), timeout=20)
    assert err.value.details() == "model 'digits' is an image-classification model, not translation"


@pytest.mark.parametrize(
    "request_",
    [
        pb.TranslateRequest(model="mt", texts=["t5", "t6"]),  # one text per stream
        pb.TranslateRequest(model="mt", texts=["t5"], options=_options(beam_size=2)),  # no beam search streamed
    ],
    ids=["two texts", "beam"],
)
def test_bad_stream_requests(stub, request_):
    with pytest.raises(grpc.RpcError) as err:
        list(stub.TranslateStream(request_, timeout=20))
    assert err.value.code() == INVALID
    _good(stub)


@pytest.fixture(scope="module")
def long_source(mt) -> str:
    """A source whose greedy output runs to the length limit (no early eos): a long stream."""
    for i in range(4, VOCAB):
        text = f"t{i} t{(i * 7) % (VOCAB - 4) + 4}"
        if reference_greedy(mt, text, MAX_TARGET).finish == "length":
            return text
    pytest.skip("no source of this random model decodes to the length limit")


def _wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_cancelling_a_stream_frees_its_sequence(server, stub, long_source):
    text = long_source
    before = server.metric("attnserve_tokens_generated_total", model="mt")
    call = stub.TranslateStream(pb.TranslateRequest(model="mt", texts=[text]), timeout=60)
    for _ in range(3):
        next(call)
    # while it decodes, /metrics says what its row of the cache holds: the slot's capacity in
    # tokens (at least the tokens made so far) and its bytes at that capacity
    assert server.metric("attnserve_kv_cache_capacity_tokens", model="mt") >= 3
    assert server.metric("attnserve_kv_cache_row_bytes", model="mt") > 0
    call.cancel()
    assert _wait_for(lambda: server.metric("attnserve_active_sequences", model="mt") == 0)
    generated = server.metric("attnserve_tokens_generated_total", model="mt") - before
    assert generated < MAX_TARGET, "the cancelled stream decoded to the end"
    assert server.metric("attnserve_kv_cache_bytes", model="mt") == 0
    assert server.metric("attnserve_kv_cache_row_bytes", model="mt") == 0
    _good(stub)


def test_deadline_drops_the_translation(server, stub, long_source):
    # Eight texts x four beams decoded to the length limit: about 0.25 s of work on 2 cores for this
    # tiny model, five times the deadline below.
    request = pb.TranslateRequest(model="mt", texts=[long_source] * 8, options=pb.DecodingOptions(beam_size=4))
    tokens = lambda: server.metric("attnserve_tokens_generated_total", model="mt")  # noqa: E731
    before = tokens()
    stub.Translate(request, timeout=60)
    full = tokens() - before  # what the whole request generates
    before = tokens()
    with pytest.raises(grpc.RpcError) as err:
        stub.Translate(request, timeout=0.05)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert _wait_for(lambda: server.metric("attnserve_active_sequences", model="mt") == 0)
    assert tokens() - before < full, "the expired request was decoded to the end"
    _good(stub)


def test_overload_is_resource_exhausted(serve, mt, long_source):
    """One row at a time and two texts waiting: a burst of long requests gets RESOURCE_EXHAUSTED
    for some, and the correct tokens for the others."""
    text = long_source
    expected = reference_greedy(mt, text, 100).tokens
    with serve(mt["repo"], max_active_sequences=1, max_translation_queue=2) as server:
        barrier = threading.Barrier(8)

        def one(_):
            with server.client() as client:
                barrier.wait()
                try:
                    return client.translate([text], "mt", max_new_tokens=100, return_token_ids=True)[0]
                except AttnServeError as exc:
                    return exc.code

        with ThreadPoolExecutor(8) as pool:
            outcomes = list(pool.map(one, range(8)))
        codes = [o for o in outcomes if isinstance(o, grpc.StatusCode)]
        assert codes and set(codes) == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert all(o.hypotheses[0].token_ids == expected for o in outcomes if not isinstance(o, grpc.StatusCode))
        with server.client() as client:
            assert client.translate(["t5"], "mt")[0].hypotheses


def test_model_info_and_health(server):
    with server.client() as client:
        info = client.get_model("mt")
        assert info.kind == "translation" and info.ready
        assert info.limits["max_source_len"] == MAX_SOURCE and info.limits["max_target_len"] == MAX_TARGET
        assert info.limits["max_beam_size"] == 4
        assert client.health("mt") == "SERVING"


def test_client_cli_translate(server, capsys):
    address = ["--address", server.address]
    with server.client() as client:
        (hyp,) = client.translate(["t5 t17"], "mt", max_new_tokens=10)[0].hypotheses
    cut = "  (cut at --max-new-tokens 10)" if hyp.finish_reason == "length" else ""  # a text that stops short says so
    assert client_main([*address, "translate", "t5 t17", "--model", "mt", "--max-new-tokens", "10"]) == 0
    assert capsys.readouterr().out.strip() == hyp.text + cut
    assert client_main([*address, "translate", "--stream", "t5 t17", "--model", "mt", "--max-new-tokens", "10"]) == 0
    assert capsys.readouterr().out.strip() == hyp.text


def test_client_cli_says_when_a_translation_was_cut(server, long_source, capsys):
    with server.client() as client:
        (result,) = client.translate([long_source], "mt", max_new_tokens=3, return_scores=True, quality=True)
    hyp, quality = result.hypotheses[0], result.quality
    assert hyp.finish_reason == "length"
    args = ["--address", server.address, "translate", long_source, "--model", "mt", "--max-new-tokens", "3"]
    assert client_main([*args, "--scores"]) == 0  # --scores shows the quality score too
    likely = ", likely wrong" if quality.score < 0.5 else ""
    cut = f"cut at --max-new-tokens 3; quality {quality.score:.2f}{likely}"
    expected = f"{hyp.text}  (score={hyp.score:.4f} logprob={hyp.logprob:.4f}; {cut})"
    assert capsys.readouterr().out == expected + "\n"
