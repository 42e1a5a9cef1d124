"""Greedy decoding with an output-vocabulary shortlist (CTranslate2's vmap) against the full vocabulary.

One of issue 18's levers, measured here and not in the engine yet. At opus-mt-en-de's shape
(``mt-base`` with 58,101 target words) a batch-1 decoder step mostly reads the 58,101 x 512
output projection. A shortlist computes only the logits of candidate words: those a
vocabulary map lists for the batch's source words, plus words that are always candidates
(CTranslate2's ``use_vmap``; Marian's lexical shortlists). This probe splits the exported
decoder at the projection's input (``onnx.utils.Extractor``: the same graph without the last
``Gemm``), and runs the projection for the candidates only, as a second small onnxruntime
graph fed the gathered rows. CTranslate2 gets the same map as ``vmap.txt`` and
``use_vmap=True``; both are also run on the full vocabulary.

The map is synthetic: the model is random, so there is no corpus to learn one from. Each
source word gets ``--per-word`` random candidate words, frequent ones more often (``--zipf``),
and ``--always`` words are always candidates (Marian's usual ``100 100``), so what is
measured is speed at a realistic candidate count; the tokens of a shortlisted run are
compared with CTranslate2's shortlisted run (same candidates), not with the full
vocabulary's. Quality with a real map needs a real model and its training data.

    python -m experiments.shortlist --batches 1 32
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from attnserve.benchmarks.common import DEFAULT_OUT, DEFAULT_WORK, header, interleaved, machine, table, write_results
from attnserve.benchmarks.translators import (
    bench_translator,
    ctranslate2_model,
    export_translator,
    model_label,
    source_ids,
)

NAME = "shortlist"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.shortlist", description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="mt-base")
    parser.add_argument("--vocab-size", type=int, default=58101, help="target vocabulary (default opus-mt-en-de's)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--new-tokens", type=int, default=30)
    parser.add_argument("--source-tokens", type=int, default=20, help="per text, end token included")
    parser.add_argument("--per-word", type=int, default=100, help="candidate words per source word")
    parser.add_argument("--always", type=int, default=100, help="words that are always candidates")
    parser.add_argument("--zipf", type=float, default=1.0, help="candidates drawn by 1/rank**S (0: uniform)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    return parser


class VocabMap:
    """The synthetic map: ``always`` words, and ``per_word`` random candidates per source word.

    Target ids stand for words by falling frequency (id 4 the most frequent); candidates are
    drawn with probability proportional to 1 / rank ** ``zipf`` (Zipf's law: real translation
    candidates are mostly frequent words, so the sets of different sources overlap), or
    uniformly with ``zipf`` 0.
    """

    def __init__(
        self, vocab_size: int, per_word: int, always: int, zipf: float = 1.0, special: int = 4, seed: int = 0
    ) -> None:
        rng = np.random.default_rng(seed)
        self.always = np.arange(special, special + always, dtype=np.int64)
        p = 1.0 / np.arange(1, vocab_size - special + 1) ** zipf  # (V - special,)
        draws = rng.choice(vocab_size - special, size=(vocab_size, per_word), p=p / p.sum())
        self.table = draws + special  # (V, per_word): row s holds the candidates of source word s

    def candidates(self, sources: list[list[int]], keep: tuple[int, ...]) -> np.ndarray:
        """Sorted candidate ids of a batch: every source word's, the always-words and ``keep``."""
        words = np.unique(np.concatenate([np.asarray(s[:-1]) for s in sources]))  # the end token maps to nothing
        return np.unique(np.concatenate([self.always, self.table[words].ravel(), np.asarray(keep)]))

    def write_ct2(self, path: Path, sources: list[list[int]]) -> None:
        """CTranslate2's vmap.txt (``source words<TAB>target words``; an empty source: always)."""
        lines = ["\t" + " ".join(f"t{i}" for i in self.always)]
        for word in sorted({w for s in sources for w in s[:-1]}):
            lines.append(f"t{word}\t" + " ".join(f"t{i}" for i in self.table[word]))
        path.write_text("\n".join(lines) + "\n")


@functools.lru_cache(maxsize=1)  # the decoder is read once per run, not once per batch size
def split_decoder(model_dir: Path, out: Path, logits: str) -> tuple[Path, np.ndarray, np.ndarray]:
    """The decoder without its output projection (written to ``out``), and that projection's
    weight (V, d) and bias (V,)."""
    import onnx
    from onnx import numpy_helper
    from onnx.utils import Extractor

    model = onnx.load(str(model_dir / "decoder.onnx"))
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    inits = {i.name: i for i in graph.initializer}
    add = producer[logits]
    gemm = producer[add.input[0]] if add.op_type == "Add" else add
    if gemm.op_type != "Gemm" or not any(a.name == "transB" and a.i == 1 for a in gemm.attribute):
        raise SystemExit(f"expected logits = Gemm(hidden, W, transB=1) [+ bias], found {gemm.op_type}")
    weight = numpy_helper.to_array(inits[gemm.input[1]])  # (V, d)
    bias = numpy_helper.to_array(inits[add.input[1]]) if add is not gemm else np.zeros(weight.shape[0], np.float32)
    outputs = [gemm.input[0]] + [o.name for o in graph.output if o.name != logits]
    if not out.exists():
        trunk = Extractor(model).extract_model([i.name for i in graph.input], outputs)
        onnx.save(trunk, str(out))
    return out, weight, bias


def head_graph(path: Path) -> Path:
    """logits (B, K) = hidden (B, d) x rows (K, d)^T + bias (K,): the projection of K candidates."""
    import onnx
    from onnx import TensorProto, helper

    if not path.exists():
        node = helper.make_node("Gemm", ["hidden", "rows", "bias"], ["logits"], transB=1)
        graph = helper.make_graph(
            [node],
            "shortlist_head",
            [
                helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["B", "d"]),
                helper.make_tensor_value_info("rows", TensorProto.FLOAT, ["K", "d"]),
                helper.make_tensor_value_info("bias", TensorProto.FLOAT, ["K"]),
            ],
            [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", "K"])],
        )
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def contenders(
    model_dir: Path, ct2_full: Path, ct2_vmap: Path, vmap: VocabMap, ids: list[list[int]], args: argparse.Namespace
) -> dict[str, Callable[[], list[list[int]]]]:
    import ctranslate2
    import onnxruntime as ort

    from attnserve.contract.manifest import load_manifest
    from attnserve.server.translation.sessions import load_translation_sessions, model_spec

    manifest = load_manifest(model_dir)
    spec = model_spec(manifest)
    enc, dec = load_translation_sessions(model_dir, manifest, intra_op_threads=args.threads)
    e, d = spec.encoder_io, spec.decoder_io
    trunk_path, weight, bias = split_decoder(model_dir, model_dir.parent / f"{model_dir.name}-trunk.onnx", d.logits)
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    trunk = ort.InferenceSession(str(trunk_path), options, providers=["CPUExecutionProvider"])
    head = ort.InferenceSession(str(head_graph(model_dir.parent / "shortlist-head.onnx")), options)
    trunk_outputs = [o.name for o in trunk.get_outputs()]
    never = list(spec.never_ids)
    unk_id = int(manifest.config["unk_id"])  # CTranslate2 always keeps unk, bos and eos
    B, L, N = len(ids), len(ids[0]), args.new_tokens
    H, D = spec.num_heads, spec.head_dim

    def run(step_fn: Callable[[dict[str, Any]], tuple[np.ndarray, list[np.ndarray]]]) -> list[list[int]]:
        src = np.asarray(ids, dtype=np.int64)  # (B, L): every text has L tokens
        mask = np.ones((B, L), np.int32)
        cross = enc.run(list(e.cross), {e.src_ids: src, e.src_mask: mask})
        feeds: dict[str, Any] = {d.src_mask: mask, **dict(zip(d.cross, cross))}
        past = [np.zeros((B, H, 0, D), np.float32)] * len(d.past)
        tokens = np.full((B, 1), spec.start_id, np.int64)
        out = []
        for step in range(N):
            feeds.update(zip(d.past, past))
            feeds[d.input_ids] = tokens
            feeds[d.positions] = np.full((B, 1), step, np.int64)
            feeds[d.self_mask] = np.ones((B, step + 1), np.int32)
            tokens, past = step_fn(feeds)
            out.append(tokens[:, 0])
        return np.stack(out, axis=1).tolist()

    def full_step(feeds):
        logits, *past = dec.run([d.logits, *d.present], feeds)
        logits[:, never] = -np.inf
        return logits.argmax(axis=1)[:, None], past

    def full() -> list[list[int]]:
        return run(full_step)

    def shortlisted() -> list[list[int]]:
        candidates = vmap.candidates(ids, (spec.eos_id, unk_id))  # (K,) sorted; once per batch
        rows, row_bias = weight[candidates], bias[candidates]  # (K, d), (K,): gathered once per batch

        def step(feeds):
            hidden, *past = trunk.run(trunk_outputs, feeds)
            (logits,) = head.run(None, {"hidden": hidden, "rows": rows, "bias": row_bias})
            return candidates[logits.argmax(axis=1)][:, None], past

        return run(step)

    kw = dict(device="cpu", intra_threads=args.threads, inter_threads=1)
    full_ct2 = ctranslate2.Translator(str(ct2_full), compute_type="float32", **kw)
    vmap_ct2 = ctranslate2.Translator(str(ct2_vmap), compute_type="float32", **kw)
    words = [[f"t{i}" for i in row[:-1]] + ["</s>"] for row in ids]

    def ct2(translator, use_vmap: bool) -> list[list[int]]:
        results = translator.translate_batch(
            words, beam_size=1, max_decoding_length=N, max_batch_size=0, use_vmap=use_vmap, return_scores=False
        )
        return [[int(w[1:]) if w.startswith("t") else -1 for w in r.hypotheses[0]] for r in results]

    return {
        "onnxruntime loop, full vocabulary": full,
        "onnxruntime loop, shortlist": shortlisted,
        "ctranslate2, full vocabulary": lambda: ct2(full_ct2, False),
        "ctranslate2, use_vmap": lambda: ct2(vmap_ct2, True),
    }


def main(argv: list[str] | None = None) -> int:
    import torch

    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    label = model_label(args.preset, args.vocab_size)
    model = bench_translator(args.preset, vocab_size=args.vocab_size)
    # the split decoder below feeds the left-padded graph (self_mask) and reads its full fp32 Gemm
    fp32 = export_translator(
        model, args.work_dir / f"{label}-fp32-left-padded", label, kv_cache="left-padded", screen=False
    )
    ct2_full = ctranslate2_model(model, args.work_dir / f"{label}-ct2", label)
    vmap = VocabMap(model.cfg.vocab_size, args.per_word, args.always, args.zipf)
    info = machine()
    header(
        f"greedy decoding with a shortlist ({args.per_word} candidates per source word, Zipf {args.zipf:g}, "
        f"{args.always} always), "
        f"{label}, fp32, N={args.new_tokens} new tokens",
        info,
        args.threads,
    )
    rows, result = [], {"benchmark": NAME, "settings": {k: str(v) for k, v in vars(args).items()}, "machine": info}
    result["rows"] = []
    for batch in args.batches:
        ids = source_ids(batch, args.source_tokens, model.cfg.vocab_size, model.cfg.eos_id)
        ct2_vmap = args.work_dir / f"{label}-ct2-vmap-b{batch}"  # the converted model plus this batch's map
        shutil.copytree(ct2_full, ct2_vmap, dirs_exist_ok=True)
        vmap.write_ct2(ct2_vmap / "vmap.txt", ids)
        chosen = set(vmap.candidates(ids, (model.cfg.eos_id, model.cfg.unk_id)).tolist())
        candidates = len(chosen)
        runs = contenders(fp32, ct2_full, ct2_vmap, vmap, ids, args)
        timings, tokens = interleaved(runs, args.repeats)
        base = timings["ctranslate2, full vocabulary"].median
        result["shortlist_tokens_are_candidates"] = all(
            t in chosen for seq in tokens["onnxruntime loop, shortlist"] for t in seq
        )
        peer = {"full vocabulary": "ctranslate2, full vocabulary", "shortlist": "ctranslate2, use_vmap"}
        for name, timing in timings.items():
            same_as = peer["shortlist" if ("shortlist" in name or "vmap" in name) else "full vocabulary"]
            equal = np.mean([a == b for a, b in zip(tokens[name], tokens[same_as])])
            tok_s = batch * args.new_tokens / timing.median
            peer_name = peer["shortlist"] if "shortlist" in name else peer["full vocabulary"]
            ratio = timings[peer_name].median / timing.median if name.startswith("onnx") else None
            same_vocab = f"{ratio:.2f}x" if ratio else "-"
            rows.append([batch, candidates, name, round(tok_s, 1), f"{base / timing.median:.2f}x", same_vocab])
            rows[-1].append(f"{100 * equal:.0f}%")
            result["rows"].append(
                {
                    "batch": batch,
                    "candidates": candidates,
                    "contender": name,
                    "tokens_per_s": tok_s,
                    "sequences_equal_to_ctranslate2_same_vocabulary": equal,
                    **timing.to_json(),
                }
            )
    headers = ["batch", "candidates", "contender", "tok/s", "vs CT2 full", "vs CT2 same vocab", "= CT2 same vocab"]
    print(table(headers, rows))
    write_results(args.out, NAME, result, quick=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
