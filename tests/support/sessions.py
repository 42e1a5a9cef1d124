"""Test doubles around onnxruntime sessions.

An in-place decoder (model.json ``kv_cache: in-place``) runs through io binding, bound once per
layout, not ``session.run``: a wrapper that injects faults or records batch sizes sees the step
through ``run_with_iobinding`` and learns its rows from the binding (:class:`BindingSpy`).
"""

from __future__ import annotations


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
