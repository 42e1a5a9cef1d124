"""Session options per provider: CPU sessions leave out the graph optimizers that are slower
on CPU (experiments/engine_ab.py), CUDA sessions keep every optimizer and the cuDNN options,
and a session that falls back from CUDA to CPU gets the CPU options."""

from __future__ import annotations

import collections
from pathlib import Path

import onnxruntime as ort
import pytest

from attnserve.server.shared import onnx_sessions as runtime


def optimized_ops(path: Path, options: ort.SessionOptions, tmp_path: Path) -> collections.Counter[str]:
    """Op types of ``path`` as a CPU session with ``options`` optimised it."""
    onnx = pytest.importorskip("onnx")
    options.optimized_model_filepath = str(tmp_path / f"optimized-{path.stem}.onnx")
    ort.InferenceSession(str(path), options, providers=[runtime.CPU])
    return collections.Counter(node.op_type for node in onnx.load(options.optimized_model_filepath).graph.node)


def disabled(options: ort.SessionOptions) -> str | None:
    try:
        return options.get_session_config_entry(runtime.DISABLE_OPTIMIZERS_KEY)
    except Exception:  # noqa: BLE001 - onnxruntime raises a plain error for a missing key
        return None


def test_cpu_options_leave_out_skip_layer_norm_fusion_and_cuda_options_keep_it(vit_dirs, tmp_path):
    assert disabled(runtime.session_options(1, "cpu")) == "SkipLayerNormFusion"
    assert disabled(runtime.session_options(1, "cuda")) is None
    model = vit_dirs["digits"] / "model.onnx"
    # the same graph: with the CUDA options the fusion happens, with the CPU options it does not
    assert optimized_ops(model, runtime.session_options(1, "cuda"), tmp_path)["SkipLayerNormalization"] > 0
    cpu = optimized_ops(model, runtime.session_options(1, "cpu"), tmp_path)
    assert cpu["SkipLayerNormalization"] == 0 and cpu["LayerNormalization"] > 0


def test_cpu_sessions_and_cuda_fallbacks_get_the_cpu_options(vit_dirs, monkeypatch):
    model = vit_dirs["digits"] / "model.onnx"
    cpu = runtime.create_session(model, "cpu", 1)
    assert disabled(cpu.get_session_options()) == "SkipLayerNormFusion"
    # auto on a machine whose onnxruntime lists CUDA but cannot use it (or a CPU-only build
    # made to list it): onnxruntime falls back to CPU, and the session must be a CPU one
    listed = [runtime.CUDA, *ort.get_available_providers()]
    monkeypatch.setattr(runtime.ort, "get_available_providers", lambda: list(dict.fromkeys(listed)))
    session = runtime.create_session(model, "auto", 1)
    if runtime.session_provider(session) == "cuda":
        pytest.skip("a usable GPU: no fallback to check here (tests/server/test_cuda.py covers CUDA)")
    assert disabled(session.get_session_options()) == "SkipLayerNormFusion"


def test_cuda_sessions_are_created_with_cuda_options_and_every_optimizer(monkeypatch, tmp_path):
    created = []

    class Recorder:
        def __init__(self, path, sess_options, providers):
            created.append((sess_options, providers))

    monkeypatch.setattr(runtime.ort, "InferenceSession", Recorder)
    runtime._create(tmp_path / "model.onnx", [runtime.CUDA, runtime.CPU], 1)
    options, providers = created[0]
    assert providers == [(runtime.CUDA, runtime.CUDA_OPTIONS), runtime.CPU]
    assert disabled(options) is None
