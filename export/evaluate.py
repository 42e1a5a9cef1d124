"""Held-out metrics of the bundled models measured through their exported ONNX graphs.

- ``translator-en-de``: a batched onnxruntime greedy decode over ``encoder.onnx`` /
  ``decoder.onnx`` (the contract of :mod:`attnserve.contract.graph_io`: present K/V fed back as past,
  per-row positions, int32 masks, pad and bos never generated, argmax, stop at eos),
  then exact match, chrF and BLEU (sacrebleu) on the held-out pairs.
- ``digits-vit``: the held-out digits encoded as PNG files, preprocessed as the server does
  (:func:`attnserve.contract.images.preprocess_image`), classified by ``model.onnx``;
  accuracy and images/s, for keep-rate 1 and for a pruned export (keep-rate < 1).

``python -m attnserve.export.evaluate [translator-en-de|digits-vit ...] [--repo model-repo]``
builds the default repository first when it is missing (``attnserve.export.zoo``).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from attnserve.contract.images import preprocess_image
from attnserve.contract.manifest import Manifest, load_manifest
from attnserve.export.ort_decode import OrtGreedy


def session(path: Path, threads: int = 1) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


class OnnxTranslator:
    """Greedy decoding with onnxruntime over a translation model directory."""

    def __init__(self, model_dir: Path, threads: int = 1) -> None:
        self.manifest: Manifest = load_manifest(model_dir)
        tok_spec = self.manifest.tokenizer
        self.tokenizer = Tokenizer.from_file(str(Path(model_dir) / tok_spec.file))
        self.pad_id, self.bos_id, self.eos_id = tok_spec.pad_id, tok_spec.bos_id, tok_spec.eos_id
        self.encoder = session(Path(model_dir) / self.manifest.graphs["encoder"].file, threads)
        self.decoder = session(Path(model_dir) / self.manifest.graphs["decoder"].file, threads)
        self.greedy = OrtGreedy(self.encoder, self.decoder, self.manifest)
        self.max_source_len = self.manifest.limits["max_source_len"]
        self.max_target_len = self.manifest.limits["max_target_len"]

    def generate(self, src_ids: np.ndarray, max_new_tokens: int) -> list[list[int]]:
        """src_ids (B, L) int64 right-padded -> generated ids per row (eos excluded)."""
        rows = self.greedy.decode(src_ids, max_new_tokens)
        return [row[:-1] if row and row[-1] == self.eos_id else row for row in rows]

    def translate(self, sources: Sequence[str], batch_size: int = 64) -> list[str]:
        results: list[str] = []
        for i in range(0, len(sources), batch_size):
            enc = self.tokenizer.encode_batch(list(sources[i : i + batch_size]))
            ids = [e.ids[: self.max_source_len] for e in enc]
            L = max(len(x) for x in ids)
            src = np.full((len(ids), L), self.pad_id, np.int64)  # (B, L)
            for row, x in enumerate(ids):
                src[row, : len(x)] = x
            for gen in self.generate(src, self.max_target_len):
                results.append(self.tokenizer.decode(gen, skip_special_tokens=True))
        return results


def evaluate_translation(
    model_dir: Path, limit: int | None = None, threads: int = 1, variants: bool | str = False
) -> dict:
    """Metrics on the held-out pairs, or on a held-out variant set, the same pairs re-spelt as
    people type them (``attnserve.models.training.data_variants``): ``variants`` True (or
    "spelling": case, spacing, am/pm, trailing punctuation) or "hyphen" (ASCII hyphens for en
    dashes, number words without their hyphen)."""
    from attnserve.models.training.metrics import exact_match, sacrebleu_scores

    train_cfg = load_manifest(model_dir, verify_files=False).extra.get("train_config", {})
    test = held_out_translation_pairs(train_cfg)
    if variants:
        from attnserve.models.training.data_variants import held_out_hyphen_variants, held_out_variants

        make = held_out_hyphen_variants if variants == "hyphen" else held_out_variants
        test = make(test, train_cfg.get("data_seed", 0))
    test = test[:limit] if limit else test
    translator = OnnxTranslator(model_dir, threads)
    start = time.perf_counter()
    hyps = translator.translate([p.source for p in test])
    seconds = time.perf_counter() - start
    refs = [p.target for p in test]
    return {
        "exact_match": round(exact_match(hyps, refs), 4),
        **sacrebleu_scores(hyps, refs),
        "n": len(test),
        "sentences_per_s": round(len(test) / seconds, 1),
        "errors": [
            {"source": p.source, "reference": p.target, "output": h} for p, h in zip(test, hyps) if h != p.target
        ][:20],
    }


def held_out_translation_pairs(train_cfg: dict):
    """The held-out pairs of the recipe recorded in the checkpoint (the test split is drawn
    first from its own seed, so it does not need the training pairs)."""
    from attnserve.models.training.data_translation import generate_pairs

    return generate_pairs(train_cfg.get("test_size", 2000), seed=train_cfg.get("data_seed", 0) * 2 + 1)


def png_bytes(img) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def evaluate_digits(model_dir: Path, limit: int | None = None, threads: int = 1, repeats: int = 3) -> dict:
    from attnserve.models.training.train_digits import load_split, to_paper

    manifest = load_manifest(model_dir)
    cfg = manifest.extra.get("train_config", {})
    _, _, x_te, y_te = load_split(cfg.get("split_seed", 0), cfg.get("test_fraction", 0.2))
    if limit:
        x_te, y_te = x_te[:limit], y_te[:limit]
    pixels = np.stack(
        [preprocess_image(png_bytes(to_paper(im)), manifest.preprocessing) for im in x_te]
    )  # (N, 1, S, S)
    sess = session(Path(model_dir) / manifest.graphs["model"].file, threads)
    name = manifest.classifier_io().pixels
    logits = np.concatenate([sess.run(None, {name: pixels[i : i + 64]})[0] for i in range(0, len(pixels), 64)])
    best = float("inf")
    for _ in range(repeats):  # images/s of the graph alone, batches of 64, best of `repeats`
        start = time.perf_counter()
        for i in range(0, len(pixels), 64):
            sess.run(None, {name: pixels[i : i + 64]})
        best = min(best, time.perf_counter() - start)
    labels = [manifest.labels[i] for i in logits.argmax(-1)]
    accuracy = float(np.mean([lab == str(y) for lab, y in zip(labels, y_te)]))
    return {"accuracy": round(accuracy, 4), "n": len(y_te), "images_per_s": round(len(y_te) / best, 1)}


def evaluate_digits_robustness(model_dir: Path, threads: int = 1) -> dict:
    """Accuracy on the held-out robustness set (``digit_images.robustness_set``: pen-drawn digits
    and digits in untrained fonts, both ink polarities), each image sent as a PNG through the
    server's preprocessing; overall and per kind."""
    from attnserve.models.training.digit_images import robustness_set

    manifest = load_manifest(model_dir)
    items = robustness_set()
    pixels = np.stack([preprocess_image(png_bytes(img), manifest.preprocessing) for img, _, _ in items])
    sess = session(Path(model_dir) / manifest.graphs["model"].file, threads)
    name = manifest.classifier_io().pixels
    logits = np.concatenate([sess.run(None, {name: pixels[i : i + 64]})[0] for i in range(0, len(pixels), 64)])
    right = np.array([manifest.labels[i] == str(d) for i, (_, d, _) in zip(logits.argmax(-1), items)])
    out = {"accuracy": round(float(right.mean()), 4), "n": len(items)}
    for kind in sorted({k for _, _, k in items}):
        mask = np.array([k == kind for _, _, k in items])
        out[kind] = round(float(right[mask].mean()), 4)
    return out


def evaluate_digits_keep_rates(
    checkpoint: Path, keep_rates: Sequence[float] = (1.0, 0.5), limit: int | None = None, threads: int = 1
) -> dict[str, dict]:
    """Export the digits checkpoint at each keep-rate into a temporary directory and evaluate it."""
    from .zoo import export_digits

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rate in keep_rates:
            out = Path(tmp) / f"keep-{rate}"
            export_digits(checkpoint, out, keep_rate=rate)
            results[str(rate)] = evaluate_digits(out, limit, threads)
    return results


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m attnserve.export.evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["translator-en-de", "digits-vit"], help="zoo model names")
    parser.add_argument("--repo", type=Path, default=Path("model-repo"), help="model repository (default: model-repo)")
    parser.add_argument("--limit", type=int, default=None, help="evaluate only the first N held-out examples")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads (default: 1)")
    parser.add_argument("--keep-rate", type=float, default=0.5, help="pruned digits export to compare (default: 0.5)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this file")
    return parser


def main(argv: list[str] | None = None) -> int:
    from .zoo import ZOO, build_repo

    args = build_parser().parse_args(argv)
    build_repo(args.repo, names=args.models)
    results = {}
    for name in args.models:
        if name == "translator-en-de":
            r = evaluate_translation(args.repo / name, args.limit, args.threads)
            print(
                f"{name}: exact match {r['exact_match']:.2%}, chrF {r['chrf']:.2f}, BLEU {r['bleu']:.2f} "
                f"on {r['n']} held-out pairs (onnxruntime greedy, {r['sentences_per_s']} sentences/s)"
            )
            v = evaluate_translation(args.repo / name, args.limit, args.threads, variants=True)
            print(
                f"{name}: exact match {v['exact_match']:.2%}, chrF {v['chrf']:.2f} on {v['n']} held-out "
                "variants (the same pairs re-spelt: case, spacing, am/pm, trailing punctuation)"
            )
            h = evaluate_translation(args.repo / name, args.limit, args.threads, variants="hyphen")
            print(
                f"{name}: exact match {h['exact_match']:.2%}, chrF {h['chrf']:.2f} on {h['n']} held-out "
                "hyphen variants (ASCII hyphens for en dashes, number words without their hyphen)"
            )
            r = {"held_out": r, "variants": v, "hyphen_variants": h}
        elif name == "digits-vit":
            r = evaluate_digits_keep_rates(
                ZOO / name / "model.safetensors", (1.0, args.keep_rate), args.limit, args.threads
            )
            for rate, m in r.items():
                print(
                    f"{name} keep-rate {rate}: accuracy {m['accuracy']:.2%} on {m['n']} held-out images, "
                    f"{m['images_per_s']:,} images/s"
                )
            robust = evaluate_digits_robustness(args.repo / name, args.threads)
            print(f"{name}: accuracy {robust['accuracy']:.2%} on {robust['n']} robustness images ({robust})")
            r["robustness"] = robust
        else:
            print(f"unknown zoo model {name!r}", file=sys.stderr)
            return 2
        results[name] = r
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
