"""The CUDA path end to end: fp16 exports verified on the GPU, the server on ``--provider cuda``.

Skipped (with the reason) without a CUDA device and onnxruntime-gpu's CUDA provider; run on a
GPU machine with ``pytest -m gpu``.
"""

from __future__ import annotations

import json
import os

import onnxruntime as ort
import pytest

pytest.importorskip("torch")

from attnserve.contract.kinds import LEFT_PADDED  # noqa: E402
from attnserve.export.cli import main as export_main  # noqa: E402
from attnserve.export.zoo import NAMES, ZOO, build_repo, export_translator  # noqa: E402
from attnserve.server.shared.onnx_sessions import create_session, session_provider  # noqa: E402

CUDA = "CUDAExecutionProvider" in ort.get_available_providers() and os.path.exists("/dev/nvidia0")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not CUDA, reason="needs a CUDA device and onnxruntime-gpu's CUDA provider"),
]
EXAMPLES = ZOO.parent.parent / "examples"


@pytest.mark.parametrize(("kind", "preset"), [("translation", "mt-small"), ("vit", "vit-s16")])
def test_fp16_export_verifies_on_cuda_with_no_skipped_check(tmp_path, kind, preset):
    out = tmp_path / preset
    argv = [kind, "--preset", preset, "--precision", "fp16", "--device", "cuda", "--out", str(out)]
    assert export_main(argv) == 0
    report = json.loads((out / "export-report.json").read_text())
    verification = report["verification"]
    assert verification["passed"] is True
    assert verification["provider"] == "CUDAExecutionProvider"
    assert verification["skipped"] == []  # the fp16 numbers were really compared, on the GPU
    assert report["graph_bytes"]["ratio"] > 1.8  # fp16 halves the weights


@pytest.fixture(scope="module")
def zoo_repo(tmp_path_factory):
    """The zoo's models, the translator (fp32) with the left-padded cache: what ``attnserve-export
    --device cuda`` exports at fp32, since CUDA's GroupQueryAttention has no fp32 kernel."""
    out = tmp_path_factory.mktemp("model-repo")
    build_repo(out, ["digits-vit"])
    export_translator(ZOO / "translator-en-de" / "model.safetensors", out / "translator-en-de", kv_cache=LEFT_PADDED)
    return out


def test_runtime_creates_cuda_sessions(zoo_repo):
    session = create_session(zoo_repo / "translator-en-de" / "decoder.onnx", provider="cuda")
    assert session_provider(session) == "cuda"
    vit = create_session(zoo_repo / "digits-vit" / "model.onnx", provider="cuda")
    # no cuDNN benchmark on the request path for each new dynamic batch size
    assert vit.get_provider_options()["CUDAExecutionProvider"]["cudnn_conv_algo_search"] == "HEURISTIC"


def test_server_on_cuda_translates_and_classifies_like_on_cpu(zoo_repo, serve):
    sentences = [
        line.split("\t")[0]
        for line in (EXAMPLES / "sentences.tsv").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    digits = sorted((EXAMPLES / "digits").glob("digit-*.png"))
    answers = {}
    for provider in ("cpu", "cuda"):
        with serve(zoo_repo, provider=provider) as server, server.client() as client:
            assert {m.name: m.provider for m in client.list_models()} == dict.fromkeys(NAMES, provider)
            texts = [t.text for t in client.translate(sentences, "translator-en-de", beam_size=4)]
            labels = [r.labels[0].label for r in client.classify([p.read_bytes() for p in digits], "digits-vit")]
            answers[provider] = texts, labels
    assert answers["cuda"] == answers["cpu"]
    assert answers["cuda"][1] == [p.stem.removeprefix("digit-") for p in digits]


def test_exported_models_pass_the_load_time_reference_check_on_cuda(tmp_path):
    """fp32 on CUDA runs its MatMuls in TF32 and is held to fp16's tolerance; fp16 to its own."""
    from attnserve.server.runtime.registry import ModelRegistry

    from .conftest import settings_for

    repo = tmp_path / "repo"
    for precision in ("fp32", "fp16"):
        argv = ["translation", "--preset", "mt-small", "--precision", precision, "--device", "cuda"]
        assert export_main([*argv, "--out", str(repo / f"mt-{precision}")]) == 0
    registry = ModelRegistry.load(repo, settings_for(repo, provider="cuda"))
    for precision in ("fp32", "fp16"):
        model = registry.models[f"mt-{precision}"]
        print(f"mt-small {precision} on CUDA: {model.references}")
        assert model.provider == "cuda" and "reference outputs match" in model.references, model.references


def test_a_decoder_with_step_attention_aligns_on_cuda_as_on_the_cpu(zoo_repo, serve):
    """onnxruntime's CUDA MultiHeadAttention writes other numbers than the CPU's into the scores
    output the decoder's step_attention is made of (on an H200, uncorrelated with them): on CUDA
    the server aligns with the aligner graph, and a client gets the CPU's alignments and markup."""
    import numpy as np

    from attnserve.contract.manifest import load_manifest

    assert load_manifest(zoo_repo / "translator-en-de").decoder_io().attention
    text, html = "Monday, March 3, 2025. at 3:45 PM", "Monday, <i>March</i> 3, 2025"
    got = {}
    for provider in ("cpu", "cuda"):
        with serve(zoo_repo, provider=provider) as server, server.client() as client:
            model = server.app.registry.models["translator-en-de"]
            assert model.engine.step_attention == (provider == "cpu") and (model.aligner is None) == (provider == "cpu")
            (result,) = client.translate(text, "translator-en-de", alignments=True)
            (placed,) = client.translate(html, "translator-en-de", format="html", beam_size=4)
            got[provider] = result.text, result.hypotheses[0].alignments, placed.text
    (text_cpu, aligned_cpu, html_cpu), (text_cuda, aligned_cuda, html_cuda) = got["cpu"], got["cuda"]
    assert text_cuda == text_cpu and html_cuda == html_cpu == "Montag, 3. <i>März</i> 2025"
    assert [a.pharaoh() for a in aligned_cuda] == [a.pharaoh() for a in aligned_cpu]
    for cuda, cpu in zip(aligned_cuda, aligned_cpu):  # fp32 on CUDA runs its MatMuls in TF32
        np.testing.assert_allclose(np.array(cuda.attention), np.array(cpu.attention), atol=2e-2)


def test_an_fp16_in_place_translator_on_cuda_translates_the_same_with_and_without_graphs(tmp_path, serve):
    """What ``attnserve-export --device cuda --precision fp16`` exports (the in-place cache) served
    on CUDA: the same translations with its decoder steps replayed as CUDA graphs as without."""
    repo = tmp_path / "repo"
    checkpoint = ZOO / "translator-en-de" / "model.safetensors"
    argv = ["translation", "--checkpoint", str(checkpoint), "--tokenizer", str(checkpoint.parent / "tokenizer.json")]
    argv += ["--precision", "fp16", "--device", "cuda", "--out", str(repo / "translator-en-de")]
    assert export_main(argv) == 0
    assert json.loads((repo / "translator-en-de" / "model.json").read_text())["kv_cache"] == "in-place"
    sentences = [
        line.split("\t")[0]
        for line in (EXAMPLES / "sentences.tsv").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    texts = {}
    for buckets in ("off", "cuda-graphs"):
        with serve(repo, provider="cuda", decode_step_buckets=buckets) as server, server.client() as client:
            texts[buckets] = [t.text for t in client.translate(sentences, "translator-en-de")]
            runner = server.app.registry.models["translator-en-de"].engine._scheduler.runner
            assert (runner.buckets is not None and runner.buckets.captures > 0) == (buckets == "cuda-graphs")
    assert texts["cuda-graphs"] == texts["off"]


def test_workers_sharing_one_classifier_process_on_cuda_answer_like_one_process(zoo_repo, serve):
    """``--workers 2 --shared-classifier --provider cuda``: the session host opens the model on CUDA
    once for both workers, and the labels are those of a one-process server on CUDA."""
    import re

    from attnserve.protos.attnserve.v1 import inference_pb2 as pb
    from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
    from tests.reliability.test_shared_classifier import _host_pid
    from tests.reliability.test_workers import Workers

    digits = [p.read_bytes() for p in sorted((EXAMPLES / "digits").glob("digit-*.png"))]
    with serve(zoo_repo, provider="cuda") as server, server.client() as client:
        expected = [r.labels[0].label for r in client.classify(digits, "digits-vit")]
    shared = Workers(zoo_repo, "--shared-classifier", "--provider", "cuda", "--metrics-port", "-1")
    try:
        _host_pid(shared)
        for channel in shared.channels(4):  # connections on both workers
            stub = pb_grpc.InferenceServiceStub(channel)
            images = [pb.ImageInput(encoded=d) for d in digits]
            reply = stub.Classify(pb.ClassifyRequest(model="digits-vit", images=images), timeout=120)
            assert [r.labels[0].label for r in reply.results] == expected
        assert shared.stop() == 0
    finally:
        shared.stop()
    log = "".join(shared.log)
    assert len(re.findall(r"session host: model\.onnx opened on CUDAExecutionProvider", log)) == 1, log
