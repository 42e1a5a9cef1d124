"""The CPU a model is exported, verified, served or benchmarked on: model name and the ISA flags
that decide which onnxruntime kernels run (int8 results differ between them).

``avx2``: 256-bit integer SIMD, onnxruntime's int8 kernels sum u8 x s8 pairs in int16 (they
saturate on full-range int8 weights); ``avx512f``: 512-bit SIMD; ``avx512_vnni`` / ``avx_vnni``:
int8 dot products accumulated in int32 (no saturation); ``amx``: Intel's tile matrix units
(``amx_int8``). Read from ``/proc/cpuinfo`` (Linux); elsewhere only ``platform.machine()`` is known.
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

X86_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")
ARM_FLAGS = ("asimd", "asimddp", "i8mm")  # NEON, its int8 dot product, int8 matrix multiply


@functools.cache
def _cpuinfo() -> tuple[str, frozenset[str]]:
    model, flags = "", frozenset()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine(), flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:  # x86 / ARM64
            flags = frozenset(value.split())
    return model or platform.machine(), flags


def cpu_model() -> str:
    return _cpuinfo()[0]


def isa_flags() -> dict[str, bool]:
    """Whether this CPU has each flag of its architecture (``amx_int8`` reported as ``amx``)."""
    flags = _cpuinfo()[1]
    names = ARM_FLAGS if platform.machine().lower() in ("aarch64", "arm64") else X86_FLAGS
    return {("amx" if name == "amx_int8" else name): name in flags for name in names}


def cpu_summary() -> str:
    """``"Intel(R) Xeon(R) Processor: avx2 avx512f avx512_vnni amx"`` (the flags it has)."""
    present = " ".join(name for name, has in isa_flags().items() if has)
    return f"{cpu_model()}: {present or 'no ' + '/'.join(isa_flags())}"
