"""One decoder self-attention call with a KV cache: the export's op against a cache written in place.

The export's ``com.microsoft::MultiHeadAttention`` takes ``past`` (B, H, P, D) and returns
``present`` = past + the new key/value as a new tensor, so every step copies the whole cache,
and in the engine's left-padded layout every row pays for the longest row's P columns.
onnxruntime's ``GroupQueryAttention`` (CPU kernel, with as many key/value heads as query heads)
takes a preallocated (B, H, capacity, D) buffer and per-row lengths (``seqlens_k``); when
``past`` and ``present`` are bound to the same ``OrtValue`` (io binding) it writes only the new
position of each row and attends over that row's own length.

Contenders, one node each, taking turns (``common.interleaved``), per batch and cache length P:

- ``MultiHeadAttention (the export's)``: every row P long (left-padded layout, key padding mask);
- ``GroupQueryAttention in place, rows P long``: the same work, without the copy;
- ``GroupQueryAttention in place, rows 1..P long``: rows of different ages, as in a continuous
  batch, each attending over its own length (the MultiHeadAttention row above is what the
  left-padded layout pays for such a batch).

Each contender's output must equal MultiHeadAttention's for the same keys and values (the
varying-length case against MultiHeadAttention given the same rows left-padded and masked),
and the bound buffer must be the next step's cache: the new key at each row's position, the
past untouched.

With ``--decoder DIR`` (a translation model directory with the left-padded layout, e.g. exported
with ``--kv-cache left-padded``) it also times whole decoder
steps: the export's graph, rows left-padded to the oldest one as the engine feeds them, against
the same graph with every self-attention node replaced by ``GroupQueryAttention`` (its folded
q/k/v bias as an ``Add`` in front: ``attnserve.export.inplace.in_place_decoder``, what
``attnserve-export --kv-cache in-place`` writes), the cache bound in place and each row at its own length.
Rows get ages drawn from 1..P; the logits must agree.

    python -m benchmarks.kv_inplace --batches 1 32 --past 16 96 192
    python -m benchmarks.kv_inplace --decoder /tmp/attnserve-bench/mt-small-fp32 --batches 32 --past 96 192
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .common import header, interleaved, machine, table, write_results

NAME = "kv-inplace"
MHA = "MultiHeadAttention (the export's)"
GQA_FULL = "GroupQueryAttention in place, rows P long"
GQA_AGES = "GroupQueryAttention in place, rows 1..P long"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kv_inplace", description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--past", type=int, nargs="+", default=[16, 96, 192], help="cached tokens P")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (default mt-small's 4)")
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=50, help="timed calls per contender (default 50)")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads (default 1)")
    parser.add_argument("--decoder", type=Path, help="also time whole decoder steps of this translation model dir")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    return parser


def _session(node, inputs: list, outputs: list, threads: int):
    import onnxruntime as ort
    from onnx import helper

    graph = helper.make_graph([node], node.op_type, inputs, outputs)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    model = helper.make_model(graph, opset_imports=opsets).SerializeToString()
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def mha_session(batch: int, heads: int, head_dim: int, threads: int):
    from onnx import TensorProto, helper

    f, d = TensorProto.FLOAT, heads * head_dim
    inputs = [helper.make_tensor_value_info(n, f, [batch, 1, d]) for n in ("q", "k", "v")]
    inputs.append(helper.make_tensor_value_info("mask", TensorProto.INT32, [batch, "T"]))
    inputs += [helper.make_tensor_value_info(n, f, [batch, heads, "P", head_dim]) for n in ("past_key", "past_value")]
    outputs = [helper.make_tensor_value_info(n, f, None) for n in ("out", "present_key", "present_value")]
    node = helper.make_node(
        "MultiHeadAttention",
        ["q", "k", "v", "", "mask", "", "past_key", "past_value"],
        ["out", "present_key", "present_value"],
        domain="com.microsoft",
        num_heads=heads,
    )
    return _session(node, inputs, outputs, threads)


def gqa_session(batch: int, heads: int, head_dim: int, capacity: int, threads: int):
    from onnx import TensorProto, helper

    f, d = TensorProto.FLOAT, heads * head_dim
    buffer = [batch, heads, capacity, head_dim]
    inputs = [helper.make_tensor_value_info(n, f, [batch, 1, d]) for n in ("q", "k", "v")]
    inputs += [helper.make_tensor_value_info(n, f, buffer) for n in ("past_key", "past_value")]
    inputs.append(helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [batch]))
    inputs.append(helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, []))
    outputs = [helper.make_tensor_value_info("out", f, [batch, 1, d])]
    outputs += [helper.make_tensor_value_info(n, f, buffer) for n in ("present_key", "present_value")]
    node = helper.make_node(
        "GroupQueryAttention",
        ["q", "k", "v", "past_key", "past_value", "seqlens_k", "total_sequence_length"],
        ["out", "present_key", "present_value"],
        domain="com.microsoft",
        num_heads=heads,
        kv_num_heads=heads,
    )
    return _session(node, inputs, outputs, threads)


def bind_in_place(binding, past: str, present: str, buffer: np.ndarray):
    """Bind ``buffer`` as both the ``past`` input and the ``present`` output (one ``OrtValue`` over
    its memory), so the kernel writes the new position into it; returns the ``OrtValue``."""
    import onnxruntime as ort

    value = ort.OrtValue.ortvalue_from_numpy(buffer)
    binding.bind_ortvalue_input(past, value)
    binding.bind_ortvalue_output(present, value)
    return value


class InPlace:
    """A GroupQueryAttention call whose past and present are one bound buffer per kind."""

    def __init__(self, session, q, k, v, keys: list[np.ndarray], values: list[np.ndarray], capacity: int) -> None:
        batch, (heads, _, head_dim) = q.shape[0], keys[0].shape  # keys: per row (H, n, D)
        self.lengths = [rk.shape[1] for rk in keys]  # cached tokens per row
        self.key = np.zeros((batch, heads, capacity, head_dim), np.float32)
        self.value = np.zeros_like(self.key)
        for row, (rk, rv) in enumerate(zip(keys, values)):  # row r's tokens at 0..len-1
            self.key[row, :, : rk.shape[1]], self.value[row, :, : rv.shape[1]] = rk, rv
        self.keys_before = self.key.copy()
        self.binding = binding = session.io_binding()
        seqlens = np.array(self.lengths, np.int32)  # total length - 1: the new token's position
        total = np.array(max(self.lengths) + 1, np.int32)
        for name, array in (("q", q), ("k", k), ("v", v), ("seqlens_k", seqlens), ("total_sequence_length", total)):
            binding.bind_cpu_input(name, array)
        binding.bind_output("out", "cpu")  # first: get_outputs() follows the binding order
        self.key_value = bind_in_place(binding, "past_key", "present_key", self.key)
        self.value_value = bind_in_place(binding, "past_value", "present_value", self.value)
        self.session = session

    def __call__(self) -> np.ndarray:
        self.session.run_with_iobinding(self.binding)
        return self.binding.get_outputs()[0].numpy()

    def cache_updated(self, k: np.ndarray) -> bool:
        """The bound buffer is the next step's cache: each row's new key at its position, its past
        unchanged, nothing else written. (A kernel that copied past into present would leave the
        same content; that it skips the copy shows in the time.)"""
        buffer = self.key_value.numpy()
        heads, head_dim = buffer.shape[1], buffer.shape[3]
        new = k.reshape(k.shape[0], heads, head_dim)  # (B, H, D)
        expected = self.keys_before.copy()
        for row, length in enumerate(self.lengths):
            expected[row, :, length] = new[row]
        return bool(np.array_equal(buffer, expected))


def left_padded(keys: list[np.ndarray], P: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of different lengths as the engine's cache holds them: right-aligned in (B, H, P, D),
    with the (B, P + 1) key padding mask (1 = may attend) that the new token extends."""
    batch, heads, head_dim = len(keys), keys[0].shape[0], keys[0].shape[-1]
    cache = np.zeros((batch, heads, P, head_dim), np.float32)
    mask = np.zeros((batch, P + 1), np.int32)
    for row, rk in enumerate(keys):
        n = rk.shape[1]
        cache[row, :, P - n :] = rk
        mask[row, P - n :] = 1
    return cache, mask


def contenders(
    batch: int, P: int, heads: int, head_dim: int, threads: int, rng: np.random.Generator
) -> tuple[dict[str, Callable[[], np.ndarray]], dict[str, Callable[[], np.ndarray]], dict[str, InPlace], np.ndarray]:
    """(contenders, the MultiHeadAttention call each must equal, the in-place ones, the new keys)."""
    d, capacity = heads * head_dim, P + 1
    q, k, v = (rng.standard_normal((batch, 1, d)).astype(np.float32) for _ in range(3))
    full = [rng.standard_normal((2, heads, P, head_dim)).astype(np.float32) for _ in range(batch)]
    ages = rng.integers(1, P + 1, batch)  # each row's cached tokens
    aged = [f[:, :, :n] for f, n in zip(full, ages.tolist())]
    mha = mha_session(batch, heads, head_dim, threads)
    gqa = gqa_session(batch, heads, head_dim, capacity, threads)

    def mha_call(rows: list[np.ndarray]) -> Callable[[], np.ndarray]:
        keys, mask = left_padded([r[0] for r in rows], P)
        values, _ = left_padded([r[1] for r in rows], P)
        feeds = {"q": q, "k": k, "v": v, "mask": mask, "past_key": keys, "past_value": values}
        return lambda: mha.run(["out"], feeds)[0]

    in_place = {
        GQA_FULL: InPlace(gqa, q, k, v, [r[0] for r in full], [r[1] for r in full], capacity),
        GQA_AGES: InPlace(gqa, q, k, v, [r[0] for r in aged], [r[1] for r in aged], capacity),
    }
    runs: dict[str, Callable[[], np.ndarray]] = {MHA: mha_call(full), **in_place}
    references = {MHA: runs[MHA], GQA_FULL: runs[MHA], GQA_AGES: mha_call(aged)}
    return runs, references, in_place, k


def decoder_steps(model_dir: Path, batch: int, P: int, threads: int, repeats: int, rng: np.random.Generator) -> list:
    """Whole decoder steps over rows aged 1..P: the export's graph (left-padded, masked) against
    :func:`in_place_decoder` (per-row lengths, cache bound in place). Rows of the result table."""
    import onnx
    import onnxruntime as ort

    from attnserve.contract.manifest import load_manifest
    from attnserve.export.inplace import in_place_decoder
    from attnserve.server.shared.onnx_sessions import session_options
    from attnserve.server.translation.sessions import model_spec

    spec = model_spec(load_manifest(model_dir))
    if spec.decoder_io.in_place:
        raise SystemExit(f"--decoder {model_dir}: already in place; export it with --kv-cache left-padded")
    io, H, D, n = spec.decoder_io, spec.num_heads, spec.head_dim, spec.num_layers
    options = session_options(threads)  # the engine's own session settings, for both graphs
    path = Path(model_dir) / "decoder.onnx"
    export = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    surgery = in_place_decoder(onnx.load(str(path)))  # what attnserve-export --kv-cache in-place writes
    gqa = ort.InferenceSession(surgery.SerializeToString(), options, providers=["CPUExecutionProvider"])

    ages = rng.integers(1, P + 1, batch)  # cached tokens per row
    L = 24  # source tokens of the cross K/V
    cross = [rng.standard_normal((batch, H, L, D)).astype(np.float32) for _ in io.cross]
    history = [rng.standard_normal((batch, H, P, D)).astype(np.float32) for _ in io.past]  # row r: its first ages[r]
    common = {
        io.input_ids: rng.integers(4, 100, (batch, 1)).astype(np.int64),
        io.positions: ages[:, None].astype(np.int64),  # the next position of each row
        io.src_mask: np.ones((batch, L), np.int32),
        **dict(zip(io.cross, cross)),
    }
    # the export's feeds: each row's history right-aligned in P columns and masked, as the engine holds it
    padded = [left_padded([t[r, :, :a] for r, a in enumerate(ages.tolist())], P) for t in history]
    feeds = {**common, io.self_mask: padded[0][1], **{name: cache for name, (cache, _) in zip(io.past, padded)}}

    binding = gqa.io_binding()
    for name, array in common.items():
        binding.bind_cpu_input(name, array)
    binding.bind_cpu_input("seqlens_k", ages.astype(np.int32))
    binding.bind_cpu_input("total_sequence_length", np.array(int(ages.max()) + 1, np.int32))
    binding.bind_output(io.logits, "cpu")
    buffers = []
    for name, present, t in zip(io.past, io.outputs[1:], history):
        buffer = np.zeros((batch, H, P + 1, D), np.float32)
        buffer[:, :, :P] = t  # row r's first ages[r] columns are its history; the rest is never read
        buffers.append(bind_in_place(binding, name, present, buffer))

    def in_place() -> np.ndarray:
        gqa.run_with_iobinding(binding)
        return binding.get_outputs()[0].numpy()

    runs = {
        "export (MultiHeadAttention, left-padded)": lambda: export.run([io.logits], feeds)[0],
        "GroupQueryAttention in place": in_place,
    }
    timings, values = interleaved(runs, repeats)
    base = timings[next(iter(runs))].median
    diff = float(np.abs(values["GroupQueryAttention in place"] - values[next(iter(runs))]).max())
    return [
        {
            "batch": batch,
            "past": P,
            "layers": n,
            "contender": name,
            **t.to_json(),
            "speed": base / t.median,
            "max_abs_diff_logits": diff,
        }
        for name, t in timings.items()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if min(args.past) < 1 or min(args.batches) < 1:
        parser.error("--past and --batches take counts >= 1")
    info = machine()
    header(f"decoder self-attention, {args.heads} heads x {args.head_dim}, one new token per row", info, args.threads)
    rng = np.random.default_rng(0)
    result = {"benchmark": NAME, "settings": {**vars(args), "out": str(args.out)}, "machine": info, "rows": []}
    rows = []
    for batch in args.batches:
        for P in args.past:
            runs, references, in_place, k = contenders(batch, P, args.heads, args.head_dim, args.threads, rng)
            timings, values = interleaved(runs, args.repeats)
            base = timings[MHA].median
            for name, timing in timings.items():
                diff = float(np.abs(values[name] - references[name]()).max())
                written = in_place[name].cache_updated(k) if name in in_place else None
                speed = base / timing.median
                shown = "-" if written is None else written
                rows.append([batch, P, name, f"{1e6 * timing.median:.0f}", f"{speed:.2f}x", f"{diff:.1e}", shown])
                result["rows"].append(
                    {
                        "batch": batch,
                        "past": P,
                        "contender": name,
                        **timing.to_json(),
                        "speed_vs_multiheadattention": speed,
                        "max_abs_diff": diff,
                        "cache_updated": written,
                    }
                )
    print(table(["batch", "P", "attention", "us per call", "speed", "max |diff|", "buffer updated"], rows))
    if args.decoder is not None:
        steps = []
        for batch in args.batches:
            for P in args.past:
                steps += decoder_steps(args.decoder, batch, P, args.threads, args.repeats, rng)
        result["decoder_steps"] = {"model_dir": str(args.decoder), "rows": steps}
        shown = [
            [
                r["batch"],
                r["past"],
                r["contender"],
                f"{1e3 * r['median_s']:.2f}",
                f"{r['speed']:.2f}x",
                f"{r['max_abs_diff_logits']:.1e}",
            ]
            for r in steps
        ]
        print(f"whole decoder steps of {args.decoder.name}, rows aged 1..P:")
        print(table(["batch", "P", "decoder", "ms per step", "speed", "max |diff| of logits"], shown))
    write_results(args.out, NAME, result, quick=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
