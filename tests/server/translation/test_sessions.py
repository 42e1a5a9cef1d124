"""Translation sessions: CPU ones leave out SkipLayerNormFusion (slower on CPU, see
experiments/engine_ab.py), CUDA ones keep it, a CUDA request that falls back gets the CPU
options; the engine's direct run gives session.run's outputs and still refuses bad feeds.
(The tokens stay the reference's: test_exactness.py runs the default sessions.)"""

from __future__ import annotations

import collections

import numpy as np
import onnxruntime as ort
import pytest

from attnserve.server.shared.onnx_sessions import CUDA, DISABLE_OPTIMIZERS_KEY, session_options
from attnserve.server.translation import load_translation_sessions
from attnserve.server.translation.sessions import direct_run

from .conftest import SessionWrapper


def disabled(options: ort.SessionOptions) -> str | None:
    try:
        return options.get_session_config_entry(DISABLE_OPTIMIZERS_KEY)
    except Exception:  # noqa: BLE001 - onnxruntime raises a plain error for a missing key
        return None


def test_cpu_decoder_is_not_fused_into_skip_layer_norm_and_cuda_options_are(tiny, tmp_path):
    onnx = pytest.importorskip("onnx")
    decoder = tiny.path / tiny.manifest.graphs["decoder"].file
    ops = {}
    for provider in ("cpu", "cuda"):
        options = session_options(1, provider=provider)
        options.optimized_model_filepath = str(tmp_path / f"{provider}.onnx")
        ort.InferenceSession(str(decoder), options, providers=["CPUExecutionProvider"])
        ops[provider] = collections.Counter(n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node)
    assert ops["cuda"]["SkipLayerNormalization"] > 0
    assert ops["cpu"]["SkipLayerNormalization"] == 0 and ops["cpu"]["LayerNormalization"] > 0
    assert disabled(session_options(1, provider="cuda")) is None


def test_loaded_sessions_get_the_options_of_the_provider_they_run_on(tiny):
    for session in load_translation_sessions(tiny.path, tiny.manifest, intra_op_threads=1):
        assert disabled(session.get_session_options()) == "SkipLayerNormFusion"
    sessions = load_translation_sessions(tiny.path, tiny.manifest, "auto", 1)
    for session in sessions:
        if session.get_providers()[0] == CUDA:
            assert disabled(session.get_session_options()) is None
        else:  # fell back to CPU: built again with the CPU options
            assert disabled(session.get_session_options()) == "SkipLayerNormFusion"


def test_direct_run_gives_session_runs_outputs_and_onnxruntime_still_checks_the_feeds(tiny):
    encoder, _ = load_translation_sessions(tiny.path, tiny.manifest, intra_op_threads=1)
    io = tiny.manifest.encoder_io()
    names = list(io.cross)
    src = np.array([[5, 9, 13, tiny.model.cfg.eos_id]], dtype=np.int64)
    feeds = {io.src_ids: src, io.src_mask: np.ones_like(src, dtype=np.int32)}
    run = direct_run(encoder)
    assert run != encoder.run  # the C++ session's own run, without the Python-side checks
    for got, want in zip(run(names, feeds), encoder.run(names, feeds), strict=True):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    with pytest.raises(Exception, match="INVALID_ARGUMENT"):  # an error, not a crash or garbage
        run(names, {**feeds, io.src_ids: src.astype(np.int32)})
    with pytest.raises(Exception, match=io.src_mask):
        run(names, {io.src_ids: src})
    # anything but a plain InferenceSession keeps its own run (the tests' failure injection)
    wrapper = SessionWrapper(encoder, fail_at_rows=1)
    with pytest.raises(RuntimeError, match="injected failure"):
        direct_run(wrapper)(names, feeds)
    # so does a session on another provider: its run falls back to the CPU when the provider fails
    encoder.get_providers = lambda: [CUDA, "CPUExecutionProvider"]
    assert direct_run(encoder) == encoder.run
