"""onnxruntime sessions: one per graph, on the provider the settings ask for.

``auto`` uses CUDA when onnxruntime can really create a CUDA session (the GPU build
lists CUDAExecutionProvider even on machines without a GPU, and silently falls back to
CPU when the CUDA libraries do not load), and says clearly when it falls back to CPU.
"""

from __future__ import annotations

import logging
from pathlib import Path

import onnxruntime as ort

log = logging.getLogger(__name__)

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
# cuDNN's default EXHAUSTIVE search benchmarks every convolution algorithm the first time a
# shape is seen: with dynamic batches of 1..max_batch_size that is tens of milliseconds on
# the request path for each new batch size. HEURISTIC picks from cuDNN's heuristics at once.
CUDA_OPTIONS = {"cudnn_conv_algo_search": "HEURISTIC"}
# Graph optimizers left out of CPU sessions. SkipLayerNormFusion turns each residual Add +
# LayerNormalization into one SkipLayerNormalization node; onnxruntime's fused CPU kernel
# is slower than the two it replaces on the decoder's shapes: 6-14% more CPU time per
# batch-32 decode on mt-small / mt-base, fp32 and int8; batch 1 and the ViT (one such
# node) within noise (experiments/engine_ab.py; benchmarks/README.md, "decode").
# CUDA sessions keep it: there the fused kernel saves a launch and a pass over memory.
CPU_DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)
DISABLE_OPTIMIZERS_KEY = "optimization.disable_specified_optimizers"  # onnxruntime_session_options_config_keys.h


class ProviderError(RuntimeError):
    """A graph that cannot be loaded on the requested provider (``--provider cuda`` without CUDA)."""


def disable_optimizers(opts: ort.SessionOptions, names: tuple[str, ...] | list[str]) -> ort.SessionOptions:
    """Leave the named onnxruntime graph optimizers out of sessions made with ``opts`` (in place)."""
    if names:
        opts.add_session_config_entry(DISABLE_OPTIMIZERS_KEY, ",".join(names))
    return opts


def session_options(
    threads: int = 0,
    provider: str = "cpu",
    disabled_optimizers: tuple[str, ...] | None = None,
    spin: bool = True,
) -> ort.SessionOptions:
    """Options of a session on ``provider`` (cpu | cuda): full graph optimisation, sequential
    execution, ``threads`` intra-op threads (0 = onnxruntime's default, one per physical core).

    ``disabled_optimizers``: onnxruntime graph optimizers to leave out; None = the
    provider's default (CPU_DISABLED_OPTIMIZERS on cpu, none on cuda). ``spin=False`` stops
    idle pool threads from spinning, which costs a little latency on a machine of one's own
    and saves a lot on one shared with other processes.
    """
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1  # graphs are sequential; parallelism comes from intra-op and batching
    opts.log_severity_level = 3  # errors only: the provider fallback is reported by us, once
    if not spin:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if disabled_optimizers is None:
        disabled_optimizers = CPU_DISABLED_OPTIMIZERS if provider == "cpu" else ()
    return disable_optimizers(opts, disabled_optimizers)


def _create(
    path: Path, providers: list[str], threads: int, cuda_graph: bool = False, **options_kw
) -> ort.InferenceSession:
    cuda = {**CUDA_OPTIONS, "enable_cuda_graph": "1"} if cuda_graph else CUDA_OPTIONS
    configured = [(p, cuda) if p == CUDA else p for p in providers]
    options = session_options(threads, "cuda" if providers[0] == CUDA else "cpu", **options_kw)
    try:
        return ort.InferenceSession(str(path), sess_options=options, providers=configured)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own untyped errors
        raise ProviderError(f"{path}: onnxruntime cannot load it on {providers[0]}: {exc}") from exc


def create_session(
    path: Path,
    provider: str = "auto",
    threads: int = 0,
    spin: bool = True,
    disabled_optimizers: tuple[str, ...] | None = None,
    cuda_graph: bool = False,
) -> ort.InferenceSession:
    """A session for ``path`` on ``provider`` (auto | cpu | cuda), with :func:`session_options`
    for the provider it runs on (``spin`` and ``disabled_optimizers`` are passed on).
    ``cuda_graph``: a CUDA session is made with ``enable_cuda_graph``, whose runs capture and
    replay CUDA graphs by their RunOptions' ``gpu_graph_id`` (translation/buckets.py).

    Raises :class:`ProviderError` when ``cuda`` was asked for and is not usable, or when
    the graph does not load.
    """
    kw = {"spin": spin, "disabled_optimizers": disabled_optimizers}
    if provider == "cpu":
        return _create(path, [CPU], threads, **kw)
    if CUDA not in ort.get_available_providers():
        if provider == "cuda":
            raise ProviderError(
                f"--provider cuda: this onnxruntime build has no CUDA provider "
                f"(available: {', '.join(ort.get_available_providers())}); install onnxruntime-gpu"
            )
        return _create(path, [CPU], threads, **kw)
    if provider == "auto":
        # onnxruntime's own logger prints an error when the CUDA libraries do not load; with
        # auto that is expected on CPU machines, and the registry reports the fallback once.
        ort.set_default_logger_severity(4)
    try:
        session = _create(path, [CUDA, CPU], threads, cuda_graph, **kw)
    finally:
        ort.set_default_logger_severity(2)  # onnxruntime's default: warnings and up
    if session.get_providers()[0] == CUDA:
        return session
    if provider == "cuda":
        raise ProviderError(
            f"--provider cuda: onnxruntime could not create a CUDA session for {path.name} "
            "(no GPU, or the CUDA/cuDNN libraries did not load)"
        )
    # auto: onnxruntime fell back to CPU with the options of a CUDA session; the CPU session
    # must have the CPU options, so build it again (the caller logs the fallback once)
    return _create(path, [CPU], threads, **kw)


def session_provider(session: ort.InferenceSession) -> str:
    """``cuda`` or ``cpu``: the provider the session actually runs on."""
    return "cuda" if session.get_providers()[0] == CUDA else "cpu"


def cuda_listed() -> bool:
    """The onnxruntime build has a CUDA provider (it may still be unusable on this machine)."""
    return CUDA in ort.get_available_providers()
