"""Decoder steps with and without CUDA graphs, beside CTranslate2 on the same device: ms per step.

Greedy, exactly N new tokens per text (the random translator of ``translators.py`` never ends
early), batch 1 and 32, the contenders taking turns in one process:

- the engine on the fp16 in-place export (GroupQueryAttention writing into bound buffers), its
  steps at the batch's own size (``step buckets off``), at fixed sizes into persistent buffers
  (``on``) and replayed as CUDA graphs (``cuda-graphs``: ``EngineSettings.step_buckets``, the
  server's ``--decode-step-buckets``);
- the engine on the fp16 left-padded export (MultiHeadAttention, the whole cache copied each step);
- with ``--ctranslate2``: CTranslate2 on the same device and weights (float16 on CUDA).

Tokens are compared with the ``off`` contender's (fp16 kernels may differ on near-ties: what
matters is that graphs and buckets change nothing). Each in-place contender reports whether its
session had graphs and how many it captured (0 with graphs: every step ran without one).

``--provider cpu`` is a dry run of the same steps (fp32; no graphs, the ``cuda-graphs``
contender runs its buckets without them). Results: ``OUT/decode-graphs.json`` and a table.

    python -m benchmarks.decode_graphs --out /tmp/decode-graphs --work-dir /tmp/attnserve-cuda
    python -m benchmarks.decode_graphs --preset mt-base --vocab-size 58101 --ctranslate2   # opus-mt's shape
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from .common import interleaved, machine, preset_name, table
from .translators import (
    EngineRunner,
    agreement,
    bench_translator,
    ctranslate2_model,
    export_translator,
    model_label,
    source_ids,
    texts_of,
    vocab_id,
)

NAME = "decode-graphs"
BUCKETS = {"step buckets off": "off", "step buckets on": "on", "cuda graphs": "cuda-graphs"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.decode_graphs", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/decode-graphs"))
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/attnserve-cuda"), help="exported models")
    parser.add_argument("--provider", choices=["cuda", "cpu"], default="cuda", help="cpu: a dry run without a GPU")
    parser.add_argument("--preset", type=preset_name("translation"), default="mt-small")
    parser.add_argument("--vocab-size", type=int, default=None, help="replaces the preset's (opus-mt-en-de: 58101)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--new-tokens", type=int, default=64, help="N: tokens generated per text")
    parser.add_argument("--source-tokens", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="CPU intra-op threads (0: all)")
    parser.add_argument("--ctranslate2", action="store_true", help="also CTranslate2 on the same device")
    parser.add_argument("--no-left-padded", action="store_true", help="leave out the left-padded export")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.ctranslate2 and (missing := ctranslate2_missing(args.provider)):
        print(f"decode-graphs: --ctranslate2: {missing}", file=sys.stderr)  # before minutes of exports
        return 2
    return run(args)


def ctranslate2_missing(provider: str) -> str | None:
    """Why CTranslate2 cannot run on ``provider`` here, or None."""
    try:
        import ctranslate2
    except ImportError:
        return "ctranslate2 is not installed (pip install ctranslate2)"
    if provider == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        return "CTranslate2 sees no CUDA device (its CUDA build needs CUDA 12's runtime and cuBLAS)"
    return None


def build_runners(model, label: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every contender: EngineRunners by name, and CTranslate2's translator."""
    precision = "fp16" if args.provider == "cuda" else "fp32"
    work, rows = args.work_dir, max(64, *args.batches)
    in_place = export_translator(model, work / f"{label}-{precision}-in-place", label, precision, kv_cache="in-place")
    runners: dict[str, Any] = {}
    for name, buckets in BUCKETS.items():
        runners[name] = EngineRunner(in_place, args.threads, rows, provider=args.provider, step_buckets=buckets)
    if not args.no_left_padded:
        out = work / f"{label}-{precision}-left-padded"
        left = export_translator(model, out, label, precision, kv_cache="left-padded")
        runners[f"left-padded {precision}"] = EngineRunner(left, args.threads, rows, provider=args.provider)
    if args.ctranslate2:
        import ctranslate2

        ct2_dir = ctranslate2_model(model, work / f"{label}-ct2", label)
        compute = "float16" if args.provider == "cuda" else "float32"
        kw = {"intra_threads": args.threads} if args.provider == "cpu" else {}
        runners[f"ctranslate2 {compute}"] = ctranslate2.Translator(
            str(ct2_dir), device=args.provider, compute_type=compute, **kw
        )
    return runners


def contenders(runners: dict[str, Any], ids: list[list[int]], new_tokens: int) -> dict[str, Any]:
    texts, words = texts_of(ids), [[f"t{i}" for i in row[:-1]] + ["</s>"] for row in ids]
    out = {}
    for name, runner in runners.items():
        if isinstance(runner, EngineRunner):
            out[name] = lambda r=runner: r.translate(texts, new_tokens)
        else:

            def ct2(t=runner) -> list[list[int]]:
                results = t.translate_batch(words, beam_size=1, max_decoding_length=new_tokens, return_scores=False)
                return [[vocab_id(w) for w in r.hypotheses[0]] for r in results]

            out[name] = ct2
    return out


def graph_state(runner: Any) -> dict[str, Any] | None:
    """Whether an engine's steps ran in buckets, with graphs, and the graphs it captured."""
    if not isinstance(runner, EngineRunner):
        return None
    buckets = runner.engine._scheduler.runner.buckets
    if buckets is None:
        return {"buckets": False}
    return {"buckets": True, "graphs": buckets.graphs, "captures": buckets.captures}


def run(args: argparse.Namespace) -> int:
    label = model_label(args.preset, args.vocab_size)
    model = bench_translator(args.preset, vocab_size=args.vocab_size)
    cfg = model.cfg
    result: dict[str, Any] = {"machine": machine(), "args": {k: str(v) for k, v in vars(args).items()}, "rows": []}
    t0 = time.monotonic()
    runners = build_runners(model, label, args)
    result["setup_s"] = round(time.monotonic() - t0, 1)
    try:
        for batch in args.batches:
            ids = source_ids(batch, args.source_tokens, cfg.vocab_size, cfg.eos_id, seed=batch)
            timings, tokens = interleaved(contenders(runners, ids, args.new_tokens), args.repeats)
            reference = tokens["step buckets off"]
            for name, timing in timings.items():
                result["rows"].append(
                    {
                        "preset": label,
                        "batch": batch,
                        "contender": name,
                        "ms_per_step": 1e3 * timing.median / args.new_tokens,
                        "tokens_per_s": batch * args.new_tokens / timing.median,
                        "agreement_with_buckets_off": agreement(tokens[name], reference),
                        **timing.to_json(),
                    }
                )
        result["engines"] = {name: graph_state(r) for name, r in runners.items()}
    finally:
        for runner in runners.values():
            if isinstance(runner, EngineRunner):
                runner.close()
    report(result, args)
    return 0


def report(result: dict[str, Any], args: argparse.Namespace) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{NAME}.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(
        table(
            ["batch", "contender", "ms/step", "tok/s", "same sequences"],
            [
                [
                    r["batch"],
                    r["contender"],
                    f"{r['ms_per_step']:.3f}",
                    f"{r['tokens_per_s']:.0f}",
                    f"{r['agreement_with_buckets_off']['sequences_equal']:.2f}",
                ]
                for r in result["rows"]
            ],
        )
    )
    print(json.dumps({"engines": result.get("engines")}))


if __name__ == "__main__":
    sys.exit(main())
