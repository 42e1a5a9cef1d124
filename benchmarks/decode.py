"""Translation tokens/s, greedy or beam search: attnserve vs PyTorch, transformers and CTranslate2, fp32 and int8.

Exactly N new tokens per text (the end token can never win, see ``translators.py``), batch
1 and 32, on ``mt-small`` (the Marian shape of docs/architecture.md's targets) and ``mt-base``. All engines
run the same random weights, with the same number of intra-op threads, taking turns in
one process. fp32 tokens are compared with the PyTorch reference decoder.

    python -m benchmarks.decode              # or: attnserve-bench decode
    python -m benchmarks.decode --quick      # seconds: mt-tiny, small batches, N = 8
    attnserve-bench decode --presets mt-base --vocab-size 58101   # opus-mt-en-de's real shape
    attnserve-bench decode --presets m2m100-small                 # M2M100 / NLLB's layout
    attnserve-bench decode --presets mt-base --vocab-size 58101 --beam-size 4   # CTranslate2's own settings
    attnserve-bench decode --presets mt-base --vocab-size 58101 --unscreened   # fp32 greedy with and without the screen

With ``--beam-size K`` every engine runs beam search with K beams (results in ``decode-beamK.json``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

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
from .translators import (
    EngineRunner,
    agreement,
    bench_translator,
    ctranslate2_model,
    engines,
    export_translator,
    model_label,
    source_ids,
)

NAME = "decode"
LEFT_PADDED_FP32 = "attnserve fp32 (left-padded cache)"
UNSCREENED_FP32 = "attnserve fp32 (unscreened)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnserve-bench decode", description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument(
        "--presets",
        type=preset_name("translation"),
        nargs="+",
        default=None,
        help="default mt-small mt-base (quick: mt-tiny)",
    )
    parser.add_argument("--batches", type=int, nargs="+", default=None, help="default 1 32 (quick: 1 4)")
    parser.add_argument("--new-tokens", type=int, default=None, help="N (default 30; quick 8)")
    parser.add_argument("--source-tokens", type=int, default=20, help="source length per text, end token included")
    parser.add_argument("--no-int8", action="store_true", help="fp32 engines only")
    parser.add_argument(
        "--beam-size",
        type=int,
        default=1,
        metavar="K",
        help="beams of every engine (default 1: greedy; CTranslate2's benchmarks use 4)",
    )
    parser.add_argument(
        "--left-padded",
        action="store_true",
        help="also attnserve with the left-padded cache (model directories exported before the in-place cache)",
    )
    parser.add_argument(
        "--unscreened",
        action="store_true",
        help="also attnserve fp32 without the int8-screened vocabulary projection (--no-screen-vocab exports)",
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        metavar="N",
        help="replace every preset's vocabulary by N (opus-mt-en-de: --presets mt-base --vocab-size 58101)",
    )
    return parser


MIN_VOCAB = 16  # the special ids (pad, start, end, unk) plus room for random source words


def settle(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> None:
    message = None
    if args.vocab_size is not None and args.vocab_size < MIN_VOCAB:
        message = f"--vocab-size must be at least {MIN_VOCAB}, got {args.vocab_size}"
    if args.beam_size < 1:
        message = f"--beam-size must be at least 1, got {args.beam_size}"
    if message is not None:
        if parser is None:
            raise ValueError(message)
        parser.error(message)  # exits 2 with the usage line
    q = args.quick
    args.presets = args.presets or (["mt-tiny"] if q else ["mt-small", "mt-base"])
    args.batches = args.batches or ([1, 4] if q else [1, 32])
    args.new_tokens = args.new_tokens or (8 if q else 30)
    args.repeats = args.repeats or (2 if q else 5)
    if q:
        args.source_tokens = min(args.source_tokens, 10)


def build_runners(model, label: str, args: argparse.Namespace) -> dict[str, Any]:
    import ctranslate2
    import torch
    import transformers

    from .translators import to_transformers

    transformers.logging.set_verbosity_error()  # generate() warns on every call that max_new_tokens wins

    work = args.work_dir
    # every beam is a row: the whole batch decodes at once, as CTranslate2's translate_batch does
    rows = max(64, max(args.batches) * args.beam_size)
    runners: dict[str, Any] = {
        "attnserve fp32": EngineRunner(export_translator(model, work / f"{label}-fp32", label), args.threads, rows)
    }
    if args.left_padded:  # the layout before the in-place cache, side by side
        out = work / f"{label}-fp32-left-padded"
        runners[LEFT_PADDED_FP32] = EngineRunner(
            export_translator(model, out, label, kv_cache="left-padded"), args.threads, rows
        )
    if args.unscreened:  # every step through the full fp32 projection, side by side
        out = work / f"{label}-fp32-unscreened"
        runners[UNSCREENED_FP32] = EngineRunner(export_translator(model, out, label, screen=False), args.threads, rows)
    runners["transformers fp32"] = to_transformers(model)
    ct2_dir = ctranslate2_model(model, work / f"{label}-ct2", label)
    kw = dict(device="cpu", intra_threads=args.threads, inter_threads=1)
    runners["ctranslate2 fp32"] = ctranslate2.Translator(str(ct2_dir), compute_type="float32", **kw)
    if not args.no_int8:
        int8_dir = export_translator(model, work / f"{label}-int8", label, precision="int8")
        runners["attnserve int8"] = EngineRunner(int8_dir, args.threads, rows)
        if args.left_padded:
            out = work / f"{label}-int8-left-padded"
            left = export_translator(model, out, label, precision="int8", kv_cache="left-padded")
            runners["attnserve int8 (left-padded cache)"] = EngineRunner(left, args.threads, rows)
        runners["ctranslate2 int8"] = ctranslate2.Translator(str(ct2_dir), compute_type="int8", **kw)
        try:  # PyTorch's own dynamic int8 Linear; absent from some builds
            runners["transformers int8"] = torch.ao.quantization.quantize_dynamic(
                to_transformers(model), {torch.nn.Linear}, dtype=torch.qint8
            )
        except Exception as exc:  # noqa: BLE001 - report and go on without it
            print(f"transformers int8 skipped: {exc}", file=sys.stderr)
    return runners


def run(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> dict[str, Any]:
    import torch

    settle(args, parser)
    torch.set_num_threads(args.threads)
    info = machine()
    search = "greedy" if args.beam_size == 1 else f"beam {args.beam_size}"
    header(
        f"decode: {search}, exactly N={args.new_tokens} new tokens, {args.source_tokens} source tokens",
        info,
        args.threads,
    )
    rows: list[dict[str, Any]] = []
    for name in args.presets:
        preset = model_label(name, args.vocab_size)  # the label rows, folders and caches go by
        model = bench_translator(name, vocab_size=args.vocab_size)
        runners = build_runners(model, preset, args)
        try:
            for batch in args.batches:
                ids = source_ids(batch, args.source_tokens, model.cfg.vocab_size, model.cfg.eos_id)
                contenders = engines(model, ids, args.new_tokens, runners, args.threads, args.beam_size)
                timings, tokens = interleaved(contenders, args.repeats)
                reference = tokens["pytorch reference"]
                for name, timing in timings.items():
                    n = batch * args.new_tokens
                    row = {
                        "preset": preset,
                        "vocab_size": model.cfg.vocab_size,
                        "batch": batch,
                        "beam_size": args.beam_size,
                        "engine": name,
                        "precision": "int8" if "int8" in name else "fp32",
                        "tokens": n,
                        "tokens_per_s": n / timing.median,
                        "ms_per_step": 1000 * timing.median / args.new_tokens,
                        **timing.to_json(),
                    }
                    if isinstance(runners.get(name), EngineRunner):  # decoder runs of its last call
                        row["decode_steps"] = runners[name].steps
                    if tokens[name]:
                        row["agreement_with_reference"] = agreement(tokens[name], reference)
                        assert all(len(t) == args.new_tokens for t in tokens[name]), f"{name}: not N tokens"
                    rows.append(row)
        finally:
            for runner in runners.values():
                if isinstance(runner, EngineRunner):
                    runner.close()
    add_ratios(rows)
    print_rows(rows)
    result = {"benchmark": NAME, "settings": vars_of(args), "machine": info, "rows": rows}
    if not args.no_plot:
        result["plot"] = str(plot(rows, args))
    write_results(args.out, result_name(args), result, args.quick)
    return result


def result_name(args: argparse.Namespace) -> str:
    """``decode`` for greedy, ``decode-beamK`` for beam search (both kept side by side)."""
    return NAME if args.beam_size == 1 else f"{NAME}-beam{args.beam_size}"


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """attnserve / CTranslate2 at the same preset, batch and precision (the headline)."""
    index = {(r["preset"], r["batch"], r["engine"]): r for r in rows}
    for r in rows:
        peer = index.get((r["preset"], r["batch"], f"ctranslate2 {r['precision']}"))
        if peer is not None:
            r["ratio_to_ctranslate2"] = r["tokens_per_s"] / peer["tokens_per_s"]


def print_rows(rows: list[dict[str, Any]]) -> None:
    body = []
    for r in rows:
        agree = r.get("agreement_with_reference")
        body.append(
            [
                r["preset"],
                r["batch"],
                r["engine"],
                r["tokens_per_s"],
                r["ms_per_step"],
                f"{r['ratio_to_ctranslate2']:.2f}x" if "ratio_to_ctranslate2" in r else "",
                f"{100 * agree['sequences_equal']:.0f}% / {100 * agree['tokens_equal']:.1f}%" if agree else "-",
            ]
        )
    headers = ["preset", "batch", "engine", "tok/s", "ms/step", "vs CT2 same prec.", "= reference (seq / tok)"]
    print(table(headers, body))


def plot(rows: list[dict[str, Any]], args: argparse.Namespace):
    plt = pyplot()
    presets, batches = [model_label(p, args.vocab_size) for p in args.presets], args.batches
    fig, axes = plt.subplots(1, len(presets) * len(batches), figsize=(5 * len(presets) * len(batches), 4.5))
    axes = list(axes) if hasattr(axes, "__len__") else [axes]
    for ax, (preset, batch) in zip(axes, [(p, b) for p in presets for b in batches]):
        sel = [r for r in rows if r["preset"] == preset and r["batch"] == batch]
        colors = ["tab:blue" if r["engine"].startswith("attnserve") else "tab:gray" for r in sel]
        ax.barh([r["engine"] for r in sel], [r["tokens_per_s"] for r in sel], color=colors)
        ax.invert_yaxis()
        beams = "" if args.beam_size == 1 else f", beam {args.beam_size}"
        ax.set_title(f"{preset}, batch {batch}{beams}, N={args.new_tokens}")
        ax.set_xlabel("tokens/s (median)")
    path = save_plot(fig, args.out, result_name(args), args.quick)
    return path


def vars_of(args: argparse.Namespace) -> dict[str, Any]:
    return {k: str(v) if hasattr(v, "__fspath__") else v for k, v in vars(args).items()}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    run(parser.parse_args(argv), parser)
    return 0


if __name__ == "__main__":
    sys.exit(main())
