"""A bounded soak (issue 8, "Load and overload"): mixed translation (unary and streams) and
classification at more concurrency than the limits allow, over attnserve.v1 and KServe v2
(gRPC ModelInfer, HTTP infer with binary data), against ``attnserve-server`` as a child
process on loopback, for ``ATTNSERVE_SOAK_SECONDS`` (default 60).

The server must shed load with RESOURCE_EXHAUSTED rather than queue without bound, keep
its peak RSS within the documented bound (docs/operations.md: resident size after start-up
+ KV-cache budget + queued images + in-flight messages + a margin), answer every request
it accepted correctly and lose none (its own count of OK requests equals the clients').
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
import urllib.error
import urllib.request
from collections import Counter

import grpc
import numpy as np

from attnserve.protos.attnserve.triton import grpc_service_pb2 as gs
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
from attnserve.server.doors.kserve.tensors import join_bytes
from tests.support.server import ServerProcess, direct_probs

from .conftest import SOAK_SECONDS, digit_png

CLIENTS = 24
LIMITS = {
    "max-active-sequences": 8,
    "max-tokens-in-flight": 2048,
    "max-translation-queue": 8,
    "max-batch-size": 8,
    "max-queue-size": 16,
    "max-concurrent-rpcs": 64,
}
RSS_MARGIN = 128 << 20  # allocator slack, gRPC buffers, thread stacks (docs/operations.md)
TEXTS = ["t5 t17 t9", "t30", "t12 t13 t14 t15 t16 t40 t41", "t7 t7 t7 t7", "t55 t4", "t20 t21 t22 t23 t24 t25"]
LENGTHS = [8, 30, 120]
TIMEOUT = 120.0


def _rss(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in bytes."""
    status = open(f"/proc/{pid}/status").read()
    rss, hwm = (int(re.search(rf"{key}:\s+(\d+) kB", status).group(1)) * 1024 for key in ("VmRSS", "VmHWM"))
    return rss, hwm


def _ok_requests(metrics_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30).read().decode()
    methods = r"Translate|TranslateStream|Classify|kserve\.ModelInfer|kserve\.http\.ModelInfer"
    pattern = rf'attnserve_requests_total\{{[^}}]*method="({methods})"[^}}]*status="OK"[^}}]*\}} (\S+)'
    return sum(float(m.group(2)) for m in re.finditer(pattern, text))


class Overloaded(Exception):
    """HTTP 429: the KServe REST form of RESOURCE_EXHAUSTED."""


def kv_budget_bytes(mt) -> int:
    """Self-attention cache + cross K/V: 2 (K, V) x 2 (self, cross) x layers x d_model float32 per token."""
    cfg = mt.model.cfg
    return LIMITS["max-tokens-in-flight"] * 2 * 2 * cfg.decoder_layers * cfg.d_model * 4


def test_soak_sheds_load_keeps_memory_bounded_and_loses_nothing(full_repo, vit_dirs, mt, figures):
    refs = {(text, n): mt.greedy(text, n).tokens for text in TEXTS for n in LENGTHS}
    digits = [digit_png(d) for d in range(10)]
    probs = direct_probs(vit_dirs["digits"], digits)  # (10, 10)
    expected_top = [list(np.argsort(-p, kind="stable")[:3]) for p in probs]

    args = [f"--{k}={v}" for k, v in LIMITS.items()]
    server = ServerProcess(full_repo, "--metrics-port", "0", "--grace-seconds", "30", *args)
    stats: Counter = Counter()
    failures: list[str] = []
    lock = threading.Lock()
    try:
        with grpc.insecure_channel(server.address) as channel:  # warm-up: every path once
            stub = pb_grpc.InferenceServiceStub(channel)
            stub.Classify(
                pb.ClassifyRequest(model="digits", images=[pb.ImageInput(encoded=digits[0])]), timeout=TIMEOUT
            )
            stub.Translate(pb.TranslateRequest(model="mt", texts=TEXTS), timeout=TIMEOUT)
        baseline_rss, _ = _rss(server.proc.pid)
        ok_before = _ok_requests(server.metrics_port)
        peak = [baseline_rss]
        end = time.monotonic() + SOAK_SECONDS
        done = threading.Event()

        def monitor() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], _rss(server.proc.pid)[0])
                time.sleep(0.2)

        def record(key: str, failure: str | None = None) -> None:
            with lock:
                stats[key] += 1
                if failure:
                    failures.append(failure)

        def kserve_translate(channel, rng: random.Random) -> bool:
            """KServe v2 ModelInfer over gRPC: TEXT -> TRANSLATION, checked against the reference."""
            texts, n = rng.sample(TEXTS, rng.randint(1, 3)), rng.choice(LENGTHS)
            request = gs.ModelInferRequest(
                model_name="mt", raw_input_contents=[join_bytes([t.encode() for t in texts])]
            )
            request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(texts)])
            request.parameters["max_new_tokens"].int64_param = n
            infer = channel.unary_unary(
                "/inference.GRPCInferenceService/ModelInfer",
                request_serializer=gs.ModelInferRequest.SerializeToString,
                response_deserializer=gs.ModelInferResponse.FromString,
            )
            reply = infer(request, timeout=TIMEOUT)
            expected = join_bytes([mt.tokenizer.decode(refs[(t, n)]).encode() for t in texts])
            return reply.raw_output_contents[0] == expected

        def kserve_http_classify(rng: random.Random) -> bool:
            """KServe v2 REST infer with binary data: IMAGE -> PROBABILITIES, checked against in-process ORT."""
            picks = [rng.randrange(10) for _ in range(rng.randint(1, 4))]
            data = join_bytes([digits[d] for d in picks])
            head = {"inputs": [{"name": "IMAGE", "datatype": "BYTES", "shape": [len(picks)]}]}
            head["inputs"][0]["parameters"] = {"binary_data_size": len(data)}
            head = json.dumps(head).encode()
            request = urllib.request.Request(
                f"http://127.0.0.1:{server.http_port}/v2/models/digits/infer",
                data=head + data,
                headers={"Inference-Header-Content-Length": str(len(head))},
            )
            try:
                with urllib.request.urlopen(request, timeout=TIMEOUT) as reply:
                    got = np.array(json.loads(reply.read())["outputs"][0]["data"], np.float32).reshape(len(picks), -1)
            except urllib.error.HTTPError as exc:
                if exc.code == 429:
                    raise Overloaded from None
                raise AssertionError(f"HTTP {exc.code}: {exc.read()[:200]!r}") from None
            return np.allclose(got, probs[picks], atol=1e-4)

        def one_request(stub, rng: random.Random) -> None:
            kind = rng.choice(["translate", "stream", "classify", "kserve-translate", "kserve-http-classify"])
            record("sent")
            try:
                if kind == "kserve-translate":
                    ok = kserve_translate(stub.channel, rng)
                elif kind == "kserve-http-classify":
                    ok = kserve_http_classify(rng)
                elif kind == "classify":
                    picks = [rng.randrange(10) for _ in range(rng.randint(1, 4))]
                    request = pb.ClassifyRequest(
                        model="digits", images=[pb.ImageInput(encoded=digits[d]) for d in picks], top_k=3
                    )
                    reply = stub.Classify(request, timeout=TIMEOUT)
                    got = [[label.index for label in r.labels] for r in reply.results]
                    ok = got == [expected_top[d] for d in picks]
                    for r, d in zip(reply.results, picks):
                        ok = ok and abs(r.labels[0].probability - probs[d][expected_top[d][0]]) < 1e-4
                elif kind == "translate":
                    texts = rng.sample(TEXTS, rng.randint(1, 3))
                    n = rng.choice(LENGTHS)
                    options = pb.DecodingOptions(max_new_tokens=n, return_token_ids=True)
                    reply = stub.Translate(
                        pb.TranslateRequest(model="mt", texts=texts, options=options), timeout=TIMEOUT
                    )
                    got = [list(t.hypotheses[0].token_ids) for t in reply.translations]
                    ok = got == [refs[(text, n)] for text in texts]
                else:
                    text, n = rng.choice(TEXTS), rng.choice(LENGTHS)
                    options = pb.DecodingOptions(max_new_tokens=n, return_token_ids=True)
                    chunks = stub.TranslateStream(
                        pb.TranslateRequest(model="mt", texts=[text], options=options), timeout=TIMEOUT
                    )
                    ok = [t for c in chunks for t in c.token_ids] == refs[(text, n)]
                record("accepted" if ok else "failed", None if ok else f"{kind}: wrong answer")
            except Overloaded:
                record("rejected")
                time.sleep(rng.uniform(0.005, 0.05))  # a client backing off
            except AssertionError as exc:
                record("failed", f"{kind}: {exc}")
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    record("rejected")
                    time.sleep(rng.uniform(0.005, 0.05))  # a client backing off
                else:
                    record("failed", f"{kind}: {exc.code().name}: {exc.details()}")

        def client(i: int) -> None:
            rng = random.Random(i)
            with grpc.insecure_channel(server.address) as channel:
                stub = pb_grpc.InferenceServiceStub(channel)
                stub.channel = channel
                while time.monotonic() < end:
                    one_request(stub, rng)

        watcher = threading.Thread(target=monitor, daemon=True)
        watcher.start()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(SOAK_SECONDS + 3 * TIMEOUT)
        done.set()
        watcher.join(5)
        _, hwm = _rss(server.proc.pid)
        peak_rss = max(peak[0], hwm)
        ok_server = _ok_requests(server.metrics_port) - ok_before
        with grpc.insecure_channel(server.address) as channel:  # still serving, correctly
            stub = pb_grpc.InferenceServiceStub(channel)
            options = pb.DecodingOptions(max_new_tokens=30, return_token_ids=True)
            reply = stub.Translate(pb.TranslateRequest(model="mt", texts=[TEXTS[0]], options=options), timeout=TIMEOUT)
            assert list(reply.translations[0].hypotheses[0].token_ids) == refs[(TEXTS[0], 30)]
    finally:
        exit_code = server.stop()

    bound = baseline_rss + kv_budget_bytes(mt) + RSS_MARGIN
    for key in ("sent", "accepted", "rejected", "failed"):
        figures(f"soak {SOAK_SECONDS:.0f} s, {CLIENTS} clients: requests {key}", stats[key])
    figures("soak: RSS after start-up (MiB)", baseline_rss / 2**20)
    figures("soak: peak RSS (MiB)", peak_rss / 2**20)
    figures("soak: RSS bound (MiB)", bound / 2**20)
    assert not failures, failures[:10]
    assert stats["accepted"] > 0 and stats["rejected"] > 0, "the soak did not overload the server"
    assert stats["sent"] == stats["accepted"] + stats["rejected"]
    assert ok_server == stats["accepted"], "the server answered OK to requests the clients never got"
    assert peak_rss <= bound, f"peak RSS {peak_rss / 2**20:.0f} MiB over the bound {bound / 2**20:.0f} MiB"
    assert exit_code == 0
