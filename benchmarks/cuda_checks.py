"""The CUDA checks of attnserve on a GPU machine, in one run, most valuable first.

Each step is a subprocess with its own time limit; after every step ``OUT/cuda-checks.json``
(what ran, exit codes, seconds, the figures read from each step's results) and
``OUT/cuda-checks.tar.gz`` (the raw result files of the steps so far) are rewritten, so a run
cut short still leaves what it finished. Steps:

1. ``env``: the GPU as ``nvidia-smi`` names it, the driver, onnxruntime's version and providers,
   and a small fp16 graph (MatMul, Softmax, Conv: cuBLAS, onnxruntime's own kernels, cuDNN)
   run on the provider against numpy; when it fails the run stops there;
2. ``kv-inplace``: ``benchmarks.kv_inplace_cuda``: the fp16 in-place export
   (GroupQueryAttention writing into buffers bound on the device; the server's refusal of it on
   CUDA lifted for this step only) and the left-padded fp16 / fp32 ones on the provider, their
   tokens against the CPU's fp32 tokens and the ``verdict`` (``ok``: the refusal can go), ms/token
   at 32 and 256 new tokens (batch 1 and 32), continuous vs static batching in process;
3. ``pytest-gpu``: ``pytest -m gpu`` (fp16 exports verified on CUDA, the server on ``--provider
   cuda``, the engine's device cache), its temporary folders kept under the work dir;
4. ``verify-fp16``: ``attnserve-export verify --device cuda`` of the fp16 model directories the
   tests exported, with their export reports (max |diff|, top-1 agreement);
5. ``server``: ``benchmarks.server`` on CUDA (classification: dynamic batching vs unbatched,
   against in-process onnxruntime at the same batch);
6. ``decode-cuda``: ``benchmarks/decode_engine.py`` (the engine and the plain loop, greedy);
7. ``iobinding``: ``benchmarks.iobinding --provider cuda`` on the fp32 and fp16 translators
   with the left-padded cache (step 2 exports them);
8. ``decode-cpu``: step 6 on the CPU provider of the same machine, for the ratio.

Run from the repository root, with onnxruntime-gpu in place of onnxruntime (``attnserve[cuda]``)
and torch for the exports; ``--provider cpu`` is a dry run of the same steps without a GPU.

    python -m benchmarks.cuda_checks --out /tmp/cuda-checks --work-dir /tmp/cuda-work
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
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CUDA_PROVIDER = "CUDAExecutionProvider"
STEPS = ("env", "kv-inplace", "pytest-gpu", "verify-fp16", "server", "decode-cuda", "iobinding", "decode-cpu")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cuda_checks", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("benchmarks/results/cuda-checks"),
        help="cuda-checks.json and cuda-checks.tar.gz go here",
    )
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/attnserve-cuda"), help="models and raw results")
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS), help="default: all, in order")
    parser.add_argument("--provider", choices=["cuda", "cpu"], default="cuda", help="cpu: a dry run without a GPU")
    parser.add_argument("--vit-preset", default="vit-s16", help="ViT the server serves (default vit-s16)")
    parser.add_argument("--mt-preset", default="mt-small", help="translator of the decode steps (default mt-small)")
    parser.add_argument("--server-seconds", type=float, default=10.0, help="time bound per server load level")
    parser.add_argument("--client-procs", type=int, default=4, help="load-generator processes of the server step")
    parser.add_argument(
        "--server-workers", type=int, nargs="*", default=[], help="also a server of N worker processes, per N (>= 2)"
    )
    parser.add_argument("--cpu-threads", type=int, default=1, help="intra-op threads of the CPU decode run")
    parser.add_argument("--time-scale", type=float, default=1.0, help="multiplies every step's time limit")
    parser.add_argument(
        "--sanity", choices=["cuda", "cpu"], help="only run the env step's small graph on this provider"
    )
    return parser


@dataclass(frozen=True)
class Step:
    name: str
    argv: list[str]
    limit_s: float
    read: Callable[[str], dict[str, Any]]


def run_step(step: Step, scale: float) -> dict[str, Any]:
    """Run one step, its output streamed to ours; exit code, seconds and the figures ``read`` finds."""
    print(f"\n== step {step.name}: {' '.join(step.argv)}", flush=True)
    t0 = time.monotonic()
    lines: list[str] = []
    with subprocess.Popen(step.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        deadline = t0 + step.limit_s * scale
        try:
            assert proc.stdout is not None
            for line in proc.stdout:  # the deadline is checked per line; a silent hang hits wait() below
                print(line, end="", flush=True)
                lines.append(line)
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(step.argv, step.limit_s)
            proc.wait(max(1.0, deadline - time.monotonic()))
            rc: int | str = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = "timeout"
    text = "".join(lines)
    result: dict[str, Any] = {"argv": step.argv, "rc": rc}
    try:
        result["figures"] = step.read(text)  # verify-fp16 does its work here
    except Exception as exc:  # a step that broke leaves no figures; the run goes on
        result["figures_error"] = f"{type(exc).__name__}: {exc}"
    result["seconds"] = round(time.monotonic() - t0, 1)
    result["tail"] = text[-1500:]
    print(f"== step {step.name}: rc {rc} in {result['seconds']} s", flush=True)
    return result


def sanity(provider: str) -> int:
    """Run MatMul -> Softmax and a Conv in fp16 on ``provider``; 0 when it ran there and matches numpy."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from attnserve.server.shared.onnx_sessions import ProviderError, create_session

    h = TensorProto.FLOAT16
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 64)).astype(np.float16) / 8  # (K, N)
    kernel = rng.standard_normal((8, 3, 4, 4)).astype(np.float16) / 8  # (C_out, C_in, kH, kW), a patch embedding
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Softmax", ["xw"], ["y"], axis=-1),
        helper.make_node("Conv", ["img", "k"], ["z"], strides=[4, 4]),
    ]
    graph = helper.make_graph(
        nodes,
        "sanity",
        [helper.make_tensor_value_info("x", h, [32, 64]), helper.make_tensor_value_info("img", h, [2, 3, 16, 16])],
        [helper.make_tensor_value_info("y", h, None), helper.make_tensor_value_info("z", h, None)],
        [
            helper.make_tensor("w", h, w.shape, w.tobytes(), raw=True),
            helper.make_tensor("k", h, kernel.shape, kernel.tobytes(), raw=True),
        ],
    )
    # IR 10, as the exporter writes: onnx's default (14 in onnx 1.23) is newer than onnxruntime 1.31 reads
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    path = Path(os.environ.get("TMPDIR", "/tmp")) / "attnserve-cuda-sanity.onnx"
    path.write_bytes(model.SerializeToString())
    try:
        session = create_session(path, provider)
    except ProviderError as exc:
        print(json.dumps({"ok": False, "error": str(exc)}))
        return 1
    x = rng.standard_normal((32, 64)).astype(np.float16)
    img = rng.standard_normal((2, 3, 16, 16)).astype(np.float16)
    y, z = session.run(None, {"x": x, "img": img})
    xw = x.astype(np.float64) @ w.astype(np.float64)
    ref_y = np.exp(xw - xw.max(-1, keepdims=True))
    ref_y /= ref_y.sum(-1, keepdims=True)
    patches = img.astype(np.float64).reshape(2, 3, 4, 4, 4, 4).transpose(0, 2, 4, 1, 3, 5)  # (B, 4, 4, C, kH, kW)
    ref_z = np.einsum("bijcxy,ocxy->boij", patches, kernel.astype(np.float64))
    err = {"softmax": float(np.abs(y - ref_y).max()), "conv": float(np.abs(z - ref_z).max())}
    ok = session.get_providers()[0] == (CUDA_PROVIDER if provider == "cuda" else "CPUExecutionProvider")
    ok = ok and err["softmax"] < 1e-2 and err["conv"] < 2e-2
    print(json.dumps({"providers": session.get_providers(), "max_abs_err": err, "ok": ok, "ort": ort.__version__}))
    return 0 if ok else 1


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
        "numpy": _version("numpy"),
        "grpc": _version("grpc"),
        "cpus": os.cpu_count(),
    }


def _version(module: str) -> str | None:
    try:
        return getattr(__import__(module), "__version__", "?")
    except ImportError:
        return None


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


def steps(args: argparse.Namespace) -> list[Step]:
    py, work, results, provider = sys.executable, args.work_dir, args.work_dir / "results", args.provider
    mt = work / args.mt_preset
    mt_fp16 = work / f"{args.mt_preset}-fp16"  # the gpu tests' fp16 translator, linked by verify-fp16

    def verify(_: str) -> dict[str, Any]:
        reports = export_reports(work)
        for name, report in reports.items():
            argv = [py, "-m", "attnserve.export.cli", "verify", "--device", provider, "--json", report["dir"]]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120 * args.time_scale)
            report["verify_rc"] = done.returncode
            report["verify"] = json.loads(done.stdout) if done.returncode == 0 else done.stdout[-1000:]
            shutil.copy(Path(report["dir"]) / "export-report.json", results / f"export-report-{name}.json")
        if args.mt_preset in reports and not mt_fp16.exists():
            mt_fp16.symlink_to(reports[args.mt_preset]["dir"])
        return reports

    server_out = results / "server"
    decode = [py, "benchmarks/decode_engine.py", "--model-dir", str(mt), "--preset", args.mt_preset]
    decode += ["--batches", "1", "32", "--repeats", "5"]
    io = [py, "-m", "benchmarks.iobinding", "--provider", provider, "--batches", "1", "32", "--repeats", "10"]
    # the io-binding probe drives the left-padded graph: the kv-inplace step's left-padded exports
    left = [work / f"{args.mt_preset}-{precision}-left-padded" for precision in ("fp32", "fp16")]
    io_runs = {results / f"iobinding-{d.name}": d for d in left}
    io_json = f"iobinding{'' if provider == 'cpu' else '-' + provider}.json"
    plan = [
        Step("env", [py, "-m", "benchmarks.cuda_checks", "--sanity", provider], 120, env_figures),
        Step(
            "kv-inplace",
            [py, "-m", "benchmarks.kv_inplace_cuda", "--provider", provider, "--preset", args.mt_preset]
            + ["--out", str(results / "kv-inplace-cuda"), "--work-dir", str(work)],
            280,
            json_figures(
                results / "kv-inplace-cuda" / "kv-inplace-cuda.json",
                ("providers", "tokens_vs_cpu_fp32", "verdict", "ms_per_token", "batching_in_process", "errors"),
            ),
        ),
        Step(
            "pytest-gpu",
            [
                py,
                "-m",
                "pytest",
                *gpu_test_files(),
                "-m",
                "gpu",
                "-rA",
                "-q",
                "--log-level=WARNING",
                "--basetemp",
                str(work / "pytest"),
            ]
            + [f"--junitxml={results / 'pytest-gpu.xml'}"],
            300,
            pytest_figures,
        ),
        Step("verify-fp16", [py, "-c", "pass"], 120, verify),
        Step(
            "server",
            [py, "-m", "benchmarks.server", "--workloads", "classification", "--provider", provider]
            + ["--preset", args.vit_preset, "--clients", "1", "32", "--requests", "2000"]
            + ["--max-seconds", str(args.server_seconds), "--client-procs", str(args.client_procs)]
            + (["--workers", *map(str, args.server_workers)] if args.server_workers else [])
            + ["--repeats", "20", "--no-plot"]
            + ["--out", str(server_out), "--work-dir", str(work)],
            200,
            json_figures(server_out / "server.json", ("rows", "in_process_images_per_s", "overhead_vs_in_process")),
        ),
        Step("decode-cuda", [*decode, "--provider", provider], 120, decode_figures),
        Step(
            "iobinding",
            [
                "sh",
                "-c",
                " ; ".join(
                    f"[ ! -f {d}/model.json ] || {shlex.join([*io, str(d), '--out', str(o)])}"
                    for o, d in io_runs.items()
                ),
            ],
            180,
            iobinding_figures([o / io_json for o in io_runs]),
        ),
        Step("decode-cpu", [*decode, "--provider", "cpu", "--threads", str(args.cpu_threads)], 120, decode_figures),
    ]
    return [s for s in plan if s.name in args.steps]


def save(out: Path, work: Path, report: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "cuda-checks.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    results = work / "results"
    with tarfile.open(out / "cuda-checks.tar.gz", "w:gz") as tar:
        if results.is_dir():
            tar.add(results, arcname="results")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.sanity:
        return sanity(args.sanity)
    (args.work_dir / "results").mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "steps": {}}
    failed = 0
    for step in steps(args):
        result = run_step(step, args.time_scale)
        report["steps"][step.name] = result
        failed += result["rc"] != 0
        save(args.out, args.work_dir, report)
        if step.name == "env" and result["rc"] != 0:
            print(f"== the small graph did not run on {args.provider}: the other steps would not either")
            break
    print(json.dumps({name: (r["rc"], r["seconds"]) for name, r in report["steps"].items()}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
