"""Translation engine throughput: greedy tokens/s at batch 1 and 32 with exactly N new tokens.

A random ``mt-small`` (Marian-shaped: d 256, 3+3 layers, vocab 8000) is exported once
to ``--model-dir`` (reused when present). Its end-token logit bias is set very low so
every text runs to ``max_new_tokens`` (N) and the token count is exact. The engine is
timed end to end through ``translate`` (tokenize, encode, decode, results), next to a
plain onnxruntime greedy loop over the same sessions for reference (docs/architecture.md,
"Performance targets").

    python benchmarks/decode_engine.py --threads 1
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from attnserve.benchmarks.common import preset_name


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=Path("/tmp/attnserve-bench/mt-small"))
    parser.add_argument("--preset", type=preset_name("translation"), default="mt-small")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    parser.add_argument(
        "--provider", choices=["cpu", "cuda"], default="cpu", help="onnxruntime provider of both contenders"
    )
    parser.add_argument("--no-spin", action="store_true", help="idle onnxruntime threads sleep instead of spinning")
    parser.add_argument("--new-tokens", type=int, default=30, help="N: tokens generated per text")
    parser.add_argument("--source-tokens", type=int, default=20, help="source length per text")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-baseline", action="store_true", help="skip the plain onnxruntime loop")
    parser.add_argument("--scores", action="store_true", help="return scores (adds a log-softmax per step)")
    parser.add_argument("--profile", action="store_true", help="cProfile the engine at the last batch size")
    parser.add_argument(
        "--mixed",
        type=int,
        default=0,
        metavar="TEXTS",
        help="also compare continuous batching with static batches of --mixed-batch on TEXTS texts whose "
        "lengths are uniform in 8..--mixed-max",
    )
    parser.add_argument("--mixed-batch", type=int, default=32)
    parser.add_argument("--mixed-max", type=int, default=128)
    return parser


def export_model(out: Path, preset: str) -> None:
    import torch

    from attnserve.export.modeldir import placeholder_tokenizer, write_translation_dir
    from attnserve.models import create_model

    torch.manual_seed(0)
    model = create_model(preset, dropout=0.0).eval()
    with torch.no_grad():
        model.logits_bias[model.cfg.eos_id] = -1e4  # never ends early: exactly N tokens per text
    print(f"exporting a random {preset} to {out} ...", file=sys.stderr)
    cfg = model.cfg
    tokenizer = placeholder_tokenizer(cfg.vocab_size, cfg.pad_id, cfg.bos_id, cfg.eos_id, cfg.unk_id)
    write_translation_dir(model, out, tokenizer, name=preset, force=True)


def texts_for(batch: int, length: int, vocab: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(f"t{i}" for i in rng.integers(4, vocab, length - 1)) for _ in range(batch)]


def plain_loop(enc, dec, texts, tokenizer, spec, new_tokens: int) -> list[list[int]]:
    """The baseline, what a hand-written greedy server would do: tokenize, encode, feed
    present back as past, argmax with pad/bos masked, then detokenize, as the engine does
    (it returns every text's tokens and its text). Returns the tokens, one list per text."""
    ids = [e.ids for e in tokenizer.encode_batch(texts)]
    B, L = len(ids), max(map(len, ids))
    src = np.zeros((B, L), np.int64)
    mask = np.zeros((B, L), np.int32)
    for i, row in enumerate(ids):
        src[i, : len(row)], mask[i, : len(row)] = row, 1
    n, e, d = spec.num_layers, spec.encoder_io, spec.decoder_io
    cross = enc.run(list(e.cross), {e.src_ids: src, e.src_mask: mask})  # 2n x (B, H, L, D)
    feeds = {d.src_mask: mask, **dict(zip(d.cross, cross))}
    if d.in_place:
        out = _in_place_steps(dec, feeds, spec, B, new_tokens)
        generated = out.tolist()
        tokenizer.decode_batch(generated, skip_special_tokens=True)
        return generated
    past = [np.zeros((B, spec.num_heads, 0, spec.head_dim), np.float32)] * (2 * n)
    tokens = np.full((B, 1), spec.bos_id, np.int64)
    out = np.empty((B, new_tokens), np.int64)
    for step in range(new_tokens):
        feeds.update(zip(d.past, past))
        feeds[d.input_ids] = tokens
        feeds[d.positions] = np.full((B, 1), step, np.int64)
        feeds[d.self_mask] = np.ones((B, step + 1), np.int32)
        logits, *past = dec.run(d.outputs, feeds)
        logits[:, [spec.pad_id, spec.bos_id]] = -np.inf
        tokens = logits.argmax(axis=1)[:, None]
        out[:, step] = tokens[:, 0]
    generated = out.tolist()
    tokenizer.decode_batch(generated, skip_special_tokens=True)  # the texts a server would send back
    return generated


def _in_place_steps(dec, feeds: dict, spec, B: int, new_tokens: int) -> np.ndarray:
    """The plain loop over an in-place decoder (model.json ``kv_cache: in-place``): one buffer of
    ``new_tokens`` columns per layer and kind bound as past and present, every row at the same
    length; the step writes its ids, positions and lengths into bound arrays. (B, new_tokens) int64."""
    import onnxruntime as ort

    d = spec.decoder_io
    shape = (B, spec.num_heads, new_tokens, spec.head_dim)
    ids, positions = np.full((B, 1), spec.bos_id, np.int64), np.zeros((B, 1), np.int64)
    seqlens, total = np.zeros(B, np.int32), np.ones((), np.int32)
    arrays = {**feeds, d.input_ids: ids, d.positions: positions, d.seqlens: seqlens, d.total_length: total}
    values = {name: ort.OrtValue.ortvalue_from_numpy(a) for name, a in arrays.items()}
    binding = dec.io_binding()
    for name, value in values.items():
        binding.bind_ortvalue_input(name, value)
    binding.bind_output(d.logits, "cpu")
    buffers = [ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, np.float32)) for _ in d.past]
    for past, present, value in zip(d.past, d.present, buffers):
        binding.bind_ortvalue_input(past, value)
        binding.bind_ortvalue_output(present, value)
    out = np.empty((B, new_tokens), np.int64)
    for step in range(new_tokens):
        dec.run_with_iobinding(binding)
        logits = binding.get_outputs()[0].numpy()  # (B, V)
        logits[:, [spec.pad_id, spec.bos_id]] = -np.inf
        ids[:, 0] = out[:, step] = logits.argmax(axis=1)
        positions += 1
        seqlens += 1
        total += 1
    return out


def plain_count(enc, dec, texts, tokenizer, spec, new_tokens: int) -> int:
    """:func:`plain_loop`, counting the tokens it made."""
    return sum(map(len, plain_loop(enc, dec, texts, tokenizer, spec, new_tokens)))


async def engine_run(engine, texts, options) -> int:
    from attnserve.server.service.limits import prepare

    results = await engine.translate(prepare(engine, texts, options))
    return sum(len(r.hypotheses[0].token_ids) for r in results)


def run_engine(engine, texts, options, loop) -> int:
    """One engine batch from a worker thread, through the event loop that runs the engine."""
    return asyncio.run_coroutine_threadsafe(engine_run(engine, texts, options), loop).result()


async def interleaved(runs: dict[str, object], repeats: int) -> dict[str, tuple[float, float, int]]:
    """(median, best) seconds and tokens per run of each named function, after one warm-up run each.

    The functions take turns, one run each per round, so a neighbour's load on this
    shared machine lands on all of them alike. A coroutine function is awaited on the
    event loop (as a gRPC handler would); a plain one is called.
    """

    async def once(fn) -> int:
        out = fn()
        return await out if asyncio.iscoroutine(out) else out

    tokens = {name: await once(fn) for name, fn in runs.items()}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            await once(fn)  # untimed, as in benchmarks.common.interleaved: no contender starts on another's caches
            t0 = time.perf_counter()
            await once(fn)
            times[name].append(time.perf_counter() - t0)
    return {name: (statistics.median(t), min(t), tokens[name]) for name, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from attnserve.contract.manifest import load_manifest
    from attnserve.server.translation import DecodeOptions, EngineSettings, TranslationEngine
    from attnserve.server.translation.sessions import load_translation_sessions, model_spec

    if not (args.model_dir / "model.json").is_file():
        export_model(args.model_dir, args.preset)
    manifest = load_manifest(args.model_dir)
    enc, dec = load_translation_sessions(
        args.model_dir, manifest, args.provider, intra_op_threads=args.threads, spin=not args.no_spin
    )
    settings = EngineSettings(max_active_sequences=max(64, max(args.batches)))
    engine = TranslationEngine(args.model_dir, manifest, enc, dec, settings)
    engine.warmup()
    spec, vocab = model_spec(manifest), int(manifest.config["vocab_size"])
    options = DecodeOptions(max_new_tokens=args.new_tokens, return_scores=args.scores)
    print(
        f"{args.preset}, {args.provider}, {args.threads} intra-op thread(s), N={args.new_tokens} new tokens, "
        f"{args.source_tokens} source tokens, scores {'on' if args.scores else 'off'}, median (best) of {args.repeats}"
    )

    async def session() -> None:
        await engine.start()
        loop = asyncio.get_running_loop()
        for batch in args.batches:
            texts = texts_for(batch, args.source_tokens, vocab)
            runs = {}
            if not args.no_baseline:
                runs["plain onnxruntime loop"] = functools.partial(
                    plain_count, enc, dec, texts, engine.tokenizer, spec, args.new_tokens
                )
            # the engine decodes on its own thread; this loop only awaits, as a gRPC handler would
            runs["attnserve engine"] = functools.partial(engine_run, engine, texts, options)
            for name, (med, best, n) in (await interleaved(runs, args.repeats)).items():
                print(
                    f"batch {batch:3d}  {name:24s} {n / med:8.0f} tok/s  (best {n / best:6.0f})  "
                    f"{1000 * med / args.new_tokens:6.2f} ms/step  tokens {n}"
                )
            if args.profile and batch == args.batches[-1]:
                run = functools.partial(run_engine, engine, texts, options, loop)
                await loop.run_in_executor(None, profile_engine, engine, run)
        await engine.stop(1.0)
        if args.mixed:
            await mixed_lengths(args, manifest, enc, dec, engine.tokenizer, spec, vocab)

    asyncio.run(session())
    return 0


async def mixed_lengths(args, manifest, enc, dec, tokenizer, spec, vocab) -> None:
    """Continuous batching vs static batches (each runs until its longest text) on mixed lengths."""
    from attnserve.server.service.limits import prepare
    from attnserve.server.translation import DecodeOptions, EngineSettings, TranslationEngine

    lengths = np.random.default_rng(1).integers(8, args.mixed_max + 1, args.mixed).tolist()
    texts = texts_for(len(lengths), args.source_tokens, vocab, seed=1)
    useful, size = sum(lengths), args.mixed_batch

    def static() -> int:
        for i in range(0, len(texts), size):
            plain_loop(enc, dec, texts[i : i + size], tokenizer, spec, max(lengths[i : i + size]))
        return useful

    settings = EngineSettings(max_active_sequences=size, max_queue_size=len(texts) + 1)
    engine = TranslationEngine(args.model_dir, manifest, enc, dec, settings)
    await engine.start()

    async def continuous() -> int:
        calls = [
            engine.translate(prepare(engine, [t], DecodeOptions(max_new_tokens=n, return_scores=False)))
            for t, n in zip(texts, lengths)
        ]
        return sum(len(r[0].hypotheses[0].token_ids) for r in await asyncio.gather(*calls))

    results = await interleaved({"static batches": static, "continuous batching": continuous}, args.repeats)
    await engine.stop(1.0)
    print(f"mixed lengths: {len(texts)} texts, 8..{args.mixed_max} new tokens, {size} rows at most")
    for name, (med, best, n) in results.items():
        print(f"  {name:24s} {n / med:8.0f} tok/s  (best {n / best:6.0f})  useful tokens {n}")
    ratio = results["static batches"][0] / results["continuous batching"][0]
    print(f"  continuous / static: {ratio:.2f}x (medians)")


def profile_engine(engine, run) -> None:
    """Profile the scheduler thread through ``run()`` (cProfile of that thread only)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    scheduler = engine._scheduler
    original = scheduler.run_once

    def profiled(*args):
        profiler.enable()
        try:
            original(*args)
        finally:
            profiler.disable()

    scheduler.run_once = profiled
    run()
    scheduler.run_once = original
    pstats.Stats(profiler).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    sys.exit(main())
