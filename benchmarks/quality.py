"""How well the quality score separates right translations from wrong ones (ROC AUC), and its calibration.

Two translators, each run in process on the server's own path (``service.documents.split`` ->
the engine with the options the service scores with -> ``service.quality`` features):

- the bundled translator (``models/repo/translator-en-de``) on its held-out test set
  (``models.training.data_translation.make_splits``' test pairs for its data seed: never
  trained on; right = exact match with the reference) plus out-of-domain English
  (``benchmarks/data/quality-ood.txt``: free text the model answers with German-looking nonsense,
  every translation counted wrong). Both are split in two: even items calibrate, odd items
  evaluate, so the evaluation split never takes part in the fit;
- an imported checkpoint: ``tests/support/hf_checkpoints.py``'s opus-mt-layout model (Marian,
  trained briefly on reversing syllables; right on short texts, wrong on many longer ones),
  exported by ``attnserve-export`` and scored on held-out texts, with the generic default
  calibration (``contract.quality.DEFAULT``, what a model without its own gets) and with a fit
  on its own calibration half.

The fit: a logistic regression on the standardised features (Newton's method, an L2 penalty),
in numpy. Reported: the AUC of the calibrated score on each evaluation split, each feature's
own AUC beside it, and what ``--min-quality 0.5`` would mark. ``--write-calibration`` stores the
bundled translator's fit in ``models/zoo/translator-en-de/quality.json`` (``make models`` writes
it into model.json's ``quality``).

    python -m benchmarks.quality            # or: attnserve-bench quality
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attnserve.contract.quality import DEFAULT, FEATURES, QualityCalibration, calibration

from .common import (
    add_common_arguments,
    add_model_dir_argument,
    header,
    interleaved,
    machine,
    shown_path,
    table,
    write_results,
)

NAME = "quality"
ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "models" / "repo" / "translator-en-de"
OOD = Path(__file__).resolve().parent / "data" / "quality-ood.txt"
ZOO_CALIBRATION = ROOT / "models" / "zoo" / "translator-en-de" / "quality.json"
# Which way each feature points for a right translation (its single-feature AUC is taken that way).
DIRECTION = {"mean_logprob": 1, "length_ratio": -1, "repetition": -1, "truncated": -1, "coverage": 1}
DIRECTION["attention_entropy"] = -1
L2 = 1.0  # penalty on the standardised weights: a handful of wrong in-domain translations must not rule the fit


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.quality", description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    add_model_dir_argument(parser, COMMITTED)
    parser.add_argument("--no-imported", action="store_true", help="skip the imported checkpoint (needs torch)")
    parser.add_argument(
        "--write-calibration", action="store_true", help=f"store the bundled translator's fit in {ZOO_CALIBRATION}"
    )
    return parser


# ------------------------------------------------------------------------------------ the math


def roc_auc(scores: Sequence[float], right: Sequence[bool]) -> float:
    """P(score of a right translation > score of a wrong one), ties counted half (Mann-Whitney U)."""
    s, y = np.asarray(scores, dtype=np.float64), np.asarray(right, dtype=bool)
    pos, neg = int(y.sum()), int((~y).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    sorted_s = s[order]
    i = 0
    while i < len(s):  # average ranks over ties
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = L2, steps: int = 50) -> tuple[np.ndarray, float]:
    """(weights, bias) of a logistic regression, Newton's method; x: (N, F) standardised, y: (N,) 0/1."""
    n, f = x.shape
    a = np.hstack([x, np.ones((n, 1))])  # (N, F + 1)
    w = np.zeros(f + 1)
    penalty = np.diag([l2] * f + [0.0])  # the bias is not penalised
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(a @ w, -30, 30)))  # (N,)
        grad = a.T @ (p - y) + penalty @ w  # (F + 1,)
        hess = (a * (p * (1 - p))[:, None]).T @ a + penalty  # (F + 1, F + 1)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w[:f], float(w[f])


def fit_features(rows, right, names: Sequence[str], extra: dict[str, Any] | None = None) -> QualityCalibration:
    """The calibration of the features ``names`` on these sentences (a missing feature: its mean)."""
    raw = np.array([[np.nan if r[k] is None else r[k] for k in names] for r in rows], dtype=np.float64)
    mean = np.nan_to_num(np.nanmean(raw, axis=0))
    scale = np.nan_to_num(np.nanstd(raw, axis=0))
    scale = np.where(scale > 1e-6, scale, 1.0)
    x = np.where(np.isnan(raw), 0.0, (raw - mean) / scale)  # (N, F)
    weights, bias = fit_logistic(x, np.asarray(right, dtype=np.float64))
    return calibration(names, mean, scale, weights, bias, extra)


def cross_validated_auc(rows, right, names: Sequence[str], folds: int = 5) -> float:
    """The mean AUC over ``folds`` of a fit on the other folds (folds by position: i % folds)."""
    aucs = []
    for k in range(folds):
        train = [i for i in range(len(rows)) if i % folds != k]
        test = [i for i in range(len(rows)) if i % folds == k]
        cal = fit_features([rows[i] for i in train], [right[i] for i in train], names)
        auc = roc_auc([cal.score(rows[i]) for i in test], [right[i] for i in test])
        if not math.isnan(auc):
            aucs.append(auc)
    return float(np.mean(aucs)) if aucs else float("nan")


def fit(rows, right, extra: dict[str, Any], gain: float = 0.002) -> QualityCalibration:
    """Forward selection on the calibration data alone: start from the best single feature by
    cross-validated AUC, add the feature that raises it most while it rises by over ``gain``;
    then fit the chosen ones on all of it. A feature that does not help this model (repeated
    3-grams in a translator of numbers, which repeat digits when right) stays out."""
    available = [k for k in FEATURES if any(r[k] is not None for r in rows) and len({r[k] for r in rows}) > 1]
    chosen: list[str] = []
    best = 0.0
    while True:
        trials = {k: cross_validated_auc(rows, right, [*chosen, k]) for k in available if k not in chosen}
        trials = {k: v for k, v in trials.items() if not math.isnan(v)}
        if not trials:
            break
        k = max(trials, key=trials.get)
        if chosen and trials[k] <= best + gain:
            break
        chosen.append(k)
        best = trials[k]
    return fit_features(rows, right, chosen, {**extra, "cv_auc": round(best, 4)})


# ------------------------------------------------------------------------------ translating


class Translator:
    """A model directory's engine in process, translating texts the way the service does."""

    def __init__(self, model_dir: Path, threads: int) -> None:
        from attnserve.contract.manifest import load_manifest
        from attnserve.server.translation import EngineSettings, TranslationEngine
        from attnserve.server.translation.sessions import load_translation_sessions

        manifest = load_manifest(model_dir)
        enc, dec = load_translation_sessions(model_dir, manifest, "cpu", threads)
        self.engine = TranslationEngine(model_dir, manifest, enc, dec, EngineSettings())
        self.engine.warmup()
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self.engine.start())

    def close(self) -> None:
        self.loop.run_until_complete(self.engine.stop(1.0))
        self.loop.close()

    def decode(self, texts: list[str], scored: bool) -> list[str]:
        """The texts (one sentence each, at most 256) in one engine call, with the options the
        service scores with (``scored``) or with a request's defaults (no scores, no attention)."""
        from attnserve.server.service import quality
        from attnserve.server.service.limits import prepare
        from attnserve.server.translation import DecodeOptions

        plain = DecodeOptions(return_scores=False)
        options = quality.scoring_options(plain, self.engine) if scored else plain
        results = self.loop.run_until_complete(self.engine.translate(prepare(self.engine, texts, options)))
        return [r.hypotheses[0].text for r in results]

    def run(self, texts: list[str]) -> tuple[list[str], list[list[dict[str, float | None]]]]:
        """(each text's translation, each text's sentences' features)."""
        from attnserve.server.service import document_results, documents, quality
        from attnserve.server.translation import DecodeOptions

        prepared = documents.split(self.engine, texts, "text")
        # every feature, the attention ones included, whatever the model's calibration reads: the fit chooses
        options = DecodeOptions(return_scores=True, return_attention=self.engine.step_attention)
        sources = [(s, ids) for p in prepared for s, ids in zip(p.sources, p.ids)]
        results = []
        for at in range(0, len(sources), 256):
            chunk = sources[at : at + 256]
            call = self.engine.prepare([s for s, _ in chunk], options, [ids for _, ids in chunk])
            results += self.loop.run_until_complete(self.engine.translate(call))
        out, feats, at = [], [], 0
        for p in prepared:
            mine = results[at : at + p.segments]
            at += p.segments
            out.append(document_results.document_result(p, mine, 1).hypotheses[0].text)
            feats.append([quality.features(r.hypotheses[0], r.source_tokens, ids) for r, ids in zip(mine, p.ids)])
        return out, feats


def text_scores(feats: list[list[dict[str, float | None]]], cal: QualityCalibration) -> list[float]:
    """Each text's score as the service gives it: its lowest sentence's."""
    return [min((cal.score(f) for f in sentences), default=1.0) for sentences in feats]


def evaluate(name: str, feats, right: list[bool], cal: QualityCalibration) -> dict[str, Any]:
    """AUC of the calibrated score and of each feature alone (in the direction a right translation has)."""
    scores = text_scores(feats, cal)
    row: dict[str, Any] = {"set": name, "texts": len(right), "right": int(sum(right)), "features": list(cal.features)}
    row["auc"] = roc_auc(scores, right)
    for k, sign in DIRECTION.items():
        values = [min((sign * (f[k] if f[k] is not None else 0.0) for f in s), default=0.0) for s in feats]
        row[f"auc_{k}"] = roc_auc(values, right)
    low = [s < 0.5 for s in scores]
    row["marked_wrong"] = sum(lo and not r for lo, r in zip(low, right)) / max(1, len(right) - sum(right))
    row["marked_right"] = sum(lo and r for lo, r in zip(low, right)) / max(1, sum(right))
    return row


def halves(items: list) -> tuple[list, list]:
    """(calibration: even items, evaluation: odd items)."""
    return items[0::2], items[1::2]


def sentence_rows(feats, right) -> tuple[list, list]:
    rows = [f for sentences in feats for f in sentences]
    labels = [r for sentences, r in zip(feats, right) for _ in sentences]
    return rows, labels


# ------------------------------------------------------------------------------ the two models


def ood_sentences() -> list[str]:
    lines = OOD.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


Rows = list[dict[str, float | None]]  # one sentence's features per row


def bundled(args: argparse.Namespace) -> tuple[list[dict[str, Any]], QualityCalibration, tuple, tuple, dict]:
    """(its evaluation rows, its calibration, its calibration half's sentences and labels, its
    evaluation half's texts' features and labels, what scoring costs)."""
    from attnserve.models.training.data_translation import generate_pairs

    test_seed = 1  # make_splits(seed=0)'s test pairs: the bundled translator's data_seed is 0
    pairs = generate_pairs(120 if args.quick else 2000, seed=test_seed)
    ood = ood_sentences()[: 40 if args.quick else None]
    translator = Translator(args.model_dir, args.threads)
    try:
        done, feats = translator.run([p.source for p in pairs] + ood)
        cost = scoring_cost(translator, [p.source for p in pairs[:256]], args.repeats or (1 if args.quick else 5))
    finally:
        translator.close()
    right = [d == p.target for d, p in zip(done, pairs)] + [False] * len(ood)
    n = len(pairs)
    sets = {"in-domain": (feats[:n], right[:n]), "out-of-domain": (feats[n:], right[n:])}
    cal_feats, cal_right, ev = [], [], {}
    for name, (f, r) in sets.items():
        (cf, ef), (cr, er) = halves(f), halves(r)
        cal_feats += cf
        cal_right += cr
        ev[name] = (ef, er)
    info = {"model": "translator-en-de", "in_domain_texts": n, "ood_texts": len(ood), "split": "even items"}
    calibrating = sentence_rows(cal_feats, cal_right)
    cal = fit(*calibrating, info)
    both = (ev["in-domain"][0] + ev["out-of-domain"][0], ev["in-domain"][1] + ev["out-of-domain"][1])
    rows = [evaluate("bundled: held-out + out-of-domain", *both, cal)]
    rows.append(evaluate("bundled: held-out only", *ev["in-domain"], cal))
    auc = rows[0]["auc"]
    cal = calibration(cal.features, cal.mean, cal.scale, cal.weights, cal.bias, {**info, "eval_auc": round(auc, 4)})
    return rows, cal, calibrating, both, cost


def scoring_cost(translator: Translator, texts: list[str], repeats: int) -> dict[str, Any]:
    """What scoring costs the decoder: the texts in one engine call without and with the scoring
    options (the log-softmax and the step attention), taking turns (``interleaved``)."""
    runs = {"plain": lambda: translator.decode(texts, False), "scored": lambda: translator.decode(texts, True)}
    timings, values = interleaved(runs, repeats)
    assert values["plain"] == values["scored"]  # scoring changes no translation
    out: dict[str, Any] = {"texts": len(texts), **{k: t.to_json() for k, t in timings.items()}}
    out["scored_over_plain"] = timings["scored"].median / timings["plain"].median
    return out


def imported(args: argparse.Namespace) -> tuple[list, list[bool], QualityCalibration, tuple[Rows, list[bool]]]:
    """The opus-mt-layout checkpoint of tests/support/hf_checkpoints.py, exported and translated:
    (its evaluation half's features and labels, its own fit, its calibration half's sentences and labels)."""
    import sys

    sys.path.insert(0, str(ROOT))
    from tests.support import hf_checkpoints as hf

    work = args.work_dir / "quality-imported"
    if work.exists():
        import shutil

        shutil.rmtree(work)
    ckpt, model_dir = hf.export("opus-mt", work)
    texts = hf.sentences(4242, 80 if args.quick else 800)
    ids = [ckpt.tokenizer(t, add_special_tokens=False).input_ids for t in texts]
    references = [" ".join(ckpt.decode(i[::-1]).split()) for i in ids]
    translator = Translator(model_dir, args.threads)
    try:
        done, feats = translator.run(texts)
    finally:
        translator.close()
    right = [" ".join(d.split()) == ref for d, ref in zip(done, references)]
    (cal_feats, ev_feats), (cal_right, ev_right) = halves(feats), halves(right)
    calibrating = sentence_rows(cal_feats, cal_right)
    own = fit(*calibrating, {"model": "opus-mt (tests/support/hf_checkpoints.py)", "texts": len(texts)})
    return ev_feats, ev_right, own, calibrating


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    info = machine()
    header("quality score: ROC AUC of right vs wrong translations (evaluation halves)", info, args.threads)
    rows, cal, calibrating, ev_both, cost = bundled(args)
    default = cal
    if not args.no_imported:
        ev_feats, ev_right, own, theirs = imported(args)
        pooled = (calibrating[0] + theirs[0], calibrating[1] + theirs[1])
        default = fit(*pooled, {"models": "translator-en-de + imported opus-mt, calibration halves"})
        # the generic default the server gives models without a calibration (contract.quality.DEFAULT:
        # this fit, copied, plus its repetition and truncation terms)
        rows.append(evaluate("bundled: generic default", *ev_both, DEFAULT))
        rows.append(evaluate("imported opus-mt: generic default", ev_feats, ev_right, DEFAULT))
        rows.append(evaluate("imported opus-mt: its own fit", ev_feats, ev_right, own))
    alone = [f"auc_{k}" for k in DIRECTION]
    shown = [
        [r["set"], r["texts"], r["right"], f"{r['auc']:.3f}", *(f"{r[k]:.2f}" for k in alone),
         f"{r['marked_wrong']:.0%}", f"{r['marked_right']:.0%}"]
        for r in rows
    ]  # fmt: skip
    names = ["logprob", "length", "repeats", "truncated", "coverage", "entropy"]
    print(table(["set", "texts", "right", "AUC", *names, "<0.5: wrong", "<0.5: right"], shown))
    plain, scored = cost["plain"]["median_s"], cost["scored"]["median_s"]
    print(
        f"   cost: {cost['texts']} in-domain texts in one engine call, {plain * 1e3:.0f} ms without scoring, "
        f"{scored * 1e3:.0f} ms with (x{cost['scored_over_plain']:.3f}, median of {len(cost['plain']['runs_s'])})"
    )
    print("   single-feature AUCs beside the score's; features chosen:")
    print(f"   bundled: {cal.to_json()}")
    if not args.no_imported:
        print(f"   pooled fit (contract.quality.DEFAULT's): {default.to_json()}")
    if args.write_calibration and not args.quick:
        ZOO_CALIBRATION.write_text(json.dumps(cal.to_json(), indent=2) + "\n")
        print(f"wrote {shown_path(ZOO_CALIBRATION)}")
    result = {"machine": info, "model_dir": shown_path(args.model_dir), "rows": rows, "cost": cost}
    result["calibration"] = cal.to_json()
    result["default_calibration"] = default.to_json() if not args.no_imported else None
    result["default_in_contract"] = DEFAULT.to_json()
    write_results(args.out, NAME, result, args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
