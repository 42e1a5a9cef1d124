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
    """The zoo's models, the translator with the left-padded cache (the server refuses an
    in-place decoder on CUDA: there the engine's tokens with it were wrong)."""
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


def test_the_decoders_step_attention_on_cuda_is_the_cpus(zoo_repo):
    """A decoder with step_attention (MultiHeadAttention's scores output) runs on CUDA and gives
    the CPU's attention along the same greedy decode: until this passes on a GPU, ``--device
    cuda`` exports go without the output (``ExportOptions.step_attention``)."""
    import numpy as np

    from attnserve.contract.manifest import load_manifest
    from attnserve.export.ort_decode import OrtGreedy

    directory = zoo_repo / "translator-en-de"
    manifest = load_manifest(directory)
    assert manifest.decoder_io().attention
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(directory / manifest.tokenizer.file))
    texts = ["on Monday, March 3, 2025 at 3:45 PM", "about 5 miles"]
    ids = [tokenizer.encode(text).ids for text in texts]
    src = np.full((len(ids), max(map(len, ids))), manifest.tokenizer.pad_id, dtype=np.int64)  # (B, L)
    for row, row_ids in enumerate(ids):
        src[row, : len(row_ids)] = row_ids
    decoded = {}
    for provider in ("cpu", "cuda"):
        sessions = [create_session(directory / f, provider=provider) for f in ("encoder.onnx", "decoder.onnx")]
        greedy = OrtGreedy(*sessions, manifest)
        decoded[provider] = (greedy.decode(src, 12), greedy.step_attention())
    assert decoded["cuda"][0] == decoded["cpu"][0]
    np.testing.assert_allclose(decoded["cuda"][1], decoded["cpu"][1], atol=1e-3)
