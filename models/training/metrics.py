"""Translation metrics: exact match, and chrF / BLEU with ``sacrebleu`` (Post, 2018).

Pure Python (no torch), so the ONNX evaluation on the export side uses the same code.
"""

from __future__ import annotations

from collections.abc import Sequence


def exact_match(hyps: Sequence[str], refs: Sequence[str]) -> float:
    """Fraction of hypotheses equal to their reference, character for character."""
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses for {len(refs)} references")
    return sum(h == r for h, r in zip(hyps, refs)) / max(len(refs), 1)


def sacrebleu_scores(hyps: Sequence[str], refs: Sequence[str]) -> dict[str, float]:
    """Corpus chrF and BLEU (sacrebleu defaults: chrF n=6 beta=2; BLEU 13a tokenisation)."""
    import sacrebleu  # the `train` extra; imported here so exact_match works without it

    return {
        "chrf": round(sacrebleu.corpus_chrf(list(hyps), [list(refs)]).score, 2),
        "bleu": round(sacrebleu.corpus_bleu(list(hyps), [list(refs)]).score, 2),
    }
