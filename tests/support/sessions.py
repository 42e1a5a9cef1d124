"""Test doubles around onnxruntime sessions.

An in-place decoder (model.json ``kv_cache: in-place``) runs through io binding, bound once per
layout, not ``session.run``: a wrapper that injects faults or records batch sizes sees the step
through ``run_with_iobinding`` and learns its rows from the binding (:class:`BindingSpy`).

:class:`DeviceSession` runs a CPU session as onnxruntime runs one on a device (CUDA), as far as
io binding goes: a host input is copied to the device when it is bound, so writing the host
array afterwards changes nothing the next run reads (``IOBinding::BindInput`` copies it across
devices at once). The CPU provider shares the array instead, which hid exactly that.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnxruntime as ort


class BindingSpy:
    """An io binding that remembers the shape of its first bound input (a step's token ids, (B, 1))."""

    def __init__(self, binding) -> None:
        self.binding, self.first_shape = binding, None

    def bind_ortvalue_input(self, name, value) -> None:
        if self.first_shape is None:
            self.first_shape = tuple(value.shape())
        self.binding.bind_ortvalue_input(name, value)

    def __getattr__(self, name):
        return getattr(self.binding, name)


class DeviceBinding:
    """An io binding whose host inputs are copied when bound, as onnxruntime's binding copies them
    to a device; ``on_device()`` lists the ``OrtValue`` s that stand for device memory (bound as
    they are, like a CUDA ``OrtValue``)."""

    def __init__(self, binding, on_device: Callable[[], list]) -> None:
        self.binding, self.on_device = binding, on_device
        self.copies: dict[str, object] = {}  # per input, the copy bound ("on the device")

    def bind_cpu_input(self, name: str, array: np.ndarray) -> None:
        self.copies[name] = copy = np.array(array)
        self.binding.bind_cpu_input(name, copy)

    def bind_ortvalue_input(self, name: str, value) -> None:
        if not any(value is v for v in self.on_device()):
            self.copies[name] = value = ort.OrtValue.ortvalue_from_numpy(np.array(value.numpy()))
        self.binding.bind_ortvalue_input(name, value)

    def __getattr__(self, name):
        return getattr(self.binding, name)


class DeviceSession:
    """A session whose io bindings are :class:`DeviceBinding` s (see the module docstring)."""

    def __init__(self, session, on_device: Callable[[], list]) -> None:
        self.session, self.on_device = session, on_device

    def io_binding(self) -> DeviceBinding:
        return DeviceBinding(self.session.io_binding(), self.on_device)

    def run_with_iobinding(self, binding, *args, **kwargs):
        return self.session.run_with_iobinding(getattr(binding, "binding", binding), *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.session, name)


def cpu_session(model) -> ort.InferenceSession:
    """A one-thread CPU session of an in-memory ``onnx.ModelProto`` (graph-rewrite tests)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3  # the overridable-initializer warning
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
