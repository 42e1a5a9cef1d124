"""Alignment error rate of the cross-attention word alignments against a hand-made gold set.

The gold set (``benchmarks/data/alignment-en-de.tsv``) holds English sentences of the bundled
translator's domain, its German translations, and sure and possible word links annotated by
hand. Every contender aligns the same (source, translation) pairs, in process, through the
model directory's ``aligner.onnx`` and the server's own word-alignment code:

- ``layer k, heads averaged``: the rule the server applies, for every decoder layer k the
  aligner computes (those up to the one it reads; ``--checkpoint``: every layer, with PyTorch);
- ``layer k, best single head``: the head of layer k that scores best on this set (an upper
  bound for picking one head in advance);
- ``layer k, input step``: layer k read at the step where the target token is the decoder's
  input rather than its output (Garg et al. 2019's shifted reading);
- ``diagonal``: target word j linked to source word round(j x S / T), the baseline.

AER = 1 - (|A & S| + |A & P|) / (|A| + |S|) (Och & Ney 2003), P including S; lower is better.

    python -m benchmarks.alignment_aer            # or: attnserve-bench alignment-aer
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from attnserve.contract.manifest import load_manifest
from attnserve.contract.target_text import target_side
from attnserve.server.documents.alignment import align_words, word_spans
from attnserve.server.documents.normalize import Normalizer
from attnserve.server.service.alignments import source_words, target_words
from attnserve.server.translation.aligner import Aligner

log = logging.getLogger(__name__)

MODEL_DIR = Path(__file__).resolve().parent.parent / "models" / "repo" / "translator-en-de"
GOLD = Path(__file__).resolve().parent / "data" / "alignment-en-de.tsv"
Links = set[tuple[int, int]]


@dataclasses.dataclass(frozen=True)
class GoldPair:
    source: str
    target: str
    sure: Links
    possible: Links  # sure included


def _links(text: str) -> Links:
    return {(int(i), int(j)) for i, j in (link.split("-") for link in text.split())}


def read_gold(path: Path = GOLD) -> list[GoldPair]:
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        source, target, sure, possible = (line.split("\t") + ["", ""])[:4]
        pairs.append(GoldPair(source, target, _links(sure), _links(sure) | _links(possible)))
    return pairs


def aer(predicted: Sequence[Links], gold: Sequence[GoldPair]) -> float:
    """Och & Ney's alignment error rate over a corpus."""
    a_s = sum(len(a & g.sure) for a, g in zip(predicted, gold))
    a_p = sum(len(a & g.possible) for a, g in zip(predicted, gold))
    total = sum(len(a) for a in predicted) + sum(len(g.sure) for g in gold)
    return 1.0 - (a_s + a_p) / total


def diagonal(pair: GoldPair) -> Links:
    s, t = len(word_spans(pair.source)), len(word_spans(pair.target))
    return {(min(s - 1, round(j * s / t)), j) for j in range(t)}


@dataclasses.dataclass
class Prepared:
    """One gold pair through the tokenizers and the aligner: every layer and head, (N, H, T, S)."""

    pair: GoldPair
    weights: np.ndarray
    source_words: list[int | None]
    target_words: list[int | None]


def prepare(model_dir: Path, gold: list[GoldPair], checkpoint: Path | None = None) -> tuple[list[Prepared], int]:
    """Every pair's attention (N, H, T, S) from the directory's aligner (the layers up to the one
    it reads), or with ``checkpoint`` (the model's PyTorch weights) from every decoder layer."""
    manifest = load_manifest(model_dir)
    options = {"providers": ["CPUExecutionProvider"]}
    session = ort.InferenceSession(str(model_dir / manifest.graphs["aligner"].file), **options)
    encoder = ort.InferenceSession(str(model_dir / manifest.graphs["encoder"].file), **options)
    aligner = Aligner(session, manifest, encoder)
    tokenizer = Tokenizer.from_file(str(model_dir / manifest.tokenizer.file))
    normalize = Normalizer.for_tokenizer(tokenizer)
    out = []
    for pair in gold:
        normalised = normalize(pair.source)
        src = tokenizer.encode(normalised).ids
        tgt = target_side(tokenizer).encode(pair.target).ids  # ends with eos
        inputs = aligner.decoder_inputs((), tgt)
        if checkpoint is None:
            (weights,) = aligner.every_layer([(src, inputs, None)])  # (N, H, T, S)
        else:
            weights = _torch_attention(checkpoint, src, inputs)  # (N, H, T, S)
        out.append(
            Prepared(pair, weights, source_words(tokenizer, pair.source, normalised, src), target_words(tokenizer, tgt))
        )
    return out, aligner.layer


@functools.cache
def _torch_model(checkpoint: Path):
    from attnserve.models import load_checkpoint

    model, _ = load_checkpoint(checkpoint, dropout=0.0)
    return model.eval()


def _torch_attention(checkpoint: Path, src: Sequence[int], inputs: Sequence[int]) -> np.ndarray:
    import torch

    s, t = torch.tensor([list(src)]), torch.tensor([list(inputs)])
    with torch.no_grad():
        weights = _torch_model(checkpoint).cross_attention(s, s >= 0, t, t >= 0)  # (1, N, H, T, S)
    return weights[0].numpy()


def attention_rule(select: Callable[[np.ndarray], np.ndarray], shift: int = 0) -> Callable[[Prepared], Links]:
    """Links from ``select(weights (N, H, T, S)) -> (T, S)``, rows shifted by ``shift`` steps."""

    def rule(p: Prepared) -> Links:
        rows = select(p.weights)  # (T, S)
        if shift:
            rows = np.concatenate([rows[shift:], rows[-1:].repeat(shift, axis=0)])  # (T, S)
        return set(align_words(p.pair.source, p.pair.target, rows, p.source_words, p.target_words).links)

    return rule


def contenders(layers: int, heads: int, prepared: list[Prepared]) -> dict[str, Callable[[Prepared], Links]]:
    gold = [p.pair for p in prepared]
    rules: dict[str, Callable[[Prepared], Links]] = {"diagonal (baseline)": lambda p: diagonal(p.pair)}
    for k in range(layers):
        rules[f"layer {k}, heads averaged"] = attention_rule(lambda w, k=k: w[k].mean(axis=0))
        by_head = {h: attention_rule(lambda w, k=k, h=h: w[k, h]) for h in range(heads)}
        best = min(by_head, key=lambda h: aer([by_head[h](p) for p in prepared], gold))
        rules[f"layer {k}, best single head ({best})"] = by_head[best]
        rules[f"layer {k}, input step"] = attention_rule(lambda w, k=k: w[k].mean(axis=0), shift=1)
    return rules


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.alignment_aer", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model-dir", type=Path, default=MODEL_DIR, help="a translation model directory with aligner.onnx"
    )
    parser.add_argument("--gold", type=Path, default=GOLD, help="gold alignments (TSV, see the file's header)")
    parser.add_argument(
        "--checkpoint",
        type=Path,
        help="the model's PyTorch weights (models/zoo/<name>/model.safetensors): every decoder layer, not "
        "only those the served aligner computes (needs the export extra: PyTorch)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    gold = read_gold(args.gold)
    try:
        prepared, served = prepare(args.model_dir, gold, args.checkpoint)
    except (OSError, KeyError, ValueError) as exc:
        print(f"error: {args.model_dir}: {exc}", file=sys.stderr)
        return 1
    layers, heads = prepared[0].weights.shape[:2]
    print(f"{len(gold)} sentence pairs, {sum(len(g.sure) for g in gold)} sure links; {args.model_dir.name}")
    print(f"{'contender':<36} {'AER':>6}")
    for name, rule in contenders(layers, heads, prepared).items():
        served_mark = "  <- served" if name == f"layer {served}, heads averaged" else ""
        print(f"{name:<36} {aer([rule(p) for p in prepared], gold):6.3f}{served_mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
