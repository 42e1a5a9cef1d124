"""The in-place KV cache on a GPU: fp16 GroupQueryAttention against the CPU's fp32 tokens, ms/token.

What to measure where a device is lent (one run, well under 5 minutes on an H100):

- tokens: the engine on ``--provider`` (CUDA) with the fp16 in-place export (GroupQueryAttention
  writing into the bound buffers on the device), the fp16 left-padded export (MultiHeadAttention)
  and the fp32 left-padded one (CUDA's GroupQueryAttention has no fp32 kernel), each against the
  CPU engine's fp32 in-place tokens (equal to the PyTorch reference, tests/server/translation):
  share of identical sequences and tokens (fp16 may differ on near-ties);
- ms per token at 32 and 256 new tokens, batch 1 and 32, the contenders taking turns, and the
  ratio 256 / 32 (the CPU's target: <= 1.2);
- continuous vs static batching in process: 96 texts at once, a quarter long (128 new tokens),
  the rest short (16), tokens/s of each mode on the fp16 in-place export.

The in-place tokens on a device depend on the step's ids, positions and lengths being bound at
every step (io binding copies a host input to the device when it is bound: bound once, every step
read the first step's values). ``verdict`` says whether the fp16 in-place tokens agree with the
CPU's as well as the fp16 left-padded ones do (``ok``), else ``wrong tokens`` (exit 1).

Results: ``OUT/kv-inplace-cuda.json`` (and the table on stdout). Needs torch (CPU is enough) for
the exports and onnxruntime-gpu; ``--provider cpu`` is a dry run of the same steps.

    python -m benchmarks.kv_inplace_cuda --out /tmp/kv-inplace-cuda --work-dir /tmp/attnserve-cuda
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from .common import interleaved, machine, preset_name, table
from .translators import EngineRunner, agreement, bench_translator, export_translator, source_ids, texts_of

NAME = "kv-inplace-cuda"
CONTENDERS = {  # name -> (precision, kv_cache)
    "fp16 in-place (GroupQueryAttention)": ("fp16", "in-place"),
    "fp16 left-padded (MultiHeadAttention)": ("fp16", "left-padded"),
    "fp32 left-padded (MultiHeadAttention)": ("fp32", "left-padded"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kv_inplace_cuda", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/kv-inplace-cuda"))
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/attnserve-cuda"), help="exported models")
    parser.add_argument("--provider", choices=["cuda", "cpu"], default="cuda", help="cpu: a dry run without a GPU")
    parser.add_argument("--preset", type=preset_name("translation"), default="mt-small")
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 256], help="new tokens N (default 32 256)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--check-tokens", type=int, default=48, help="new tokens of the token comparison")
    parser.add_argument("--threads", type=int, default=0, help="CPU intra-op threads (0: all)")
    return parser


def _dirs(model, args: argparse.Namespace) -> dict[str, Path]:
    work, p = args.work_dir, args.preset
    dirs = {"reference": export_translator(model, work / f"{p}-fp32", p)}  # fp32, in place
    for name, (precision, layout) in CONTENDERS.items():
        dirs[name] = export_translator(model, work / f"{p}-{precision}-{layout}", p, precision, kv_cache=layout)
    return dirs


def mixed(runner: EngineRunner, short: list[str], long: list[str]) -> int:
    """Every text at once, short and long ones in two calls: the tokens made."""
    from attnserve.server.service.limits import prepare
    from attnserve.server.translation import DecodeOptions

    engine = runner.engine

    async def both():
        return await asyncio.gather(
            engine.translate(prepare(engine, short, DecodeOptions(max_new_tokens=16, return_scores=False))),
            engine.translate(prepare(engine, long, DecodeOptions(max_new_tokens=128, return_scores=False))),
        )

    results = runner.call(both())
    return sum(len(r.hypotheses[0].token_ids) for part in results for r in part)


IN_PLACE = next(iter(CONTENDERS))
LEFT_PADDED_FP16 = "fp16 left-padded (MultiHeadAttention)"
TOLERANCE = 0.02  # fp16 near-ties: the in-place tokens may differ from the left-padded ones by this share


def main(argv: list[str] | None = None) -> int:
    return check(build_parser().parse_args(argv))


def verdict(agreements: dict[str, dict[str, float]]) -> str | None:
    """Whether the in-place cache gives the tokens on the provider that the left-padded one does
    (both fp16, against the CPU's fp32): ``ok``, or ``wrong tokens``."""
    if IN_PLACE not in agreements or LEFT_PADDED_FP16 not in agreements:
        return None
    ours, peer = agreements[IN_PLACE]["tokens_equal"], agreements[LEFT_PADDED_FP16]["tokens_equal"]
    return "ok" if ours >= peer - TOLERANCE else "wrong tokens"


def check(args: argparse.Namespace) -> int:
    model = bench_translator(args.preset)
    cfg = model.cfg
    dirs = _dirs(model, args)
    rows = max(64, *args.batches)
    result: dict[str, Any] = {"benchmark": NAME, "settings": {**vars(args), "out": str(args.out)}, "errors": {}}
    result["machine"] = machine()
    ids = source_ids(8, 20, cfg.vocab_size, cfg.eos_id)
    reference = EngineRunner(dirs["reference"], args.threads, rows)  # the CPU's fp32 tokens
    expected = reference.translate(texts_of(ids), args.check_tokens)
    reference.close()
    runners = {}
    for name in CONTENDERS:  # a contender that fails on the provider is reported, the others go on
        try:
            runners[name] = EngineRunner(dirs[name], args.threads, rows, provider=args.provider)
            result.setdefault("providers", {})[name] = runners[name].decoder.get_providers()[0]
            tokens = runners[name].translate(texts_of(ids), args.check_tokens)
            result.setdefault("tokens_vs_cpu_fp32", {})[name] = agreement(tokens, expected)
        except Exception as exc:  # noqa: BLE001 - onnxruntime's errors on the device, reported
            result["errors"][name] = f"{type(exc).__name__}: {exc}"[:2000]
            runners.pop(name, None)
        save(args.out, result)
    result["verdict"] = verdict(result.get("tokens_vs_cpu_fp32", {}))
    save(args.out, result)
    print(json.dumps({k: result.get(k) for k in ("providers", "tokens_vs_cpu_fp32", "verdict", "errors")}, indent=1))
    result["ms_per_token"] = timing_rows = ms_per_token(runners, args, cfg)
    for r in runners.values():
        r.close()
    save(args.out, result)
    shown = [
        [r["batch"], r["new_tokens"], r["contender"], f"{r['ms_per_token']:.3f}", f"{r['ratio_to_shortest']:.2f}x"]
        for r in timing_rows
    ]
    print(table(["batch", "N", "contender", "ms/token", "vs shortest N"], shown))
    try:
        result["batching_in_process"] = batching(dirs[next(iter(CONTENDERS))], args, cfg)
    except Exception as exc:  # noqa: BLE001
        result["errors"]["batching_in_process"] = f"{type(exc).__name__}: {exc}"[:2000]
    save(args.out, result)
    print(json.dumps(result.get("batching_in_process"), indent=1))
    return 1 if result["errors"] or result["verdict"] == "wrong tokens" else 0


def save(out: Path, result: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{NAME}.json").write_text(json.dumps(result, indent=1, default=str) + "\n")


def ms_per_token(runners: dict[str, EngineRunner], args: argparse.Namespace, cfg) -> list[dict[str, Any]]:
    """ms per token of every contender at each batch and N, taking turns; with its ratio to the shortest N."""
    rows = []
    for batch in args.batches:
        texts = texts_of(source_ids(batch, 20, cfg.vocab_size, cfg.eos_id, seed=batch))
        for n in args.lengths:
            runs = {name: (lambda r=r, n=n, t=texts: r.translate(t, n)) for name, r in runners.items()}
            timings, _ = interleaved(runs, args.repeats)
            for name, t in timings.items():
                rows.append({"batch": batch, "new_tokens": n, "contender": name, "ms_per_token": 1e3 * t.median / n})
    first = {(r["batch"], r["contender"]): r["ms_per_token"] for r in rows if r["new_tokens"] == args.lengths[0]}
    for r in rows:
        r["ratio_to_shortest"] = r["ms_per_token"] / first[(r["batch"], r["contender"])]
    return rows


def batching(model_dir: Path, args: argparse.Namespace, cfg) -> dict[str, Any]:
    """Continuous vs static in process on ``model_dir``: 96 texts at once, a quarter long."""
    short = texts_of(source_ids(72, 8, cfg.vocab_size, cfg.eos_id, seed=1))
    long = texts_of(source_ids(24, 40, cfg.vocab_size, cfg.eos_id, seed=2))
    out = {}
    for mode in ("continuous", "static"):
        runner = EngineRunner(model_dir, args.threads, 32, provider=args.provider, batching=mode)
        mixed(runner, short[:8], long[:2])  # warm-up
        t0 = time.perf_counter()
        tokens = mixed(runner, short, long)
        seconds = time.perf_counter() - t0
        runner.close()
        out[mode] = {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}
    out["continuous_vs_static"] = out["continuous"]["tokens_per_s"] / out["static"]["tokens_per_s"]
    return out


if __name__ == "__main__":
    sys.exit(main())
