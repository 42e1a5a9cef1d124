"""A quality score per translated sentence and per text, from the model's own evidence.

Each sentence's best hypothesis gives the features of :data:`attnserve.contract.quality.FEATURES`:
its log-probability per token (a model unsure of its words), the ratio of its length to the
source's (dropped clauses, run-on output), repeated token 3-grams beyond those of the source and a
hit ``max_new_tokens`` (hallucinated loops), and from the cross-attention the engine kept of its steps
(``DecodeOptions.return_attention``) how much of the source was attended to (coverage) and how
spread each step's attention was (entropy: a decoder that reads nothing in particular). The
model directory's calibration (``model.json`` ``quality``, else the generic default) maps them
to 0..1, the estimated chance that the sentence is translated right.

A text's score is the lowest of its sentences' scores: a text is as trustworthy as its worst
sentence, and a threshold on it catches one bad sentence in a long document that a mean would
hide. A text with nothing to translate (punctuation, markup) scores 1.

The scores cost the decoder its log-softmax over the vocabulary and, where the calibration has an
attention feature and the decoder returns it, its step attention; they are computed only for a
request that asks for them or when the server has a threshold (``--min-quality``). Below the
threshold, ``--quality-action mark`` flags the text (``TextQuality.low``), ``refuse`` answers the
request with :class:`LowQuality` naming the sentence and its score (INVALID_ARGUMENT: the text is
outside what the model translates well).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np

from attnserve.contract.quality import DEFAULT, QualityCalibration

from ..documents import PreparedDocument
from ..shared.errors import InvalidRequest, echo
from ..translation import DecodeOptions, Hypothesis, TranslationEngine, TranslationResult

MARK, REFUSE = "mark", "refuse"  # --quality-action (config.QUALITY_ACTIONS)
INLINE_SENTENCES = 64  # sentences judged on the event loop; more on the work pool (as documents.INLINE_SEGMENTS)
NGRAM = 3  # repeated token 3-grams: shorter ones repeat in right numbers ("1.000.000")


@dataclass(frozen=True)
class TextQuality:
    """One text's quality: its lowest sentence score, every sentence's in order, and whether it
    is below the server's ``--min-quality`` (always False without one)."""

    score: float
    sentences: tuple[float, ...]
    low: bool = False


class LowQuality(InvalidRequest):
    """A translation scored below ``--min-quality`` on a server that refuses those."""

    def __init__(self, text: int, sentence: int, source: str, score: float, threshold: float) -> None:
        super().__init__(
            f"text {text}, sentence {sentence} ({echo(source)}): translation quality {score:.2f} is below this "
            f"server's minimum {threshold:g} (--min-quality, --quality-action refuse); the text is likely outside "
            "what the model translates well"
        )
        self.text, self.sentence, self.score, self.threshold = text, sentence, score, threshold


def scoring_options(options: DecodeOptions, engine: TranslationEngine) -> DecodeOptions:
    """``options`` keeping what the model's calibration reads: the scores, and each step's
    attention where the calibration has an attention feature and the decoder returns it."""
    attention = engine.step_attention and calibration_of(engine).reads_attention
    return dataclasses.replace(options, return_scores=True, return_attention=options.return_attention or attention)


def repetition(token_ids: Sequence[int], n: int = NGRAM) -> float:
    """The share of the ids' n-grams that repeat an earlier one (0 for fewer than n + 1 ids)."""
    grams = [tuple(token_ids[i : i + n]) for i in range(len(token_ids) - n + 1)]
    return 0.0 if len(grams) < 2 else 1.0 - len(set(grams)) / len(grams)


def attention_features(attention: np.ndarray | None) -> tuple[float | None, float | None]:
    """(coverage, normalised entropy) of a hypothesis's kept attention (steps, source tokens)
    float32, rows summing to 1; (None, None) without it."""
    if attention is None or attention.size == 0:
        return None, None
    _, length = attention.shape  # (T, L)
    coverage = float(np.minimum(attention.sum(axis=0), 1.0).mean())  # (L,) -> scalar
    p = np.clip(attention, 1e-9, 1.0)  # (T, L)
    entropy = float((-(p * np.log(p)).sum(axis=1)).mean())  # (T,) -> scalar
    return coverage, entropy / math.log(length) if length > 1 else 0.0


def features(hypothesis: Hypothesis, source_tokens: int, source_ids: Sequence[int] = ()) -> dict[str, float | None]:
    """The features of ``contract.quality.FEATURES`` for one sentence's hypothesis; ``source_ids``:
    the sentence's ids, whose own repeats ("1,000,000") a right translation repeats too."""
    ids = hypothesis.token_ids
    generated = max(1, len(ids))
    coverage, entropy = attention_features(hypothesis.attention)
    return {
        "mean_logprob": hypothesis.logprob / generated,
        "length_ratio": abs(math.log(generated / max(1, source_tokens))),
        "repetition": max(0.0, repetition(ids) - repetition(source_ids)),
        "truncated": 1.0 if hypothesis.finish_reason == "length" else 0.0,
        "coverage": coverage,
        "attention_entropy": entropy,
    }


def calibration_of(engine: TranslationEngine) -> QualityCalibration:
    manifest = engine.manifest
    return manifest.quality if manifest is not None and manifest.quality is not None else DEFAULT


def sentence_score(result: TranslationResult, source_ids: Sequence[int], calibration: QualityCalibration) -> float:
    if not result.hypotheses:
        return 0.0
    return calibration.score(features(result.hypotheses[0], result.source_tokens, source_ids))


def judge(
    engine: TranslationEngine,
    prepared: Sequence[PreparedDocument],
    results: Sequence[TranslationResult],
    threshold: float = 0.0,
    action: str = MARK,
) -> list[TextQuality]:
    """Each document's quality from its sentences' results (one document after another, as
    ``documents.translate_sentences`` returns them); with ``action`` refuse, LowQuality for the
    first sentence below ``threshold`` (0 = no threshold)."""
    calibration = calibration_of(engine)
    out, at = [], 0
    for k, p in enumerate(prepared):
        mine = zip(results[at : at + p.segments], p.ids)
        scores = tuple(round(sentence_score(r, ids, calibration), 4) for r, ids in mine)
        at += p.segments
        score = min(scores, default=1.0)
        low = threshold > 0 and score < threshold
        if low and action == REFUSE:
            worst = scores.index(score)
            raise LowQuality(k, worst, p.sources[worst], score, threshold)
        out.append(TextQuality(score, scores, low))
    return out


async def judge_off_loop(
    engine: TranslationEngine,
    prepared: Sequence[PreparedDocument],
    results: Sequence[TranslationResult],
    threshold: float,
    action: str,
    pool: Executor,
) -> list[TextQuality]:
    """:func:`judge`, on ``pool`` for documents of over ``INLINE_SENTENCES`` sentences (numpy over
    each one's attention would hold the event loop)."""
    args = (engine, prepared, results, threshold, action)
    if sum(p.segments for p in prepared) <= INLINE_SENTENCES:
        return judge(*args)
    return await asyncio.get_running_loop().run_in_executor(pool, judge, *args)
