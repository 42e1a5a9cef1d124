"""The output projection alone, in the layouts onnxruntime offers, against one core's memory speed.

At opus-mt-en-de's shape a decoder step multiplies the last hidden state (B, d) by the tied
(V, d) table: at batch 1 that reads 119 MB for 58,101 x 512, and it is half of an fp32 step.
Each contender is a one-node graph (plus transposes) on a session with the engine's thread
count; they take turns (``common.interleaved``) and must give the same argmax per row:

- ``Gemm, transB=1``: what the export writes (the table as it is stored);
- ``MatMul, (d, V) weight``: the table transposed once at load;
- ``MatMul, weight first``: ``(V, d) @ x^T``, then a transpose of the (V, B) result.

"GB/s" is the table's bytes over the time. The reference is one core's copy speed (numpy
``copyto`` of a buffer the table's size: read + write over the time), the most a single-thread
kernel streaming the table can reach.

    python -m experiments.projection --vocab-size 58101 --d-model 512 --batches 1 32
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from attnserve.benchmarks.common import header, interleaved, machine, table, write_results

NAME = "projection"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.projection", description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=58101, help="V (default opus-mt-en-de's 58,101)")
    parser.add_argument("--d-model", type=int, default=512, help="d (default 512)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per contender (default 20)")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads (default 1)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    return parser


def _session(nodes: list, weight: np.ndarray, batch: int, d: int, vocab: int, threads: int):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        nodes,
        "projection",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, vocab])],
        [numpy_helper.from_array(weight, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def contenders(weights: np.ndarray, x: np.ndarray, threads: int) -> dict[str, Callable[[], np.ndarray]]:
    """Name -> a call returning the (B, V) logits."""
    from onnx import helper

    (vocab, d), batch = weights.shape, x.shape[0]
    layouts = {
        "Gemm, transB=1 (the export's)": ([helper.make_node("Gemm", ["x", "W"], ["y"], transB=1)], weights),
        "MatMul, (d, V) weight": ([helper.make_node("MatMul", ["x", "W"], ["y"])], np.ascontiguousarray(weights.T)),
        "MatMul, weight first": (
            [
                helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]),
                helper.make_node("MatMul", ["W", "xt"], ["yt"]),  # (V, B)
                helper.make_node("Transpose", ["yt"], ["y"], perm=[1, 0]),
            ],
            weights,
        ),
    }
    out = {}
    for name, (nodes, weight) in layouts.items():
        session = _session(nodes, weight, batch, d, vocab, threads)
        out[name] = lambda s=session: s.run(None, {"x": x})[0]
    return out


def copy_gbps(nbytes: int, repeats: int) -> float:
    """One core's copy speed over a buffer of ``nbytes``: bytes read + written per second, best of ``repeats``."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * nbytes / best / 1e9


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    info = machine()
    V, d = args.vocab_size, args.d_model
    header(f"output projection: ({V:,} x {d}) fp32", info, args.threads)
    rng = np.random.default_rng(0)
    weights = (rng.standard_normal((V, d)) * 0.02).astype(np.float32)  # (V, d), the tied table
    nbytes = weights.nbytes
    copy = copy_gbps(nbytes, max(3, args.repeats // 4))
    result = {"benchmark": NAME, "settings": {**vars(args), "out": str(args.out)}, "machine": info}
    result.update({"table_bytes": nbytes, "copy_gb_per_s": copy, "rows": []})
    rows = []
    for batch in args.batches:
        x = rng.standard_normal((batch, d)).astype(np.float32)  # (B, d)
        timings, values = interleaved(contenders(weights, x, args.threads), args.repeats)
        reference = x @ weights.T  # (B, V)
        first = next(iter(timings))
        for name, timing in timings.items():
            same = bool(np.array_equal(values[name].argmax(1), reference.argmax(1)))
            gbps = nbytes / timing.median / 1e9
            speed = timings[first].median / timing.median
            rows.append([batch, name, f"{1000 * timing.median:.2f}", f"{gbps:.1f}", f"{speed:.2f}x", same])
            result["rows"].append(
                {"batch": batch, "contender": name, **timing.to_json(), "gb_per_s": gbps, "same_argmax": same}
            )
    print(table(["batch", "layout", "ms", "GB/s of the table", "speed vs the export's", "same argmax"], rows))
    print(f"one core's copy speed (read + write): {copy:.1f} GB/s over {nbytes / 1e6:.0f} MB")
    write_results(args.out, NAME, result, quick=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
