"""Verify a model directory without the PyTorch model (torch-free: onnx, onnxruntime, numpy).

Checks, in order: every file's sha256 (``model.json``), ``onnx.checker`` (full check) on
each graph, one attention node of the directory's kind per attention call, and
onnxruntime on the stored fixed-seed inputs of ``verification.npz`` against the stored
PyTorch outputs: max abs diff per output within the precision's tolerance
(:data:`attnserve.contract.references.TOLERANCES`), top-1 agreement, and for translation a
greedy decode with the cache (identical tokens required at fp32).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from attnserve.contract.kinds import TRANSLATION
from attnserve.contract.manifest import Manifest, load_manifest
from attnserve.contract.references import (
    VERIFICATION_FILE,
    compare_output,
    graph_inputs,
    graph_reference,
    judged_as,
    load_references,
)

from .errors import ExportError
from .onnx_nodes import (
    ATTENTION_OPS,
    AlignerShape,
    attention_calls,
    count_attention_nodes,
    count_ops,
    expected_attention_nodes,
)
from .ort_decode import OrtGreedy, run_graph

REPORT_FILE = "export-report.json"
PROVIDERS = {"cpu": ["CPUExecutionProvider"], "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"]}


@dataclass
class Check:
    name: str
    passed: bool | None  # None: reported only (top-1 agreement, sizes)
    detail: str = ""
    value: float | None = None
    limit: float | None = None

    def line(self) -> str:
        mark = {True: "ok  ", False: "FAIL", None: "info"}[self.passed]
        return f"  {mark}  {self.name}: {self.detail}"


@dataclass
class Verification:
    checks: list[Check] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # numeric checks that could not run, and why
    provider: str = ""

    @property
    def passed(self) -> bool:
        return all(c.passed is not False for c in self.checks)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.passed is False]

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "provider": self.provider, "skipped": self.skipped} | {
            "checks": [asdict(c) for c in self.checks]
        }

    def lines(self) -> list[str]:
        out = [c.line() for c in self.checks]
        out += [f"  skip  {s}" for s in self.skipped]
        return out


class VerificationFailed(RuntimeError):
    """A model directory whose graphs do not compute what the PyTorch model computed."""

    def __init__(self, verification: Verification, report: dict[str, Any] | None = None) -> None:
        self.verification, self.report = verification, report
        worst = "; ".join(f"{c.name}: {c.detail}" for c in verification.failures()[:3])
        super().__init__(f"verification failed ({len(verification.failures())} checks): {worst}")


def _one_line(exc: BaseException, limit: int = 240) -> str:
    return " ".join(str(exc).split())[:limit]


def _session(path: Path, device: str, threads: int) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3  # onnxruntime's shape-merge warnings are noise here
    session = ort.InferenceSession(str(path), opts, providers=PROVIDERS[device])
    if device == "cuda" and "CUDAExecutionProvider" not in session.get_providers():
        raise ExportError(
            "--device cuda: onnxruntime cannot use CUDA here (no GPU, no CUDA libraries or no onnxruntime-gpu)"
        )
    return session


def structure_checks(model_dir: Path, manifest: Manifest) -> list[Check]:
    """onnx.checker and attention node counts of every graph."""
    checks = []
    op = ATTENTION_OPS[manifest.attention]
    for gname, spec in manifest.graphs.items():
        path = model_dir / spec.file
        try:
            onnx.checker.check_model(str(path), full_check=True)
            checks.append(Check(f"onnx.checker {spec.file}", True, "full check passed"))
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, OSError) as exc:
            checks.append(Check(f"onnx.checker {spec.file}", False, _one_line(exc)))
            continue
        proto = onnx.load(str(path), load_external_data=False)
        aligner = AlignerShape.of(proto, manifest.aligner_io().encodes) if gname == "aligner" else None
        counts = count_attention_nodes(proto)
        expected = attention_calls(manifest.kind, manifest.config, aligner)[gname]
        wanted = {}
        if op is None:  # decomposed: no attention node at all, a Softmax per call
            softmax = count_ops(proto, "ai.onnx::Softmax")["ai.onnx::Softmax"]
            ok = not counts and softmax >= expected
            found = f"attention nodes {counts}" if counts else "no attention nodes"
            detail = f"{found}, {softmax} x Softmax for {expected} attention calls"
        else:
            wanted = expected_attention_nodes(manifest.kind, manifest.config, op, manifest.kv_cache, aligner)[gname]
            ok = counts == wanted
            found = " + ".join(f"{counts.get(k, 0)} x {k}" for k in wanted)
            detail = f"{found} for {expected} attention calls" + (
                f"; other attention nodes: {counts}" if set(counts) - set(wanted) else ""
            )
        found_calls = sum(counts.get(k, 0) for k in wanted) if op is not None else 0  # one node per call
        checks.append(Check(f"attention nodes {spec.file}", ok, detail, float(found_calls), float(expected)))
    return checks


def _compare(name: str, actual: np.ndarray, reference: np.ndarray, precision: str) -> Check:
    result = compare_output(name, actual, reference, precision)
    if result.shape != result.reference_shape:
        return Check(f"{name} shape", False, result.detail())
    return Check(f"{name} max abs diff", result.passed, result.detail(), result.diff, result.limit)


def _missing_fp16_kernels(exc: BaseException, precision: str) -> bool:
    """onnxruntime builds without fp16 kernels for an op (CPU) fail with NOT_IMPLEMENTED."""
    message = str(exc)
    return precision == "fp16" and ("NOT_IMPLEMENTED" in message or "Could not find an implementation" in message)


def _fp16_skip(exc: BaseException, device: str) -> str:
    return f"numeric checks of the fp16 graphs need CUDA (onnxruntime on {device}: {_one_line(exc, 160)})"


def _top1(name: str, actual: np.ndarray, reference: np.ndarray) -> Check:
    agree = float((np.asarray(actual) == np.asarray(reference)).mean())
    return Check(f"{name} top-1 agreement", None, f"{agree:.1%} of {np.asarray(reference).size}", agree)


def numeric_checks(
    model_dir: Path, manifest: Manifest, *, device: str = "cpu", threads: int = 0
) -> tuple[list[Check], list[str], str]:
    """onnxruntime on the stored inputs vs the stored PyTorch outputs. Returns (checks, skipped, provider)."""
    path = model_dir / VERIFICATION_FILE
    if not path.is_file() and "verification" not in manifest.extra:  # written without references
        # (the bundled models/repo; write_translation_dir / write_vit_dir): what the directory has
        # is checked, and that there is nothing to compare with is said rather than failed
        why = "this directory was written without reference outputs; attnserve-export translation|vit writes them"
        return [], [f"numeric checks: no {VERIFICATION_FILE} ({why})"], ""
    if not path.is_file():
        return [Check(VERIFICATION_FILE, False, "missing: re-export to create the reference outputs")], [], ""
    data = load_references(model_dir)
    try:
        sessions = {g: _session(model_dir / spec.file, device, threads) for g, spec in manifest.graphs.items()}
    except ExportError:
        raise
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
        if _missing_fp16_kernels(exc, manifest.precision):
            return [], [_fp16_skip(exc, device)], ""
        return [Check("onnxruntime session", False, _one_line(exc))], [], ""
    provider = next(iter(sessions.values())).get_providers()[0]
    checks: list[Check] = []
    precision = judged_as(manifest.precision, device)  # fp32 on CUDA runs in TF32
    for gname, spec in manifest.graphs.items():
        inputs = graph_inputs(data, gname)
        try:
            outputs = run_graph(sessions[gname], manifest, gname, inputs)
        except Exception as exc:  # noqa: BLE001 - onnxruntime errors, an input missing from verification.npz
            if _missing_fp16_kernels(exc, manifest.precision):
                return [], [_fp16_skip(exc, device)], ""
            checks.append(Check(f"run {spec.file}", False, _one_line(exc)))
            continue
        for oname, actual in zip([o.name for o in sessions[gname].get_outputs()], outputs):
            reference = graph_reference(data, gname, oname)
            if reference is not None:
                checks.append(_compare(f"{gname}.{oname}", actual, reference, precision))
            if oname == getattr(manifest.io(gname), "logits", None) and reference is not None:
                checks.append(_top1(f"{gname}.logits", np.argmax(actual, -1), np.argmax(reference, -1)))
    if manifest.kind == TRANSLATION and "greedy.tokens" in data:
        checks += _greedy_checks(sessions, manifest, data, precision)
    return checks, [], provider


def _agreed(got: list[int], want: list[int]) -> int:
    """How many leading tokens ``got`` and ``want`` share."""
    return next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))


def _greedy_checks(sessions: dict, manifest: Manifest, data: dict[str, np.ndarray], precision: str) -> list[Check]:
    exact = precision == "fp32"
    greedy = OrtGreedy(sessions["encoder"], sessions["decoder"], manifest)
    src, reference = data["greedy.src_ids"], data["greedy.tokens"]
    expected = [[t for t in row if t >= 0] for row in reference.tolist()]
    got = greedy.decode(src, int(data["greedy.max_new_tokens"]))
    same = sum(a == b for a, b in zip(got, expected))
    total = sum(len(r) for r in expected)
    detail = f"{same}/{len(expected)} rows identical ({total} reference tokens, cache grown step by step)"
    if same < len(expected):
        first = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
        detail += f"; row {first}: {got[first][:8]} vs reference {expected[first][:8]}"
    # Bit-identical decoding is the contract of fp32 on CPU; fp16, int8 and TF32 (fp32 on CUDA) may
    # drift on near-ties and are judged by top-1.
    ok = same == len(expected) if exact else None
    checks = [Check("greedy decode tokens", ok, detail, float(same), float(len(expected)))]
    attention, want = greedy.step_attention(), data.get("greedy.step_attention")
    if attention is not None and want is not None:  # a decoder returning its step's attention
        # the steps fed what the reference was fed: up to a row's first token that differs
        rows = [(b, t) for b, row in enumerate(expected) for t in range(_agreed(got[b], row) + 1) if t < len(row)]
        if rows:
            b, t = np.array(rows).T
            checks.append(_compare("decoder.step_attention (greedy steps)", attention[b, t], want[b, t], precision))
    choices = greedy.forced_choices(src, reference)
    valid = reference >= 0
    checks.append(_top1("greedy decode (teacher-forced)", choices[valid], reference[valid]))
    if "screen_vocab" in manifest.extra:
        checks.append(_screened_check(sessions, manifest, src, int(data["greedy.max_new_tokens"]), got))
    return checks


def _screened_check(sessions: dict, manifest: Manifest, src: np.ndarray, steps: int, full: list[list[int]]) -> Check:
    """The decoder's int8-screened projection (its screen flag fed true) picks the tokens of its
    full projection (``full``: the greedy decode without it), row for row."""
    screened = OrtGreedy(sessions["encoder"], sessions["decoder"], manifest, screen=True)
    got = screened.decode(src, steps)
    same = sum(a == b for a, b in zip(got, full))
    detail = f"{same}/{len(full)} rows identical to the full projection's"
    return Check("greedy decode tokens (screened projection)", same == len(full), detail, float(same), float(len(full)))


def verify_model_dir(
    model_dir: Path | str,
    manifest: Manifest | None = None,
    *,
    device: str = "cpu",
    threads: int = 0,
    stage: Callable[[str], None] = lambda name: None,
) -> Verification:
    """Every check of the module docstring. Without ``manifest`` it is loaded from
    ``model.json`` and every sha256 checked (raises ``ManifestError`` on a mismatch)."""
    model_dir = Path(model_dir)
    result = Verification()
    if manifest is None:
        stage("check files (sha256)")
        manifest = load_manifest(model_dir, verify_files=True)
        result.checks.append(Check("files", True, f"{len(manifest.files)} files match model.json's sha256"))
    stage("onnx.checker and attention nodes")
    result.checks += structure_checks(model_dir, manifest)
    stage(f"onnxruntime vs PyTorch reference ({manifest.precision})")
    checks, skipped, provider = numeric_checks(model_dir, manifest, device=device, threads=threads)
    result.checks += checks
    result.skipped += skipped
    result.provider = provider
    return result


def write_report(model_dir: Path, report: dict[str, Any]) -> Path:
    path = Path(model_dir) / REPORT_FILE
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path
