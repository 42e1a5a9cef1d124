"""Where a ViT model directory's time goes in onnxruntime: share of kernel time per op type.

python -m benchmarks.ort_profile /tmp/attnserve-bench/vit-s16-fp32-fused-k1.0 --batch 8
python -m benchmarks.ort_profile /tmp/attnserve-bench/server-repo/vit --batch 1 32   # ms per image, side by side

With several batch sizes it prints each op type's kernel time per image at every batch and
the ratio to the first: which ops do (or do not) get cheaper per image as batches grow.
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
    return parser


def main(argv: list[str] | None = None) -> int:
    import onnxruntime as ort

    from attnserve.server.manifest import load_manifest

    args = build_parser().parse_args(argv)
    manifest = load_manifest(args.model_dir)
    size = manifest.preprocessing.image_size
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.enable_profiling = True
    per_image: dict[int, collections.Counter[str]] = {}
    for batch in args.batch:
        options.profile_file_prefix = str(Path(tempfile.mkdtemp()) / f"ort-profile-b{batch}")
        session = ort.InferenceSession(str(args.model_dir / manifest.graphs["model"].file), options)
        pixels = np.random.default_rng(0).standard_normal((batch, 3, size, size), dtype=np.float32)
        session.run(None, {"pixels": pixels})  # warm-up, not counted
        session.end_profiling()
        options.profile_file_prefix = str(Path(tempfile.mkdtemp()) / f"ort-profile-b{batch}")
        session = ort.InferenceSession(str(args.model_dir / manifest.graphs["model"].file), options)
        for _ in range(args.runs):
            session.run(None, {"pixels": pixels})
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
