"""The reference outputs a model directory carries, and how close a runtime must come to them.

``attnserve-export`` writes, beside every model it verifies, ``verification.npz``: fixed-seed
inputs for each graph and the PyTorch model's outputs for them (keys ``<graph>.in.<input>`` and
``<graph>.out.<output>``, graph and I/O names of ``model.json``). Both sides replay them:
``attnserve-export verify`` and the server when it loads a model. The second matters because the
machine that serves a model is often not the one that exported it, and onnxruntime's int8
kernels differ between instruction sets (AVX2 without VNNI saturates int16 sums that AVX-512
VNNI and AMX do not): a model that verified where it was exported can compute wrong numbers
where it is served, and the server refuses it rather than translate garbage.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

VERIFICATION_FILE = "verification.npz"


@dataclass(frozen=True)
class Tolerance:
    """Allowed max |runtime - PyTorch| of one output: ``atol + rtol * max |reference|``."""

    atol: float
    rtol: float

    def limit(self, reference_absmax: float) -> float:
        return self.atol + self.rtol * reference_absmax


# fp32: 1e-4 on logits, absolute. fp16 (11-bit mantissa) and int8 (per-tensor weight scales,
# dynamic activation scales) are judged relative to each output's range; export also reports
# top-1 agreement with the fp32 PyTorch model for both.
TOLERANCES = {
    "fp32": Tolerance(atol=1e-4, rtol=0.0),
    "fp16": Tolerance(atol=1e-2, rtol=1e-2),
    "int8": Tolerance(atol=5e-2, rtol=0.1),
}


def judged_as(precision: str, device: str) -> str:
    """The precision whose tolerance a graph of ``precision`` run on ``device`` ("cpu" | "cuda") is held to:
    fp32 on CUDA is judged as fp16, since onnxruntime's CUDA provider runs fp32 MatMuls in TF32 by
    default (``use_tf32``: a 10-bit mantissa, like fp16; mt-small's fp32 outputs differ from PyTorch's
    by up to 2.3e-3 on an H200, against fp32's 1e-4)."""
    return "fp16" if precision == "fp32" and device == "cuda" else precision


@dataclass(frozen=True)
class OutputComparison:
    """One graph output against its reference: ``passed`` when the shapes agree and diff <= limit."""

    name: str  # "<graph>.<output>"
    diff: float
    limit: float
    shape: tuple[int, ...]
    reference_shape: tuple[int, ...]

    @property
    def passed(self) -> bool:
        return self.shape == self.reference_shape and bool(self.diff <= self.limit)  # NaN fails

    def detail(self) -> str:
        if self.shape != self.reference_shape:
            return f"shape {self.shape} != reference {self.reference_shape}"
        return f"{self.diff:.3g} {'<=' if self.passed else '>'} {self.limit:.3g}"


def compare_output(name: str, actual: np.ndarray, reference: np.ndarray, precision: str) -> OutputComparison:
    """``actual`` (any float dtype) against ``reference`` at the tolerance of ``precision``."""
    actual = np.asarray(actual, dtype=np.float32)
    if actual.shape != reference.shape or not reference.size:
        return OutputComparison(name, 0.0, 0.0, actual.shape, reference.shape)
    limit = TOLERANCES[precision].limit(float(np.abs(reference).max()))
    diff = float(np.abs(actual - reference).max())
    return OutputComparison(name, diff, limit, actual.shape, reference.shape)


# onnxruntime's input type names -> numpy dtypes (an fp16 graph may take float16 inputs)
ORT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


def feed_for(session: Any, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``arrays`` cast to the input dtypes of ``session`` (an onnxruntime ``InferenceSession``).
    Raises KeyError naming an input ``arrays`` has no value for."""
    feed = {}
    for spec in session.get_inputs():
        if spec.name not in arrays:
            raise KeyError(f"no value for graph input {spec.name!r}")
        feed[spec.name] = np.asarray(arrays[spec.name]).astype(ORT_TYPES.get(spec.type, np.float32), copy=False)
    for spec in getattr(session, "get_overridable_initializers", list)():  # inputs with a default: fed if given
        if spec.name in arrays:
            feed[spec.name] = np.asarray(arrays[spec.name]).astype(ORT_TYPES.get(spec.type, np.float32), copy=False)
    return feed


def run_in_place(session: Any, arrays: dict[str, np.ndarray], pairs: dict[str, str]) -> list[np.ndarray]:
    """Run ``session`` (an onnxruntime ``InferenceSession``) on ``arrays`` (cast by :func:`feed_for`)
    with each ``past -> present`` pair of ``pairs`` bound to one ``OrtValue`` (io binding), as the
    server runs an in-place decoder (``kv_cache: in-place``): the outputs in the session's order,
    the presents being the past buffers as the graph left them. On CUDA the buffers live on the
    device. onnxruntime is imported here, not with this module (the contract itself needs only numpy).
    """
    import onnxruntime as ort

    feeds = feed_for(session, arrays)
    device = "cuda" if "CUDAExecutionProvider" in session.get_providers() else "cpu"
    binding = session.io_binding()
    buffers = {}
    defaults = {spec.name for spec in session.get_overridable_initializers()}
    for name, array in feeds.items():
        if name in pairs:
            buffers[pairs[name]] = value = ort.OrtValue.ortvalue_from_numpy(np.array(array), device, 0)
            binding.bind_ortvalue_input(name, value)
        elif name in defaults:  # an input with a default: bind_cpu_input does not find it, an OrtValue binds
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array))
        else:
            binding.bind_cpu_input(name, array)
    for spec in session.get_outputs():
        if spec.name in buffers:
            binding.bind_ortvalue_output(spec.name, buffers[spec.name])
        else:
            binding.bind_output(spec.name, "cpu")
    session.run_with_iobinding(binding)
    return [np.array(value.numpy()) for value in binding.get_outputs()]  # in binding order: the session's


def load_references(model_dir: Path | str) -> dict[str, np.ndarray] | None:
    """The arrays of ``model_dir/verification.npz``, or None when the directory has none."""
    path = Path(model_dir) / VERIFICATION_FILE
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def graph_inputs(data: dict[str, np.ndarray], graph: str) -> dict[str, np.ndarray]:
    """The stored inputs of ``graph`` ("encoder", "decoder", "model"), by input name."""
    prefix = f"{graph}.in."
    return {k[len(prefix) :]: v for k, v in data.items() if k.startswith(prefix)}


def graph_reference(data: dict[str, np.ndarray], graph: str, output: str) -> np.ndarray | None:
    """The stored PyTorch output ``output`` of ``graph``, or None when it was not stored."""
    return data.get(f"{graph}.out.{output}")
