"""Where a model directory's time goes in onnxruntime: share of kernel time per op type.

python -m experiments.ort_profile /tmp/attnserve-bench/vit-s16-fp32-fused-k1.0 --batch 8
python -m experiments.ort_profile /tmp/attnserve-bench/server-repo/vit --batch 1 32   # ms per image, side by side
python -m experiments.ort_profile /tmp/attnserve-bench/mt-small-int8 --batch 32       # translation: the decoder

With several batch sizes it prints each op type's kernel time per image at every batch and
the ratio to the first: which ops do (or do not) get cheaper per image as batches grow.
A translation model directory profiles its decoder over ``--steps`` greedy steps with the
KV cache (random ``--source-tokens`` sources, encoded once), per decoded row instead of per
image, with the session options the server uses on CPU (``--disable`` overrides the
optimizers they leave out; ``none`` keeps every one).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
from pathlib import Path

import numpy as np


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--batch", type=int, nargs="+", default=[8], help="one or more batch sizes")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30, help="translation: decoder steps per run")
    parser.add_argument("--source-tokens", type=int, default=20, help="translation: source length")
    parser.add_argument("--disable", default=None, help="translation: optimizers to leave out (default: the server's)")
    return parser


def decoder_runner(model_dir: Path, manifest, batch: int, args: argparse.Namespace) -> tuple[Path, object]:
    """(decoder graph, run(session)): ``args.steps`` greedy steps of a batch, cross K/V from one encoder run."""
    import onnxruntime as ort

    from attnserve.server.shared.onnx_sessions import session_options
    from attnserve.server.translation.sessions import model_spec

    spec = model_spec(manifest)
    n, H, D = spec.num_layers, spec.num_heads, spec.head_dim
    e, d = spec.encoder_io, spec.decoder_io
    encoder = ort.InferenceSession(str(model_dir / manifest.graphs["encoder"].file), session_options(args.threads))
    rng = np.random.default_rng(0)
    vocab = int(manifest.config["vocab_size"])
    src = rng.integers(4, vocab, (batch, args.source_tokens)).astype(np.int64)  # (B, L)
    src_mask = np.ones((batch, args.source_tokens), np.int32)  # (B, L)
    cross = encoder.run(list(e.cross), {e.src_ids: src, e.src_mask: src_mask})  # 2n x (B, H, L, D)

    def run(session) -> None:
        past = [np.zeros((batch, H, 0, D), np.float32)] * (2 * n)  # (B, H, P, D)
        tokens = np.full((batch, 1), spec.bos_id, np.int64)  # (B, 1)
        for step in range(args.steps):
            feeds = {d.input_ids: tokens, d.src_mask: src_mask, **dict(zip(d.cross, cross)), **dict(zip(d.past, past))}
            feeds[d.positions] = np.full((batch, 1), step, np.int64)
            feeds[d.self_mask] = np.ones((batch, step + 1), np.int32)
            logits, *past = session.run(d.outputs, feeds)
            tokens = logits.argmax(axis=1)[:, None]

    return model_dir / manifest.graphs["decoder"].file, run


def main(argv: list[str] | None = None) -> int:
    import onnxruntime as ort

    from attnserve.contract.manifest import load_manifest

    args = build_parser().parse_args(argv)
    manifest = load_manifest(args.model_dir)
    translation = manifest.kind == "translation"
    if translation and manifest.decoder_io().in_place:
        raise SystemExit(
            f"{args.model_dir}: this profile feeds a left-padded decoder; export with --kv-cache left-padded"
        )
    if translation:
        from attnserve.server.shared.onnx_sessions import session_options

        disabled = None if args.disable is None else tuple(n for n in args.disable.split(",") if n not in ("", "none"))
        options = session_options(args.threads, disabled_optimizers=disabled)
    else:
        size = manifest.preprocessing.image_size
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
    options.enable_profiling = True
    per_image: dict[int, collections.Counter[str]] = {}
    for batch in args.batch:
        if translation:
            graph, run = decoder_runner(args.model_dir, manifest, batch, args)
        else:
            graph = args.model_dir / manifest.graphs["model"].file
            pixels = np.random.default_rng(0).standard_normal((batch, 3, size, size), dtype=np.float32)

            def run(session, pixels=pixels) -> None:
                session.run(None, {"pixels": pixels})

        options.profile_file_prefix = str(Path(tempfile.mkdtemp()) / f"ort-profile-b{batch}")
        session = ort.InferenceSession(str(graph), options)
        run(session)  # warm-up, not counted
        session.end_profiling()
        options.profile_file_prefix = str(Path(tempfile.mkdtemp()) / f"ort-profile-b{batch}")
        session = ort.InferenceSession(str(graph), options)
        for _ in range(args.runs):
            run(session)
        events = json.loads(Path(session.end_profiling()).read_text())
        per_op: collections.Counter[str] = collections.Counter()
        for event in events:
            if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
                per_op[event["args"]["op_name"]] += event["dur"]
        per_image[batch] = collections.Counter({op: us / args.runs / batch / 1000 for op, us in per_op.items()})
    if len(args.batch) == 1:
        ms = per_image[args.batch[0]]
        total = sum(ms.values())
        for op, value in ms.most_common(15):
            print(f"{op:28s} {100 * value / total:5.1f}%  {value * args.batch[0]:8.1f} ms/run")
        return 0
    first = args.batch[0]
    print(f"{'op (ms per image)':28s} " + " ".join(f"{'batch ' + str(b):>10s}" for b in args.batch) + "   last/first")
    for op, value in per_image[first].most_common(12):
        row = " ".join(f"{per_image[b][op]:10.2f}" for b in args.batch)
        print(f"{op:28s} {row}   {per_image[args.batch[-1]][op] / value:9.2f}x")
    totals = [sum(per_image[b].values()) for b in args.batch]
    print(f"{'all kernels':28s} " + " ".join(f"{t:10.2f}" for t in totals) + f"   {totals[-1] / totals[0]:9.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
