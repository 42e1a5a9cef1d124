"""What the client returns: typed results of ``attnserve.v1`` replies, and their conversion."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnserve.protos.attnserve.v1 import inference_pb2 as pb

FINISH_REASONS = {pb.FINISH_REASON_EOS: "eos", pb.FINISH_REASON_LENGTH: "length"}
KINDS = {pb.MODEL_KIND_TRANSLATION: "translation", pb.MODEL_KIND_IMAGE_CLASSIFICATION: "image-classification"}


@dataclass(frozen=True)
class Hypothesis:
    text: str
    token_ids: list[int] = field(default_factory=list)  # when asked for (return_token_ids)
    score: float | None = None  # when asked for (return_scores)
    logprob: float | None = None
    finish_reason: str = ""  # "eos" | "length"
    alignments: list[Alignment] = field(default_factory=list)  # per sentence, when asked for (alignments=True)


@dataclass(frozen=True)
class Alignment:
    """One sentence's word alignment: ``links`` (source word, target word) pairs, words the
    whitespace-separated tokens of ``source`` and ``target``; ``attention`` the word-level
    cross-attention, one row per target word over the source words."""

    source: str
    target: str
    links: list[tuple[int, int]]
    attention: list[list[float]]

    def pharaoh(self) -> str:
        """``"0-0 1-2 ..."``, as fast_align prints it."""
        return " ".join(f"{i}-{j}" for i, j in self.links)


@dataclass(frozen=True)
class Quality:
    """How likely the best translation is right, 0..1: the text's lowest sentence score."""

    score: float
    sentences: list[float]  # per sentence, in order
    low: bool  # below the server's --min-quality

    @property
    def likely_wrong(self) -> bool:
        return self.score < 0.5


@dataclass(frozen=True)
class Translation:
    hypotheses: list[Hypothesis]  # best first
    source_tokens: int
    timing: dict[str, float]  # queue_ms, encode_ms, decode_ms, first_token_ms
    pivot_language: str = ""  # the pair had no model: translated source -> this -> target ("" = directly)
    quality: Quality | None = None  # when asked for (quality=True) or the server has --min-quality

    @property
    def text(self) -> str:
        return self.hypotheses[0].text


@dataclass(frozen=True)
class Chunk:
    delta: str
    token_ids: list[int]
    finish_reason: str  # "" until the last chunk
    pivot_language: str = ""  # the last chunk: the pair had no model, translated through this language


@dataclass(frozen=True)
class TranslatedFile:
    content: bytes
    filename: str  # the translation's name as the server gives it: report.docx into German is report.de.docx
    media_type: str
    model: str
    characters: int
    sentences: int
    source_language: str
    target_language: str
    detected_language: str = ""


@dataclass(frozen=True)
class Label:
    label: str
    index: int
    probability: float


@dataclass(frozen=True)
class Classification:
    labels: list[Label]  # most probable first
    batch_size: int
    timing: dict[str, float]  # preprocess_ms, queue_ms, inference_ms


@dataclass(frozen=True)
class ModelSummary:
    name: str
    kind: str
    ready: bool
    error: str
    provider: str
    precision: str
    attention: str
    labels: list[str]
    limits: dict[str, int]
    config: dict[str, str]
    domain: str = ""  # what the model was trained for ("" = not stated)
    source_languages: list[str] = field(default_factory=list)  # translation; empty: one fixed pair
    target_languages: list[str] = field(default_factory=list)
    family: str = ""  # attnserve | marian | m2m_100
    loaded: bool = False  # in memory now; a ready model that is not loads on its first request


@dataclass(frozen=True)
class LanguagePair:
    """A pair the server translates: by one model, or by two through ``pivot_language``."""

    source: str
    target: str
    models: list[str]
    pivot_language: str = ""


def timing_of(msg: Any) -> dict[str, float]:
    return {f.name: getattr(msg, f.name) for f in msg.DESCRIPTOR.fields}


def summary_of(info: pb.ModelInfo) -> ModelSummary:
    limits = {
        f.name: getattr(info.limits, f.name) for f in info.limits.DESCRIPTOR.fields if getattr(info.limits, f.name)
    }
    return ModelSummary(
        info.name,
        KINDS.get(info.kind, "unknown"),
        info.ready,
        info.error,
        info.provider,
        info.precision,
        info.attention,
        list(info.labels),
        limits,
        dict(info.config),
        info.domain,
        list(info.source_languages),
        list(info.target_languages),
        info.family,
        info.loaded,
    )


def alignment_of(a: pb.SentenceAlignment) -> Alignment:
    weights = np.asarray(a.attention, dtype=np.float32).reshape(a.target_words, a.source_words)
    return Alignment(a.source, a.target, [(link.source_word, link.target_word) for link in a.links], weights.tolist())


def translation_of(t: pb.Translation) -> Translation:
    hyps = [
        Hypothesis(
            h.text,
            list(h.token_ids),
            h.score if h.HasField("score") else None,
            h.logprob if h.HasField("logprob") else None,
            FINISH_REASONS.get(h.finish_reason, ""),
            [alignment_of(a) for a in h.alignments],
        )
        for h in t.hypotheses
    ]
    quality = None
    if t.HasField("quality"):
        quality = Quality(t.quality.score, list(t.quality.sentences), t.quality.low)
    return Translation(hyps, t.source_tokens, timing_of(t.timing), quality=quality)
