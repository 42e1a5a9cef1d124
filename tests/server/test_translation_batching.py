"""``--translation-batching``: continuous (join the running decode batch at once) vs static
(wait until the running batch has finished), seen from a client of a live server."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
import torch

from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

# LONG: long enough (~0.5 s) that the client's lag in reading the stream's first chunk, which is
# when the short request is sent, stays a small part of it on a loaded machine
VOCAB, LONG, SHORT = 60, 3000, 4


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A tiny random translator that never emits its end token: every text runs to max_new_tokens."""
    from attnserve.export.modeldir import placeholder_tokenizer, write_translation_dir
    from attnserve.models import TranslationConfig, TranslationTransformer

    torch.manual_seed(0)
    cfg = TranslationConfig(
        vocab_size=VOCAB,
        d_model=32,
        num_heads=4,
        encoder_layers=1,
        decoder_layers=1,
        ffn_dim=64,
        dropout=0.0,
        final_logits_bias=True,
        max_positions=LONG + 8,
    )
    model = TranslationTransformer(cfg).eval()
    with torch.no_grad():
        model.logits_bias[cfg.eos_id] = -1e4
    root = tmp_path_factory.mktemp("batching-repo")
    write_translation_dir(
        model, root / "mt", placeholder_tokenizer(VOCAB), name="mt", max_source_len=16, max_target_len=LONG
    )
    return root


def _request(text: str, max_new_tokens: int) -> pb.TranslateRequest:
    options = pb.DecodingOptions(max_new_tokens=max_new_tokens, return_token_ids=True)
    return pb.TranslateRequest(model="mt", texts=[text], options=options)


@pytest.mark.parametrize("batching", ["continuous", "static"])
def test_a_request_joins_the_running_batch_only_with_continuous_batching(serve, repo, batching):
    """A long stream runs; a short request arrives meanwhile. Continuous: it is admitted at the
    next step and done long before the stream ends. Static: it waits until the stream's batch
    has finished (its queue time spans the rest of the long translation)."""
    with serve(repo, translation_batching=batching) as server, grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.InferenceServiceStub(channel)
        started, received = threading.Event(), []

        def long_stream() -> None:
            for chunk in stub.TranslateStream(_request("t5 t6 t7", LONG), timeout=60):
                received.extend(chunk.token_ids)
                started.set()

        reader = threading.Thread(target=long_stream)
        reader.start()
        assert started.wait(30)
        t_sent = time.perf_counter()
        reply = stub.Translate(_request("t9 t10", SHORT), timeout=60)
        tokens_at_reply = len(received)
        reader.join(60)
        t_long_done = time.perf_counter()
        # the server's own time for a long translation alone: the stream's client may read its
        # messages more slowly than the engine makes them, so client-side times overstate it
        (alone,) = stub.Translate(_request("t5 t6 t7", LONG), timeout=60).translations
        long_decode_s = alone.timing.decode_ms / 1000

    (short,) = reply.translations
    assert len(short.hypotheses[0].token_ids) == SHORT
    assert len(received) == LONG  # the long one is untouched by the newcomer
    rest_s = t_long_done - t_sent  # the long translation's time after the short one was sent
    queue_s = short.timing.queue_ms / 1000
    if batching == "continuous":
        assert tokens_at_reply < LONG, "the short request finished only after the long one"
        assert queue_s < 0.5 * min(rest_s, long_decode_s), (queue_s, rest_s, long_decode_s)
    else:  # sent at the stream's first token, it waits for (nearly) the whole long decode
        assert queue_s > 0.5 * long_decode_s, (queue_s, long_decode_s)
