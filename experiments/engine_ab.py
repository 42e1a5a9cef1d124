"""A/B of onnxruntime graph optimizers on the same graphs: which optimizers to leave out on CPU.

For each model directory, two sets of CPU sessions differ only in the onnxruntime graph
optimizers they leave out (``--a-disable`` / ``--b-disable``, comma-separated names from
onnxruntime's ``graph_transformer_utils.cc``; ``none`` = leave nothing out). They take
turns one repetition each (benchmarks/README.md), so load from other processes lands on
both alike; read the B/A ratio.

- translation: attnserve's TranslationEngine end to end, greedy, exactly N new tokens
  (the ``attnserve.benchmarks.decode`` settings); tokens of A and B must be identical;
- image-classification: one ``session.run`` of random pixels per repetition; the top-1
  labels of A and B must be identical.

    python -m experiments.engine_ab /tmp/attnserve-bench/mt-small-fp32 /tmp/attnserve-bench/mt-small-int8
    python -m experiments.engine_ab /tmp/attnserve-bench/vit-s16-fp32-fused-k1.0 --batches 1 8
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from attnserve.benchmarks.common import Timing, header, loadavg, machine, table, write_results

NAME = "engine-ab"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.engine_ab", description=__doc__.splitlines()[0])
    parser.add_argument("model_dirs", type=Path, nargs="+", help="translation or image-classification model dirs")
    parser.add_argument("--a-disable", default="none", help="optimizers A leaves out (default: none)")
    parser.add_argument("--b-disable", default="SkipLayerNormFusion", help="optimizers B leaves out")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--new-tokens", type=int, default=30, help="translation: N new tokens per text")
    parser.add_argument("--source-tokens", type=int, default=20, help="translation: source tokens per text")
    parser.add_argument("--repeats", type=int, default=9, help="timed rounds per variant (after one warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of both variants")
    parser.add_argument("--out", type=Path, default=None, help="write NAME.json here (default: print only)")
    return parser


def optimizer_list(text: str) -> tuple[str, ...]:
    return () if text.strip().lower() in ("", "none") else tuple(n.strip() for n in text.split(",") if n.strip())


def optimized_op_counts(path: Path, options) -> collections.Counter[str]:
    """Op types of the graph as onnxruntime optimised it with ``options`` (a saved copy)."""
    import onnx
    import onnxruntime as ort

    options.log_severity_level = 3  # the save warns that the copy is specific to this machine: it is only counted
    with tempfile.TemporaryDirectory() as tmp:
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        model = onnx.load(options.optimized_model_filepath, load_external_data=False)
    options.optimized_model_filepath = ""
    return collections.Counter(node.op_type for node in model.graph.node)


def translation_variants(
    model_dir: Path, variants: dict[str, tuple[str, ...]], args: argparse.Namespace
) -> tuple[dict[str, Any], dict[str, collections.Counter[str]]]:
    from attnserve.benchmarks.translators import EngineRunner
    from attnserve.contract.manifest import load_manifest
    from attnserve.server.shared.onnx_sessions import session_options

    manifest = load_manifest(model_dir)
    rows = max(64, max(args.batches))
    runners = {name: EngineRunner(model_dir, args.threads, rows, disabled) for name, disabled in variants.items()}
    decoder = model_dir / manifest.graphs["decoder"].file
    ops = {
        name: optimized_op_counts(decoder, session_options(args.threads, disabled_optimizers=disabled))
        for name, disabled in variants.items()
    }
    return runners, ops


def translation_runs(runners: dict[str, Any], batch: int, args: argparse.Namespace) -> dict[str, Callable[[], Any]]:
    from attnserve.benchmarks.translators import source_ids, texts_of

    some = next(iter(runners.values()))
    vocab = some.engine.tokenizer.get_vocab_size()
    texts = texts_of(source_ids(batch, args.source_tokens, vocab, some.engine.spec.eos_id))
    return {name: (lambda r=runner: r.translate(texts, args.new_tokens)) for name, runner in runners.items()}


def vit_variants(
    model_dir: Path, variants: dict[str, tuple[str, ...]], args: argparse.Namespace
) -> tuple[dict[str, Any], dict[str, collections.Counter[str]]]:
    import onnxruntime as ort

    from attnserve.contract.manifest import load_manifest
    from attnserve.server.shared.onnx_sessions import session_options

    manifest = load_manifest(model_dir)
    path = model_dir / manifest.graphs["model"].file
    sessions, ops = {}, {}
    for name, disabled in variants.items():
        sessions[name] = ort.InferenceSession(
            str(path), session_options(args.threads, disabled_optimizers=disabled), providers=["CPUExecutionProvider"]
        )
        ops[name] = optimized_op_counts(path, session_options(args.threads, disabled_optimizers=disabled))
    return {"sessions": sessions, "image_size": manifest.preprocessing.image_size}, ops


def vit_runs(vit: dict[str, Any], batch: int, args: argparse.Namespace) -> dict[str, Callable[[], Any]]:
    size = vit["image_size"]
    pixels = np.random.default_rng(0).standard_normal((batch, 3, size, size), dtype=np.float32)  # (B, 3, H, W)

    def run(session) -> list[list[int]]:
        logits = session.run(None, {"pixels": pixels})[0]  # (B, K)
        return [[int(i)] for i in logits.argmax(axis=1)]

    return {name: (lambda s=s: run(s)) for name, s in vit["sessions"].items()}


def interleaved_wall_and_cpu(
    runs: dict[str, Callable[[], Any]], repeats: int
) -> tuple[dict[str, Timing], dict[str, Timing], dict[str, Any]]:
    """Like ``common.interleaved``, also timing the process's CPU seconds (all its threads).

    On a shared, oversubscribed machine wall time includes waiting for a core; CPU time
    does not (it still includes cache and memory-bandwidth contention), so it is the
    steadier of the two when both variants are single-threaded.
    """
    values = {name: fn() for name, fn in runs.items()}
    wall = {name: Timing() for name in runs}
    cpu = {name: Timing() for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            wall[name].seconds.append(time.perf_counter() - t0)
            cpu[name].seconds.append(time.process_time() - c0)
    return wall, cpu, values


def run(args: argparse.Namespace) -> dict[str, Any]:
    from attnserve.contract.manifest import load_manifest

    variants = {"A": optimizer_list(args.a_disable), "B": optimizer_list(args.b_disable)}
    info = machine()
    header(
        f"engine A/B: A leaves out {list(variants['A']) or 'nothing'}, B leaves out {list(variants['B']) or 'nothing'}",
        info,
        args.threads,
    )
    rows: list[dict[str, Any]] = []
    for model_dir in args.model_dirs:
        kind = load_manifest(model_dir).kind
        translation = kind == "translation"
        runners, ops = (translation_variants if translation else vit_variants)(model_dir, variants, args)
        fused = {name: ops[name].get("SkipLayerNormalization", 0) for name in variants}
        try:
            for batch in args.batches:
                runs = (translation_runs if translation else vit_runs)(runners, batch, args)
                timings, cpu, outputs = interleaved_wall_and_cpu(runs, args.repeats)
                a, b = timings["A"].median, timings["B"].median
                units = batch * (args.new_tokens if translation else 1)
                rows.append(
                    {
                        "model_dir": str(model_dir),
                        "kind": kind,
                        "batch": batch,
                        "unit": "tok/s" if translation else "img/s",
                        "a_per_s": units / a,
                        "b_per_s": units / b,
                        "b_over_a": a / b,
                        "b_over_a_cpu": cpu["A"].median / cpu["B"].median,
                        "outputs_equal": outputs["A"] == outputs["B"],
                        "skip_layer_norm_nodes": fused,
                        "a": timings["A"].to_json(),
                        "b": timings["B"].to_json(),
                        "a_cpu": cpu["A"].to_json(),
                        "b_cpu": cpu["B"].to_json(),
                    }
                )
        finally:
            if translation:
                for runner in runners.values():
                    runner.close()
    body = [
        [
            Path(r["model_dir"]).name,
            r["batch"],
            f"{r['a_per_s']:,.0f} {r['unit']}",
            f"{r['b_per_s']:,.0f} {r['unit']}",
            f"{r['b_over_a']:.3f}x",
            f"{r['b_over_a_cpu']:.3f}x",
            "yes" if r["outputs_equal"] else "NO",
            f"{r['skip_layer_norm_nodes']['A']} / {r['skip_layer_norm_nodes']['B']}",
        ]
        for r in rows
    ]
    print(
        table(
            ["model", "batch", "A", "B", "B / A (wall)", "B / A (CPU s)", "same outputs", "SkipLayerNorm nodes A / B"],
            body,
        )
    )
    result = {
        "benchmark": NAME,
        "settings": {k: str(v) for k, v in vars(args).items()},
        "variants": variants,
        "machine": info,
        "rows": rows,
    }
    if args.out is not None:
        write_results(args.out, NAME, result, quick=False)
    else:
        print(f"load average at end: {' '.join(f'{x:.2f}' for x in loadavg())}")
    return result


def main(argv: list[str] | None = None) -> int:
    run(build_parser().parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
