"""ms per generated token at N = 32..256 new tokens: attnserve's KV cache vs recomputing the prefix.

The onnxruntime variants run the same exported left-padded decoder graph: with the cache, each
step feeds one new token and the previous step's present key/value as past (MultiHeadAttention
returns past + new, a new tensor every step); without it, each step feeds the whole prefix with
an empty past (P = 0), so step t costs O(t) and a whole decode O(N^2). The end-to-end engine is
timed on both cache layouts: the in-place cache (``kv_cache: in-place``, what attnserve-export
writes: GroupQueryAttention writes each new token into a buffer bound as past and present) and the
left-padded one (directories exported before it). The target: the engine's ms/token at 256
<= 1.2x its ms/token at 32, batch 1 and 32.

    python -m benchmarks.kv_cache            # or: attnserve-bench kv-cache
    python -m benchmarks.kv_cache --quick
"""

from __future__ import annotations

import argparse
import sys
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
from .translators import EngineRunner, bench_translator, export_translator, source_ids, texts_of

NAME = "kv-cache"
ENGINE = "attnserve engine (in-place cache)"
ENGINE_LEFT = "attnserve engine (left-padded cache)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnserve-bench kv-cache", description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument(
        "--preset", type=preset_name("translation"), default=None, help="default mt-small (quick: mt-tiny)"
    )
    parser.add_argument("--lengths", type=int, nargs="+", default=None, help="N values (default 32 64 128 256)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--source-tokens", type=int, default=20)
    return parser


def decode(dec, cross: dict[str, np.ndarray], mask: np.ndarray, spec, n: int, cached: bool) -> np.ndarray:
    """Greedy ``n`` tokens with the decoder graph; (B, n) int64."""
    B, layers, d = mask.shape[0], spec.num_layers, spec.decoder_io
    empty = np.zeros((B, spec.num_heads, 0, spec.head_dim), np.float32)
    past = [empty] * (2 * layers)
    feeds = {d.src_mask: mask, **cross}
    prefix = np.full((B, 1), spec.bos_id, np.int64)
    for step in range(n):
        if cached:
            ids, start = prefix[:, -1:], step
        else:
            ids, start, past = prefix, 0, [empty] * (2 * layers)
        S = ids.shape[1]
        feeds.update(zip(d.past, past))
        feeds[d.input_ids] = ids
        feeds[d.positions] = np.broadcast_to(np.arange(start, start + S, dtype=np.int64), (B, S))
        feeds[d.self_mask] = np.ones((B, start + S), np.int32)
        logits, *past = dec.run(d.outputs, feeds)
        prefix = np.concatenate([prefix, logits.argmax(axis=1)[:, None]], axis=1)
    return prefix[:, 1:]


def run(args: argparse.Namespace) -> dict[str, Any]:
    q = args.quick
    args.preset = args.preset or ("mt-tiny" if q else "mt-small")
    args.lengths = args.lengths or ([8, 16] if q else [32, 64, 128, 256])
    args.repeats = args.repeats or (2 if q else 3)
    if q:
        args.source_tokens = min(args.source_tokens, 10)
    info = machine()
    header(f"kv-cache: {args.preset}, batch {args.batch}, greedy", info, args.threads)
    model = bench_translator(args.preset)
    work, rows_max = args.work_dir, max(64, args.batch)
    runner = EngineRunner(export_translator(model, work / f"{args.preset}-fp32", args.preset), args.threads, rows_max)
    left_dir = export_translator(model, work / f"{args.preset}-fp32-left-padded", args.preset, kv_cache="left-padded")
    left = EngineRunner(left_dir, args.threads, rows_max)
    spec = left.engine.spec
    ids = source_ids(args.batch, args.source_tokens, model.cfg.vocab_size, model.cfg.eos_id)
    L = args.source_tokens
    src = np.array(ids, np.int64)
    mask = np.ones((args.batch, L), np.int32)
    e = spec.encoder_io
    cross = dict(zip(spec.decoder_io.cross, left.encoder.run(list(e.cross), {e.src_ids: src, e.src_mask: mask})))
    rows = []
    try:
        for n in args.lengths:
            runs = {
                "onnxruntime, KV cache": lambda n=n: decode(left.decoder, cross, mask, spec, n, True),
                "onnxruntime, recompute prefix": lambda n=n: decode(left.decoder, cross, mask, spec, n, False),
                ENGINE: lambda n=n: runner.translate(texts_of(ids), n),
                ENGINE_LEFT: lambda n=n: left.translate(texts_of(ids), n),
            }
            timings, tokens = interleaved(runs, args.repeats)
            same = np.array_equal(tokens["onnxruntime, KV cache"], tokens["onnxruntime, recompute prefix"])
            engine_same = all(
                np.array_equal(np.array(tokens[name]), tokens["onnxruntime, KV cache"])
                for name in (ENGINE, ENGINE_LEFT)
            )
            for name, timing in timings.items():
                rows.append(
                    {
                        "new_tokens": n,
                        "variant": name,
                        "ms_per_token": 1000 * timing.median / n,
                        "tokens_equal_cache_vs_recompute": bool(same),
                        "engine_equal_cache": bool(engine_same),
                        **timing.to_json(),
                    }
                )
    finally:
        runner.close()
        left.close()
    base = {r["variant"]: r["ms_per_token"] for r in rows if r["new_tokens"] == args.lengths[0]}
    for r in rows:
        r["ratio_to_shortest"] = r["ms_per_token"] / base[r["variant"]]
    print(
        table(
            ["N", "variant", "ms/token", f"vs N={args.lengths[0]}", "cache = recompute = engines' tokens"],
            [
                [
                    r["new_tokens"],
                    r["variant"],
                    r["ms_per_token"],
                    f"{r['ratio_to_shortest']:.2f}x",
                    r["tokens_equal_cache_vs_recompute"] and r["engine_equal_cache"],
                ]
                for r in rows
            ],
        )
    )
    result = {"benchmark": NAME, "settings": vars_of(args), "machine": info, "rows": rows}
    if not args.no_plot:
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(6, 4))
        for variant in base:
            sel = [r for r in rows if r["variant"] == variant]
            ax.plot([r["new_tokens"] for r in sel], [r["ms_per_token"] for r in sel], marker="o", label=variant)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("new tokens N")
        ax.set_ylabel("ms per token (median)")
        ax.set_title(f"{args.preset}, batch {args.batch}")
        ax.legend()
        path = save_plot(fig, args.out, NAME, args.quick)
        result["plot"] = str(path)
    write_results(args.out, NAME, result, args.quick)
    return result


def main(argv: list[str] | None = None) -> int:
    run(build_parser().parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
