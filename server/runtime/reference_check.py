"""A model's stored reference outputs, replayed at load on the provider it will serve with.

A model directory written by ``attnserve-export`` carries ``verification.npz`` (see
:mod:`attnserve.contract.references`): fixed-seed inputs of every graph and the PyTorch outputs
for them. The machine that serves a model is often not the one that exported it, and int8
kernels differ between instruction sets, so the server runs those inputs once before
it serves the model and refuses a model whose outputs are off by more than the export's tolerance
for its precision. A directory without references loads unchecked.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from attnserve.contract.machine import cpu_summary
from attnserve.contract.manifest import Manifest
from attnserve.contract.references import (
    TOLERANCES,
    VERIFICATION_FILE,
    OutputComparison,
    compare_output,
    feed_for,
    graph_inputs,
    graph_reference,
    judged_as,
    load_references,
    run_in_place,
)

log = logging.getLogger(__name__)


class ReferenceMismatch(RuntimeError):
    """The model's graphs do not reproduce its stored reference outputs here; the message says what to do."""


@dataclass(frozen=True)
class ReferenceCheck:
    """What the load-time check found: every output compared, or nothing to compare with."""

    comparisons: tuple[OutputComparison, ...]

    @property
    def failures(self) -> list[OutputComparison]:
        return [c for c in self.comparisons if not c.passed]

    def summary(self) -> str:
        if not self.comparisons:
            return f"no {VERIFICATION_FILE}: not checked"
        worst = max(self.comparisons, key=lambda c: c.diff / c.limit if c.limit else 0.0)
        return f"{len(self.comparisons)} reference outputs match (worst {worst.name} {worst.detail()})"


def _feed(session: ort.InferenceSession, arrays: dict[str, np.ndarray], where: str) -> dict[str, np.ndarray]:
    try:
        return feed_for(session, arrays)
    except KeyError as exc:
        raise ReferenceMismatch(f"{where}: {exc.args[0]}; re-export the model") from None


def run_references(
    model_dir: Path, manifest: Manifest, sessions: dict[str, ort.InferenceSession], provider: str
) -> ReferenceCheck:
    """Run every graph on its stored inputs and compare each stored output (no references: nothing compared)."""
    data = load_references(model_dir)
    if data is None:
        return ReferenceCheck(())
    precision = judged_as(manifest.precision, provider)
    comparisons: list[OutputComparison] = []
    for role, session in sessions.items():
        arrays = graph_inputs(data, role)
        feeds = _feed(session, arrays, str(model_dir / VERIFICATION_FILE))
        if role == "decoder" and manifest.decoder_io().in_place:  # as it serves: past and present one buffer
            io = manifest.decoder_io()
            outputs = run_in_place(session, feeds, dict(zip(io.past, io.present)))
        else:
            outputs = session.run(None, feeds)
        for spec, actual in zip(session.get_outputs(), outputs):
            reference = graph_reference(data, role, spec.name)
            if reference is not None:
                comparisons.append(compare_output(f"{role}.{spec.name}", actual, reference, precision))
    return ReferenceCheck(tuple(comparisons))


def check_references(
    model_dir: Path, manifest: Manifest, sessions: dict[str, ort.InferenceSession], provider: str
) -> ReferenceCheck:
    """:func:`run_references`, raising :class:`ReferenceMismatch` with what failed and what to do."""
    check = run_references(model_dir, manifest, sessions, provider)
    if not check.failures:
        return check
    failed = "; ".join(f"{c.name} {c.detail()}" for c in check.failures[:3])
    more = f" and {len(check.failures) - 3} more" if len(check.failures) > 3 else ""
    tolerance = TOLERANCES[judged_as(manifest.precision, provider)]
    raise ReferenceMismatch(
        f"{model_dir}: the {manifest.precision} graphs do not reproduce the reference outputs of "
        f"{VERIFICATION_FILE} on {provider} ({cpu_summary()}): {failed}{more} "
        f"(tolerance {tolerance.atol:g} + {tolerance.rtol:g} x max |reference|); {_advice(manifest)}"
    )


def _advice(manifest: Manifest) -> str:
    if manifest.precision == "int8" and not manifest.extra.get("quantization", {}).get("portable"):
        return (
            "its int8 weights use the full 8 bits, which onnxruntime's kernels for CPUs without VNNI "
            "(AVX2, AVX-512 without VNNI) saturate: re-export it with this attnserve-export (--precision int8 "
            "writes 7-bit weights that compute right on every CPU), or export it with --precision fp32"
        )
    if manifest.precision == "int8":
        return "re-export it on this machine with attnserve-export --precision int8, or serve an fp32 export"
    return "the graphs or verification.npz were changed after export, or this onnxruntime differs: re-export the model"
