"""The CUDA checks of attnserve on a GPU machine, in one run, most valuable first.

Each step is a subprocess with its own time limit, cut to what is left of the run's budget
(``--budget-s``, 8 minutes by default: the steps that do not fit are reported skipped); after
every step ``OUT/cuda-checks.json`` (what ran, exit codes, seconds, the figures read from each
step's results) and ``OUT/cuda-checks.tar.gz`` (the raw result files of the steps so far) are
rewritten, so a run cut short still leaves what it finished. Steps (``cuda_steps.py``), most
valuable first:

1. ``env``: the GPU as ``nvidia-smi`` names it, the driver, onnxruntime's version and providers,
   and a small fp16 graph (MatMul, Softmax, Conv: cuBLAS, onnxruntime's own kernels, cuDNN)
   run on the provider against numpy; when it fails the run stops there;
2. ``kv-inplace``: ``benchmarks.kv_inplace_cuda``: the fp16 in-place export on the device and
   the left-padded fp16 / fp32 ones, their tokens against the CPU's fp32 tokens and the
   ``verdict`` (``ok``: the in-place tokens agree as well as the left-padded ones), ms/token at
   32 and 256 new tokens (batch 1 and 32), continuous vs static batching;
3. ``pytest-gpu``: ``pytest -m gpu`` (fp16 exports verified on CUDA, the server on ``--provider
   cuda``, the engine's device cache), its temporary folders kept under the work dir;
4. ``server``: ``benchmarks.server`` on the provider: classification, dynamic batching vs
   unbatched, 1 and 32 clients, a server of one process, one of ``--server-workers`` (4) and
   one of as many workers with ``--shared-classifier`` (their batches run in one process),
   against in-process onnxruntime at the same batch, over attnserve.v1 ``Classify`` (raw tensors,
   and 20 KB JPEGs the server decodes) and over KServe streams with the image in system shared
   memory (the cheapest door per request; one process only: shared memory is refused with workers);
5. ``decode-graphs``: ``benchmarks.decode_graphs``: the engine's decoder steps at the batch's
   size, in step buckets, and replayed as CUDA graphs, ms/step at batch 1 and 32 (mt-small fp16);
6. ``ct2-gpu``: the same at opus-mt's shape (mt-base, 58,101 words) beside CTranslate2 float16
   on the same GPU;
7. ``verify-fp16``: ``attnserve-export verify --device cuda`` of the fp16 model directories the
   tests exported, with their export reports (max |diff|, top-1 agreement);
8. ``decode-cuda``: ``benchmarks/decode_engine.py`` on the fp32 left-padded export (the engine
   and the plain loop, greedy);
9. ``iobinding``: ``benchmarks.iobinding --provider cuda`` on the left-padded translators;
10. ``decode-cpu``: step 8 on the CPU provider of the same machine, for the ratio.

Run from the repository root, with onnxruntime-gpu in place of onnxruntime (``attnserve[cuda]``)
and torch for the exports and CTranslate2 (the bench extra); ``--provider cpu`` is a dry run of
the same steps without a GPU, ``--quick`` on tiny presets and sizes.

    python -m benchmarks.cuda_checks --out /tmp/cuda-checks --work-dir /tmp/cuda-work
    python -m benchmarks.cuda_checks --provider cpu --quick --out /tmp/dry --work-dir /tmp/dry-work
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from .cuda_steps import STEPS, Step, plan

CUDA_PROVIDER = "CUDAExecutionProvider"
MIN_STEP_S = 20.0  # a step with less of the budget left is skipped, not started


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
    parser.add_argument("--quick", action="store_true", help="tiny presets and sizes: a dry run of every step")
    parser.add_argument("--budget-s", type=float, default=480.0, help="the whole run's time (default 8 minutes)")
    parser.add_argument("--vit-preset", default="vit-s16", help="ViT the server serves (default vit-s16)")
    parser.add_argument("--mt-preset", default="mt-small", help="translator of the decode steps (default mt-small)")
    parser.add_argument(
        "--server-seconds",
        type=float,
        default=6.0,
        help="time bound per server, transport and load level (default 6: the twenty windows fit the step's 210 s)",
    )
    parser.add_argument("--client-procs", type=int, default=4, help="load-generator processes of the server step")
    parser.add_argument(
        "--server-workers", type=int, nargs="*", default=[4], help="also a server of N worker processes, per N (>= 2)"
    )
    parser.add_argument("--cpu-threads", type=int, default=1, help="intra-op threads of the CPU decode run")
    parser.add_argument("--time-scale", type=float, default=1.0, help="multiplies every time limit and the budget")
    parser.add_argument(
        "--sanity", choices=["cuda", "cpu"], help="only run the env step's small graph on this provider"
    )
    return parser


def run_step(step: Step, limit_s: float) -> dict[str, Any]:
    """Run one step for at most ``limit_s``, its output streamed to ours; exit code, seconds and
    the figures ``read`` finds."""
    print(f"\n== step {step.name} (at most {limit_s:.0f} s): {' '.join(step.argv)}", flush=True)
    t0 = time.monotonic()
    lines: list[str] = []
    with subprocess.Popen(step.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        deadline = t0 + limit_s
        try:
            assert proc.stdout is not None
            for line in proc.stdout:  # the deadline is checked per line; a silent hang hits wait() below
                print(line, end="", flush=True)
                lines.append(line)
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(step.argv, limit_s)
            proc.wait(max(1.0, deadline - time.monotonic()))
            rc: int | str = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = "timeout"
    text = "".join(lines)
    result: dict[str, Any] = {"argv": step.argv, "rc": rc, "limit_s": round(limit_s)}
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
    report["budget_s"] = budget = args.budget_s * args.time_scale
    end, failed = time.monotonic() + budget, 0
    for step in plan(args):
        left = end - time.monotonic()
        if left < MIN_STEP_S:
            report["steps"][step.name] = {"rc": "skipped", "why": f"{left:.0f} s of the {budget:.0f} s budget left"}
            print(f"== step {step.name}: skipped, the budget is spent", flush=True)
            continue
        result = run_step(step, min(step.limit_s * args.time_scale, left))
        report["steps"][step.name] = result
        failed += result["rc"] != 0
        save(args.out, args.work_dir, report)
        if step.name == "env" and result["rc"] != 0:
            print(f"== the small graph did not run on {args.provider}: the other steps would not either")
            break
    save(args.out, args.work_dir, report)
    print(json.dumps({name: (r["rc"], r.get("seconds")) for name, r in report["steps"].items()}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
