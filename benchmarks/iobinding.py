"""Decoder steps with ``session.run`` against io binding with a preallocated logits buffer.

A lever on the decode step's cost: bind the decoder with ``io_binding()``, write ``logits`` into one
numpy array reused every step, leave ``present`` to onnxruntime and feed it back as
``OrtValue`` s; against plain ``session.run`` (the engine's CPU path). Both run the same
greedy steps on the same sessions, taking turns one repetition each; their tokens must be
identical. Graph names come from the model directory's ``model.json``.

With ``--provider cuda`` both run on CUDA sessions: ``session.run`` copies the whole cache
to the host and back every step, while the bound steps keep ``present``, the cross keys and
values and the first empty ``past`` on the GPU (as the engine's CUDA path does) and copy only
the logits and the step inputs.

    python -m benchmarks.iobinding /tmp/attnserve-bench/mt-base-v58101-int8 --batches 1 32
    python -m benchmarks.iobinding /tmp/attnserve-bench/mt-small --provider cuda --batches 1 32
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .common import header, interleaved, machine, table, write_results

NAME = "iobinding"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.iobinding", description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path, help="a translation model directory (attnserve-bench decode exports)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--steps", type=int, default=30, help="greedy steps per run (default 30)")
    parser.add_argument("--source-tokens", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--provider", choices=["cpu", "cuda"], default="cpu", help="onnxruntime provider (default cpu)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    return parser


def contenders(model_dir: Path, batch: int, args: argparse.Namespace) -> dict[str, Callable[[], np.ndarray]]:
    import onnxruntime as ort

    from attnserve.contract.manifest import load_manifest
    from attnserve.server.translation.sessions import load_translation_sessions, model_spec

    manifest = load_manifest(model_dir)
    spec = model_spec(manifest)
    if spec.decoder_io.in_place:  # the engine binds an in-place decoder itself (server/translation/runner.py)
        raise SystemExit(f"{model_dir}: this probe drives a left-padded decoder; export with --kv-cache left-padded")
    enc, dec = load_translation_sessions(model_dir, manifest, args.provider, intra_op_threads=args.threads)
    device = args.provider  # where the bound cache lives: "cpu" or "cuda"
    e, d = spec.encoder_io, spec.decoder_io
    H, D, B = spec.num_heads, spec.head_dim, batch
    rng = np.random.default_rng(0)
    src = rng.integers(4, 1000, (B, args.source_tokens)).astype(np.int64)  # (B, L)
    mask = np.ones_like(src, dtype=np.int32)  # (B, L)
    cross = enc.run(list(e.cross), {e.src_ids: src, e.src_mask: mask})  # 2n x (B, H, L, D)
    outputs = [d.logits, *d.present]
    never = list(spec.never_ids)
    vocab_size = int(manifest.config["vocab_size"])
    types = {v.name: v.type for v in (*dec.get_inputs(), *dec.get_outputs())}
    cache_dtype, logits_dtype = (
        np.float16 if types[n] == "tensor(float16)" else np.float32 for n in (d.past[0], d.logits)
    )

    def on_device(array: np.ndarray):
        return ort.OrtValue.ortvalue_from_numpy(array, device, 0)

    def plain() -> np.ndarray:
        feeds: dict[str, Any] = {d.src_mask: mask, **dict(zip(d.cross, cross))}
        past = [np.zeros((B, H, 0, D), cache_dtype)] * len(d.past)
        tokens = np.full((B, 1), spec.start_id, np.int64)
        for step in range(args.steps):
            feeds.update(zip(d.past, past))
            feeds[d.input_ids] = tokens
            feeds[d.positions] = np.full((B, 1), step, np.int64)
            feeds[d.self_mask] = np.ones((B, step + 1), np.int32)
            logits, *past = dec.run(outputs, feeds)
            logits[:, never] = -np.inf
            tokens = logits.argmax(axis=1)[:, None]
        return tokens

    def bound() -> np.ndarray:
        binding = dec.io_binding()
        binding.bind_cpu_input(d.src_mask, mask)
        for name, value in zip(d.cross, cross):
            binding.bind_ortvalue_input(name, on_device(value))
        past = [on_device(np.zeros((B, H, 0, D), cache_dtype))] * len(d.past)
        tokens = np.full((B, 1), spec.start_id, np.int64)
        logits = buffer = None
        for step in range(args.steps):
            binding.bind_cpu_input(d.input_ids, tokens)
            binding.bind_cpu_input(d.positions, np.full((B, 1), step, np.int64))
            binding.bind_cpu_input(d.self_mask, np.ones((B, step + 1), np.int32))
            for name, value in zip(d.past, past):
                binding.bind_ortvalue_input(name, value)
            if buffer is None:
                logits = np.empty((B, vocab_size), logits_dtype)  # (B, V), written by every step
                buffer = ort.OrtValue.ortvalue_from_numpy(logits)
            binding.bind_ortvalue_output(d.logits, buffer)
            for name in d.present:
                binding.bind_output(name, device)
            dec.run_with_iobinding(binding)
            past = list(binding.get_outputs()[1:])
            logits[:, never] = -np.inf
            tokens = logits.argmax(axis=1)[:, None]
        return tokens

    return {"session.run": plain, "io binding, preallocated logits": bound}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    info = machine()
    header(f"decoder steps: session.run vs io binding, {args.model_dir.name}, {args.provider}", info, args.threads)
    rows = []
    result = {"benchmark": NAME, "model_dir": str(args.model_dir), "provider": args.provider, "machine": info}
    result["rows"] = []
    for batch in args.batches:
        runs = contenders(args.model_dir, batch, args)
        timings, tokens = interleaved(runs, args.repeats)
        first = next(iter(tokens.values()))
        same = all(np.array_equal(first, t) for t in tokens.values())
        base = timings["session.run"].median
        for name, timing in timings.items():
            rows.append([batch, name, f"{1000 * timing.median:.1f}", f"{base / timing.median:.3f}x", same])
            result["rows"].append({"batch": batch, "contender": name, **timing.to_json(), "same_tokens": same})
    print(table(["batch", "contender", "ms per run", "speed vs session.run", "same tokens"], rows))
    write_results(args.out, NAME if args.provider == "cpu" else f"{NAME}-{args.provider}", result, quick=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
