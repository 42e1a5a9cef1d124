"""int8 graphs compute the same on every x86-64 CPU: 7-bit weights, checked on the CPU at hand
and on an AVX2-only CPU emulated by QEMU (``qemu-x86_64 -cpu Haswell``), whatever CPU runs the tests.

onnxruntime's int8 MatMul kernels for CPUs without VNNI add pairs of u8 x s8 products in int16;
full-range int8 weights saturate there and the model translates garbage, while the same graph
verifies on an AVX-512 VNNI or AMX machine. QEMU's user-mode emulator reports only the features
of the CPU model it is given, so onnxruntime picks its AVX2 kernels under it on any host.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from attnserve.contract.machine import isa_flags
from attnserve.contract.manifest import load_manifest
from attnserve.export.cli import main
from attnserve.export.modeldir import seal
from attnserve.export.precision import INT8_SCHEME, Int8Scheme, quantize_int8

QEMU = shutil.which("qemu-x86_64")
AVX2_ONLY_CPU = "Haswell"  # AVX2 + FMA, no AVX-512, no VNNI

needs_qemu = pytest.mark.skipif(
    QEMU is None or platform.machine() != "x86_64",
    reason="needs QEMU's user-mode emulator on x86-64 (apt-get install qemu-user; .ci/run installs it)",
)


@pytest.fixture(scope="module")
def int8_dirs(checkpoints, tmp_path_factory) -> dict[str, Path]:
    """The tiny translator exported at int8 as attnserve does now (``portable``) and, from its fp32
    export, re-quantized with full-range weights as before (``full-range``), re-sealed."""
    root = tmp_path_factory.mktemp("int8-schemes")
    common = ["--checkpoint", str(checkpoints["translation"]), "--tokenizer", str(checkpoints["tokenizer"])]
    common += ["--threads", "1"]
    assert main(["translation", *common, "--precision", "int8", "--out", str(root / "portable")]) == 0
    assert main(["translation", *common, "--no-screen-vocab", "--out", str(root / "full-range")]) == 0
    legacy = root / "full-range"
    for graph in ("encoder.onnx", "decoder.onnx"):
        model = quantize_int8(onnx.load(str(legacy / graph)), Int8Scheme(reduce_range=False))
        onnx.save(model, str(legacy / graph))
    raw = json.loads((legacy / "model.json").read_text())
    raw["precision"] = "int8"
    (legacy / "model.json").write_text(json.dumps(raw))
    seal(legacy, load_manifest(legacy, verify_files=False))
    return {"portable": root / "portable", "full-range": legacy}


def _integer_weights(path: Path) -> list[np.ndarray]:
    """The constant weight (input B) of every MatMulInteger of the graph."""
    model = onnx.load(str(path))
    inits = {i.name: i for i in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    weights = []
    for node in model.graph.node:
        if node.op_type != "MatMulInteger":
            continue
        name = node.input[1]
        if name not in inits and name in producers:  # the tied projection reads the table through a Transpose
            name = producers[name].input[0]
        weights.append(numpy_helper.to_array(inits[name]))
    return weights


def test_every_int8_weight_keeps_int16_pair_sums_in_range(int8_dirs):
    """|w| <= 64, so a pair of u8 x s8 products never leaves int16: 255 * 64 * 2 = 32640 <= 32767."""
    for graph in ("encoder.onnx", "decoder.onnx"):
        weights = _integer_weights(int8_dirs["portable"] / graph)
        assert weights and all(w.dtype == np.int8 for w in weights)
        assert max(int(np.abs(w.astype(np.int32)).max()) for w in weights) <= 64, graph


def test_the_scheme_and_why_are_recorded(int8_dirs):
    manifest = load_manifest(int8_dirs["portable"])
    assert manifest.extra["quantization"] == INT8_SCHEME.to_json()
    assert manifest.extra["quantization"]["portable"] is True and "int16" in manifest.extra["quantization"]["why"]
    report = json.loads((int8_dirs["portable"] / "export-report.json").read_text())
    assert report["quantization"]["reduce_range"] is True
    assert report["machine"]["cpu"] and ("avx2" in report["machine"]["isa"] or platform.machine() != "x86_64")


def _verify_on_avx2(model_dir: Path) -> subprocess.CompletedProcess:
    command = [QEMU, "-cpu", AVX2_ONLY_CPU, sys.executable, "-m", "attnserve.export", "verify", str(model_dir)]
    return subprocess.run([*command, "--threads", "1"], capture_output=True, text=True, timeout=600)


@needs_qemu
def test_int8_export_verifies_on_an_avx2_only_cpu(int8_dirs):
    run = _verify_on_avx2(int8_dirs["portable"])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "ok    decoder.logits max abs diff" in run.stdout
    assert "ok    decoder.step_attention (greedy steps) max abs diff" in run.stdout  # the aligned rows too


@needs_qemu
def test_full_range_int8_is_wrong_on_an_avx2_only_cpu(int8_dirs):
    """The control: the emulated CPU really runs the saturating kernels (else the test above proves nothing)."""
    emulated = _verify_on_avx2(int8_dirs["full-range"])
    assert emulated.returncode == 1 and "FAIL  decoder.logits max abs diff" in emulated.stdout, emulated.stdout[-3000:]
    if isa_flags().get("avx512_vnni"):  # VNNI sums in int32: the same graph is fine here
        command = [sys.executable, "-m", "attnserve.export", "verify", str(int8_dirs["full-range"]), "--threads", "1"]
        native = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert native.returncode == 0, native.stdout[-3000:]


@needs_qemu
def test_the_screened_projection_picks_the_exact_argmax_on_an_avx2_only_cpu():
    """The screen's error bound holds only if the int8 kernel never saturates: its tests
    (near-ties, flat rows, every row's argmax against the fp32 projection) pass under AVX2 kernels."""
    tests = Path(__file__).with_name("test_screen_vocab.py")
    command = [QEMU, "-cpu", AVX2_ONLY_CPU, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)]
    run = subprocess.run([*command, "-k", "argmax or flat"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and " passed" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]
