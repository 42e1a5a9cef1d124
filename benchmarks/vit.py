"""ViT images/s: PyTorch eager vs onnxruntime (fused attention, decomposed, int8, token pruning).

Model FLOP/s is set against the machine's own fp32 GEMM peak, measured in the same run
with a large matmul on the same number of threads (docs/architecture.md's target: >= 85% of it;
int8 >= 1.5x fp32).

    python -m benchmarks.vit                 # or: attnserve-bench vit
    python -m benchmarks.vit --quick
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .common import (
    add_common_arguments,
    header,
    interleaved,
    machine,
    preset_name,
    pyplot,
    save_plot,
    table,
    write_results,
)
from .decode import vars_of

NAME = "vit"
CACHE_KEY = "attnserve-bench vit v1"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnserve-bench vit", description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--preset", type=preset_name("vit"), default="vit-s16")
    parser.add_argument("--batches", type=int, nargs="+", default=None, help="default 1 8 32 (quick: 1 2)")
    parser.add_argument("--keep-rates", type=float, nargs="*", default=None, help="default 0.7 0.5 (quick: none)")
    parser.add_argument("--no-pytorch", action="store_true", help="skip PyTorch eager (slow at batch 32)")
    return parser


def vit_flops(cfg, keep_rate: float = 1.0) -> float:
    """Multiply-adds x 2 of one image through the ViT (patch embed, attention, MLP, head)."""
    n = (cfg.image_size // cfg.patch_size) ** 2
    D, hidden = cfg.dim, int(cfg.dim * cfg.mlp_ratio)
    flops = 2 * n * cfg.patch_size**2 * cfg.in_channels * D
    tokens = n + 1
    prune = set(cfg.prune_layers or ((cfg.depth // 4, cfg.depth // 2, 3 * cfg.depth // 4) if keep_rate < 1 else ()))
    for block in range(cfg.depth):
        flops += 2 * tokens * D * 3 * D + 2 * 2 * tokens * tokens * D + 2 * tokens * D * D + 2 * 2 * tokens * D * hidden
        if block in prune and keep_rate < 1:
            tokens = 1 + int(np.ceil((tokens - 1) * keep_rate))
    return flops + 2 * D * cfg.num_classes


def gemm_peak(threads: int, size: int, repeats: int) -> float:
    """fp32 GFLOP/s of a (size x size) @ (size x size) matmul in onnxruntime, best of ``repeats``."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])],
        "gemm",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [size, size]) for x in "ab"],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [size, size])],
    )
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    a = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)
    session.run(None, {"a": a, "b": a})
    best = min(_time(lambda: session.run(None, {"a": a, "b": a})) for _ in range(repeats))
    del onnx
    return 2 * size**3 / best / 1e9


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def export(cfg_overrides: dict, preset: str, out: Path, precision: str, attention: str, keep_rate: float) -> Path:
    import torch

    from attnserve.export.options import ExportOptions
    from attnserve.export.pipeline import export_vit
    from attnserve.models import create_model

    key = f"{CACHE_KEY} {preset} {cfg_overrides} {precision} {attention} {keep_rate}"
    marker = out.with_name(out.name + ".key")
    if (out / "model.json").is_file() and marker.is_file() and marker.read_text() == key:
        return out
    torch.manual_seed(0)
    model = create_model(preset, keep_rate=keep_rate, **cfg_overrides).eval()
    print(f"exporting {preset} ({precision}, {attention}, keep {keep_rate}) to {out} ...", flush=True)
    options = ExportOptions(out=out, name=out.name, precision=precision, attention=attention, verify=False, force=True)
    export_vit(model, options)
    marker.write_text(key)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    import onnxruntime as ort
    import torch

    from attnserve.contract.manifest import load_manifest
    from attnserve.models import create_model

    q = args.quick
    args.batches = args.batches or ([1, 2] if q else [1, 8, 32])
    args.keep_rates = args.keep_rates if args.keep_rates is not None else ([] if q else [0.7, 0.5])
    args.repeats = args.repeats or (2 if q else 3)
    overrides = dict(image_size=32, patch_size=8, dim=64, depth=4, num_heads=2, num_classes=10) if q else {}
    torch.set_num_threads(args.threads)
    info = machine()
    header(f"vit: {args.preset}{' (quick: a tiny config)' if q else ''}", info, args.threads)
    peak = gemm_peak(args.threads, 512 if q else 2048, 3)
    print(f"   fp32 GEMM peak (onnxruntime MatMul, {args.threads} thread(s)): {peak:.1f} GFLOP/s")

    variants = {"onnxruntime fused fp32": ("fp32", "fused", 1.0)}
    variants["onnxruntime decomposed fp32"] = ("fp32", "decomposed", 1.0)
    variants["onnxruntime fused int8"] = ("int8", "fused", 1.0)
    for r in args.keep_rates:
        variants[f"onnxruntime fused fp32 keep {r}"] = ("fp32", "fused", r)
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    sessions = {}
    for name, (precision, attention, keep) in variants.items():
        out = args.work_dir / f"{args.preset}{'-quick' if q else ''}-{precision}-{attention}-k{keep}"
        path = export(overrides, args.preset, out, precision, attention, keep)
        sessions[name] = ort.InferenceSession(str(path / load_manifest(path).graphs["model"].file), options)
    model = create_model(args.preset, **overrides).eval()
    cfg = model.cfg
    rows = []
    for batch in args.batches:
        pixels = np.random.default_rng(0).standard_normal((batch, 3, cfg.image_size, cfg.image_size), dtype=np.float32)
        runs = {}
        if not args.no_pytorch:
            tensor = torch.from_numpy(pixels)

            def eager(t=tensor):
                with torch.inference_mode():
                    return model(t)

            runs["pytorch eager fp32"] = eager
        for name, session in sessions.items():
            runs[name] = lambda s=session, p=pixels: s.run(None, {"pixels": p})
        timings, _ = interleaved(runs, args.repeats)
        for name, timing in timings.items():
            keep = variants.get(name, ("", "", 1.0))[2]
            gflops = batch * vit_flops(cfg, keep) / timing.median / 1e9
            rows.append(
                {
                    "batch": batch,
                    "engine": name,
                    "images_per_s": batch / timing.median,
                    "ms_per_batch": 1000 * timing.median,
                    "model_gflops_per_s": gflops,
                    "fraction_of_gemm_peak": gflops / peak,
                    **timing.to_json(),
                }
            )
    index = {(r["batch"], r["engine"]): r for r in rows}
    for r in rows:
        r["ratio_to_fused_fp32"] = r["images_per_s"] / index[(r["batch"], "onnxruntime fused fp32")]["images_per_s"]
    headers = ["batch", "engine", "img/s", "ms/batch", "model GFLOP/s", "of GEMM peak", "vs fused fp32"]
    body = [
        [
            r["batch"],
            r["engine"],
            r["images_per_s"],
            r["ms_per_batch"],
            r["model_gflops_per_s"],
            f"{100 * r['fraction_of_gemm_peak']:.0f}%",
            f"{r['ratio_to_fused_fp32']:.2f}x",
        ]
        for r in rows
    ]
    print(table(headers, body))
    result = {"benchmark": NAME, "settings": vars_of(args), "machine": info, "gemm_peak_gflops": peak, "rows": rows}
    if not args.no_plot:
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for engine in dict.fromkeys(r["engine"] for r in rows):
            sel = [r for r in rows if r["engine"] == engine]
            ax.plot([r["batch"] for r in sel], [r["images_per_s"] for r in sel], marker="o", label=engine)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch")
        ax.set_ylabel("images/s (median)")
        ax.set_title(f"{args.preset}; GEMM peak {peak:.0f} GFLOP/s")
        ax.legend(fontsize=7)
        path = save_plot(fig, args.out, NAME, q)
        result["plot"] = str(path)
    write_results(args.out, NAME, result, q)
    return result


def main(argv: list[str] | None = None) -> int:
    run(build_parser().parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
