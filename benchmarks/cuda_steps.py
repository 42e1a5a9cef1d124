"""The steps of ``benchmarks.cuda_checks``, most valuable first, and what each one's figures are.

Each step is a command with its own time limit (cut to what is left of the run's budget) and a
reader that takes the figures from its output or result files. ``--quick`` runs the same
commands on tiny presets and sizes: a dry run of every step in minutes on a CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STEPS = (
    "env",
    "kv-inplace",
    "pytest-gpu",
    "server",
    "decode-graphs",
    "ct2-gpu",
    "verify-fp16",
    "decode-cuda",
    "iobinding",
    "decode-cpu",
)


@dataclass(frozen=True)
class Step:
    name: str
    argv: list[str]
    limit_s: float
    read: Callable[[str], dict[str, Any]]


def gpu_test_files() -> list[str]:
    """The test modules with gpu-marked tests (the rest of the suite needs the dev extra's packages)."""
    return sorted(str(p) for p in Path("tests").rglob("test_*.py") if "mark.gpu" in p.read_text())


def pytest_figures(text: str) -> dict[str, Any]:
    summary = [line for line in text.splitlines() if re.search(r"\b(passed|failed|skipped|error)", line)]
    return {
        "summary": summary[-1] if summary else None,
        "outcomes": [s for s in summary if s.startswith(("PASS", "FAIL", "SKIP", "ERROR"))],
    }


def export_reports(work: Path) -> dict[str, Any]:
    """The verification part of every export report the gpu tests left (fp16 dirs by preset)."""
    found = {}
    for path in sorted((work / "pytest").glob("**/export-report.json")):
        report = json.loads(path.read_text())
        found[path.parent.name] = {
            "dir": str(path.parent),
            "precision": report.get("precision"),
            "verification": report.get("verification"),
            "graph_bytes": report.get("graph_bytes"),
        }
    return found


def decode_figures(text: str) -> dict[str, Any]:
    """The rows decode_engine prints: ``batch   1  attnserve engine   1234 tok/s (best ...)  0.81 ms/step``."""
    pattern = r"batch\s+(\d+)\s+(.+?)\s+(\d+) tok/s\s+\(best\s+(\d+)\)\s+([\d.]+) ms/step\s+tokens (\d+)"
    return {
        f"batch {m[0]}, {m[1]}": {"tok_per_s": int(m[2]), "best_tok_per_s": int(m[3]), "ms_per_step": float(m[4])}
        for m in re.findall(pattern, text)
    }


def json_figures(path: Path, keys: tuple[str, ...]) -> Callable[[str], dict[str, Any]]:
    def read(_: str) -> dict[str, Any]:
        data = json.loads(path.read_text())
        return {k: data[k] for k in keys if k in data}

    return read


def graphs_figures(path: Path) -> Callable[[str], dict[str, Any]]:
    """ms/step, tokens/s and agreement of every decode-graphs contender, and its engines' graph state."""

    def read(_: str) -> dict[str, Any]:
        data = json.loads(path.read_text())
        keys = ("batch", "contender", "ms_per_step", "tokens_per_s", "agreement_with_buckets_off")
        return {"rows": [{k: r[k] for k in keys} for r in data["rows"]], "engines": data.get("engines")}

    return read


def iobinding_figures(paths: list[Path]) -> Callable[[str], dict[str, Any]]:
    def read(_: str) -> dict[str, Any]:
        out = {}
        for path in paths:
            if not path.is_file():
                out[path.parent.name] = "no result"
                continue
            data = json.loads(path.read_text())
            out[path.parent.name] = [
                {k: r[k] for k in ("batch", "contender", "median_s", "same_tokens")} for r in data["rows"]
            ]
        return out

    return read


def sizes(args: argparse.Namespace) -> dict[str, Any]:
    """Presets and sizes of the run: the GPU's, or ``--quick``'s tiny ones (a dry run)."""
    if args.quick:
        return {"mt": "mt-tiny", "vit": "vit-tiny", "ct2": ["--preset", "mt-tiny"], "batches": ["1", "4"]}
    ct2 = ["--preset", "mt-base", "--vocab-size", "58101"]  # opus-mt-en-de's shape
    return {"mt": args.mt_preset, "vit": args.vit_preset, "ct2": ct2, "batches": ["1", "32"]}


def first_steps(args: argparse.Namespace, s: dict[str, Any]) -> list[Step]:
    """env, the in-place verdict and the gpu tests."""
    py, provider, results, q = sys.executable, args.provider, args.work_dir / "results", args.quick
    kv = [py, "-m", "benchmarks.kv_inplace_cuda", "--provider", provider, "--preset", s["mt"]]
    kv += ["--out", str(results / "kv-inplace-cuda"), "--work-dir", str(args.work_dir), "--batches", *s["batches"]]
    kv += ["--lengths", "8", "16", "--repeats", "1", "--check-tokens", "8"] if q else ["--repeats", "2"]
    kv_keys = ("providers", "tokens_vs_cpu_fp32", "verdict", "ms_per_token", "batching_in_process", "errors")
    pytest = [py, "-m", "pytest", *gpu_test_files(), "-m", "gpu", "-rA", "-q", "--log-level=WARNING"]
    pytest += ["--basetemp", str(args.work_dir / "pytest"), f"--junitxml={results / 'pytest-gpu.xml'}"]
    return [
        Step("env", [py, "-m", "benchmarks.cuda_checks", "--sanity", provider], 60, env_figures),
        Step("kv-inplace", kv, 180, json_figures(results / "kv-inplace-cuda" / "kv-inplace-cuda.json", kv_keys)),
        Step("pytest-gpu", pytest, 150, pytest_figures),
    ]


def serving_steps(args: argparse.Namespace, s: dict[str, Any]) -> list[Step]:
    """The classification server (1 and N workers; over v1 and over KServe streams in shared memory)
    against in process, and the decoder steps with and without CUDA graphs, beside CTranslate2 on
    the same device."""
    py, provider, results, q = sys.executable, args.provider, args.work_dir / "results", args.quick
    out = results / "server"
    server = [py, "-m", "benchmarks.server", "--workloads", "classification", "--provider", provider]
    # v1 Classify (raw tensors, and 20 KB JPEGs the server decodes) beside the cheapest door, KServe
    # streams with the image in shared memory (no --workers rows)
    server += ["--transports", "v1", "v1-jpeg", "kserve-shm-stream"]
    server += ["--preset", s["vit"], "--clients", "1", "32", "--requests", "64" if q else "2000"]
    server += ["--max-seconds", str(args.server_seconds), "--client-procs", str(args.client_procs)]
    # N workers each with a session, and N workers sending their batches to one (--shared-classifier)
    server += ["--workers", *map(str, args.server_workers), "--shared-classifier"] if args.server_workers else []
    server += ["--repeats", "2" if q else "20", "--no-plot", "--out", str(out), "--work-dir", str(args.work_dir)]
    server_keys = ("transports", "rows", "in_process_images_per_s", "overhead_vs_in_process", "dynamic_batching_gain")
    tokens = ["--new-tokens", "8", "--repeats", "1"] if q else ["--new-tokens", "64", "--repeats", "5"]
    ct2_tokens = tokens if q else ["--new-tokens", "32", "--repeats", "3"]
    graphs = [py, "-m", "benchmarks.decode_graphs", "--provider", provider, "--work-dir", str(args.work_dir)]
    graphs += ["--batches", *s["batches"]]
    return [
        Step("server", server, 210, json_figures(out / "server.json", server_keys)),
        Step(
            "decode-graphs",
            [*graphs, *tokens, "--preset", s["mt"], "--out", str(results / "decode-graphs")],
            90,
            graphs_figures(results / "decode-graphs" / "decode-graphs.json"),
        ),
        Step(
            "ct2-gpu",
            [*graphs, *ct2_tokens, *s["ct2"], "--ctranslate2", "--out", str(results / "ct2-gpu")],
            180,
            graphs_figures(results / "ct2-gpu" / "decode-graphs.json"),
        ),
    ]


def later_steps(args: argparse.Namespace, s: dict[str, Any]) -> list[Step]:
    """What runs when time is left: the fp16 exports verified, the engine and the plain loop
    on the device and on the CPU, the io-binding probe."""
    py, provider, work, results = sys.executable, args.provider, args.work_dir, args.work_dir / "results"
    mt = s["mt"]
    mt_fp16 = work / f"{mt}-fp16"  # the gpu tests' fp16 translator, linked by verify-fp16

    def verify(_: str) -> dict[str, Any]:
        reports = export_reports(work)
        for name, report in reports.items():
            argv = [py, "-m", "attnserve.export.cli", "verify", "--device", provider, "--json", report["dir"]]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120 * args.time_scale)
            report["verify_rc"] = done.returncode
            report["verify"] = json.loads(done.stdout) if done.returncode == 0 else done.stdout[-1000:]
            shutil.copy(Path(report["dir"]) / "export-report.json", results / f"export-report-{name}.json")
        if mt in reports and not mt_fp16.exists():
            mt_fp16.symlink_to(reports[mt]["dir"])
        return reports

    # the left-padded fp32 export kv-inplace made: what --provider cuda serves for fp32
    decode = [py, "benchmarks/decode_engine.py", "--model-dir", str(work / f"{mt}-fp32-left-padded"), "--preset", mt]
    decode += ["--batches", *s["batches"], "--repeats", "1" if args.quick else "5"]
    io = [py, "-m", "benchmarks.iobinding", "--provider", provider, "--batches", *s["batches"], "--repeats", "10"]
    left = [work / f"{mt}-{precision}-left-padded" for precision in ("fp32", "fp16")]
    io_runs = {results / f"iobinding-{d.name}": d for d in left}
    io_json = f"iobinding{'' if provider == 'cpu' else '-' + provider}.json"
    io_shell = " ; ".join(
        f"[ ! -f {d}/model.json ] || {shlex.join([*io, str(d), '--out', str(o)])}" for o, d in io_runs.items()
    )
    return [
        Step("verify-fp16", [py, "-c", "pass"], 90, verify),
        Step("decode-cuda", [*decode, "--provider", provider], 90, decode_figures),
        Step("iobinding", ["sh", "-c", io_shell], 120, iobinding_figures([o / io_json for o in io_runs])),
        Step("decode-cpu", [*decode, "--provider", "cpu", "--threads", str(args.cpu_threads)], 90, decode_figures),
    ]


def plan(args: argparse.Namespace) -> list[Step]:
    """The steps ``args.steps`` names, in the order of :data:`STEPS`."""
    s = sizes(args)
    steps = first_steps(args, s) + serving_steps(args, s) + later_steps(args, s)
    assert [step.name for step in steps] == list(STEPS)
    return [step for step in steps if step.name in args.steps]


def env_figures(text: str) -> dict[str, Any]:
    import onnxruntime as ort

    query = "name,driver_version,memory.total,compute_cap"
    try:
        argv = ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"]
        smi = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        gpu = dict(zip(query.split(","), (f.strip() for f in smi.stdout.split(",")))) if smi.returncode == 0 else {}
    except (OSError, subprocess.SubprocessError) as exc:
        gpu = {"error": str(exc)}
    sanity_lines = [line for line in text.splitlines() if line.startswith('{"providers"')]
    return {
        "gpu": gpu,
        "sanity": json.loads(sanity_lines[-1]) if sanity_lines else None,
        "onnxruntime": ort.__version__,
        "onnxruntime_file": ort.__file__,
        "providers": ort.get_available_providers(),
        "python": sys.version.split()[0],
        "torch": _version("torch"),
        "ctranslate2": _version("ctranslate2"),
        "numpy": _version("numpy"),
        "grpc": _version("grpc"),
        "cpus": os.cpu_count(),
    }


def _version(module: str) -> str | None:
    try:
        return getattr(__import__(module), "__version__", "?")
    except ImportError:
        return None
