"""A translation's quality score: the calibration ``model.json`` may carry (``quality``).

The server reads a few features of each translated sentence from the model's own evidence
(``server/service/quality.py`` computes them) and maps them to 0..1 with a logistic
regression fit offline on held-out data (``benchmarks/quality.py``):

    score = sigmoid(bias + sum_i weights[i] * (x[i] - mean[i]) / scale[i])

A feature the engine could not measure for a sentence (attention, where the decoder does not
return it) is taken at its ``mean``: it moves the score neither way. Layout::

    "quality": {"features": ["mean_logprob", ...], "mean": [...], "scale": [...],
                "weights": [...], "bias": 0.5, "fit": {...free-form: data, AUC...}}

A model directory without it is scored with :data:`DEFAULT`, a fit over two models (its AUCs are
in benchmarks/README.md, "Quality").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# What a sentence's features are (server/service/quality.py measures them):
FEATURES = (
    "mean_logprob",  # the best hypothesis's log-probability per generated token (eos included)
    "length_ratio",  # |log(generated tokens / source tokens)|
    "repetition",  # share of the generated token 3-grams repeating an earlier one, less the source's share
    "truncated",  # 1.0 when the hypothesis hit max_new_tokens, else 0.0
    "coverage",  # mean over source tokens of min(1, the attention they received over all steps)
    "attention_entropy",  # mean entropy of each step's attention over the source / log(source tokens)
)
ATTENTION_FEATURES = ("coverage", "attention_entropy")  # read from the attention the decoder's steps keep


@dataclass(frozen=True)
class QualityCalibration:
    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    fit: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def reads_attention(self) -> bool:
        """Whether a feature comes from the steps' attention (which the decoder then has to keep)."""
        return any(name in ATTENTION_FEATURES for name in self.features)

    def score(self, values: Mapping[str, float | None]) -> float:
        """0..1 from a sentence's features (a missing or None feature counts as its mean)."""
        z = self.bias
        for name, mean, scale, weight in zip(self.features, self.mean, self.scale, self.weights):
            x = values.get(name)
            if x is not None and math.isfinite(x):
                z += weight * (x - mean) / scale
        return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0

    def to_json(self) -> dict[str, Any]:
        out = {
            "features": list(self.features),
            "mean": list(self.mean),
            "scale": list(self.scale),
            "weights": list(self.weights),
            "bias": self.bias,
        }
        return {**out, "fit": self.fit} if self.fit else out


def _numbers(data: Mapping[str, Any], key: str, n: int) -> tuple[float, ...]:
    values = data.get(key)
    if not isinstance(values, list) or len(values) != n:
        raise ValueError(f"quality.{key}: expected a list of {n} numbers (one per feature)")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
        raise ValueError(f"quality.{key}: expected finite numbers, got {values!r}")
    return tuple(float(v) for v in values)


def parse_calibration(data: Any) -> QualityCalibration:
    """``model.json``'s ``quality`` object, checked; raises ValueError naming the field."""
    if not isinstance(data, dict):
        raise ValueError("quality: expected an object with features, mean, scale, weights and bias")
    features = data.get("features")
    if not isinstance(features, list) or not features or not all(isinstance(f, str) for f in features):
        raise ValueError("quality.features: expected a non-empty list of feature names")
    unknown = [f for f in features if f not in FEATURES]
    if unknown:
        raise ValueError(f"quality.features: unknown {', '.join(map(repr, unknown))} (known: {', '.join(FEATURES)})")
    n = len(features)
    scale = _numbers(data, "scale", n)
    if any(s <= 0 for s in scale):
        raise ValueError(f"quality.scale: every scale must be > 0, got {list(scale)}")
    bias = data.get("bias")
    if not isinstance(bias, (int, float)) or isinstance(bias, bool) or not math.isfinite(bias):
        raise ValueError(f"quality.bias: expected a finite number, got {bias!r}")
    fit = data.get("fit") or {}
    if not isinstance(fit, dict):
        raise ValueError("quality.fit: expected an object")
    return QualityCalibration(
        tuple(features), _numbers(data, "mean", n), scale, _numbers(data, "weights", n), float(bias), fit
    )


def calibration(features: Sequence[str], mean, scale, weights, bias: float, fit=None) -> QualityCalibration:
    """A calibration from a fit's arrays (``benchmarks/quality.py``), rounded for ``model.json``."""
    r = [tuple(round(float(v), 6) for v in values) for values in (mean, scale, weights)]
    return QualityCalibration(tuple(features), r[0], r[1], r[2], round(float(bias), 6), dict(fit or {}))


# For models without their own: ``benchmarks/quality.py``'s fit on the calibration halves of the
# bundled translator and of an imported opus-mt checkpoint (forward selection chose coverage,
# attention entropy and log-probability), plus two terms no fit chose because neither model loops
# on its data: repeated 3-grams and a hit token limit, each -1 per 0.1 (a translation repeating half
# of its 3-grams loses 5 in the logit), so a hallucinated loop scores low on any model.
DEFAULT = QualityCalibration(
    features=("coverage", "attention_entropy", "mean_logprob", "repetition", "truncated"),
    mean=(0.765687, 0.385637, -0.235324, 0.0, 0.0),
    scale=(0.23756, 0.282888, 0.453154, 0.1, 0.1),
    weights=(1.606302, -2.402487, 5.730905, -1.0, -1.0),
    bias=2.574176,
    fit={"models": "translator-en-de + imported opus-mt, calibration halves", "cv_auc": 0.9909},
)
