"""The engine's settings, per-request decoding options and results (the doors map their
messages onto these; the translation service, ``server/service``, calls the engine)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from .terms import Constraint

BATCHING = ("continuous", "static")
STEP_BUCKETS = ("off", "on", "cuda-graphs")  # see EngineSettings.step_buckets


@dataclass(frozen=True)
class EngineSettings:
    max_active_sequences: int = 64  # rows in the decode batch (each beam is one row)
    max_tokens_in_flight: int = 32768  # sum over admitted rows of (source tokens + max new tokens)
    max_queue_size: int = 256  # texts waiting for admission; beyond -> Overloaded
    max_beam_size: int = 8
    # KV-cache bytes admitted jobs may reserve together (rows x (source + max new tokens) x
    # bytes per token of self and cross K/V, fp32); 0 = bounded by max_tokens_in_flight only.
    max_cache_bytes: int = 0
    # "continuous": queued texts join the running batch at the next step boundary (Orca);
    # "static": only once every row of the running batch has finished, finished rows leaving
    # at once (about twice the time to first token; more tokens/s at saturation on CPU only with
    # the left-padded cache; the baseline benchmarks/server_translation.py compares with).
    batching: str = "continuous"
    # A stream passes on its tokens at most this often (ms): the first and the last at once,
    # those in between gathered into one event; 0 = one event per token.
    stream_interval_ms: float = 0.0
    # An in-place decoder's steps at fixed batch sizes (1, 2, 4, ... max_active_sequences) into
    # persistent buffers (buckets.py): "on"; "cuda-graphs" also replays each size's step as a CUDA
    # graph where the decoder session has them. Off by default: padding rows cost compute on the
    # CPU, and on an H200 CUDA graphs made a step 1.5-1.9x faster on mt-small but slower at
    # opus-mt's shape at batch 32 (benchmarks/README.md).
    step_buckets: str = "off"

    def __post_init__(self) -> None:
        for name in (
            "max_active_sequences",
            "max_tokens_in_flight",
            "max_queue_size",
            "max_beam_size",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"EngineSettings.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_cache_bytes < 0:
            raise ValueError(f"EngineSettings.max_cache_bytes must be >= 0 (0 = no limit), got {self.max_cache_bytes}")
        if self.stream_interval_ms < 0:
            raise ValueError(f"EngineSettings.stream_interval_ms must be >= 0, got {self.stream_interval_ms}")
        if self.batching not in BATCHING:
            raise ValueError(f"EngineSettings.batching must be one of {', '.join(BATCHING)}, got {self.batching!r}")
        if self.step_buckets not in STEP_BUCKETS:
            choices = ", ".join(STEP_BUCKETS)
            raise ValueError(f"EngineSettings.step_buckets must be one of {choices}, got {self.step_buckets!r}")


@dataclass(frozen=True)
class DecodeOptions:
    beam_size: int = 1  # 1 = greedy (or sampling when temperature > 0)
    num_hypotheses: int = 1  # 1..beam_size
    length_penalty: float = 1.0  # score = logprob / len(tokens) ** length_penalty (models/decoding.py)
    max_new_tokens: int = 0  # 0 = the model's limits.max_target_len; above it -> InvalidRequest
    temperature: float = 0.0  # > 0 turns on sampling (then beam_size must be 1)
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off; must be in (0, 1]
    seed: int | None = None  # sampling seed (per text); None = nondeterministic
    # Greedy and sampling skip the log-softmax when False (logprob and score are then 0.0).
    # Beam search always needs the scores.
    return_scores: bool = True
    # Token ids every hypothesis starts with, forced before any choice by greedy, beam search
    # and sampling (a target-language token such as M2M100's ``__de__``, a user's target
    # prefix). They are part of the hypothesis. The first ``hide_prefix`` of them add 0 to
    # logprob and score (as transformers' forced_bos_token_id counts a language token), the
    # others the model's log-probability (as CTranslate2 counts a target prefix); the reference
    # decoder in models/decoding.py scores them alike. They count against max_new_tokens (they
    # take decoder positions), and beam search expands into beams only after the last one.
    prefix_ids: tuple[int, ...] = ()
    # How many leading prefix ids are not returned: left out of token_ids, the text and the
    # stream (the language token). 0..len(prefix_ids).
    hide_prefix: int = 0
    # Token ids put before every source text's own (M2M100 / NLLB's source-language token,
    # multilingual opus-mt's ``>>fra<<``; server/service/languages.py fills them).
    source_prefix_ids: tuple[int, ...] = ()
    # Glossary terms the translation must contain (``constraints.py``): one per term found in
    # the sentence, with how often it occurs there. Empty: the search is unconstrained.
    constraints: tuple[Constraint, ...] = ()
    # Keep each text's encoder output for its result (``TranslationResult.memory``): the word
    # aligner reads it instead of encoding the source again (server/translation/aligner.py).
    return_memory: bool = False
    # Keep the alignment-layer cross-attention of each step (``TranslationResult.attention``) where
    # the decoder returns it (``step_attention``) and the search has one row (greedy, sampling):
    # the word aligner then has nothing to run for the text.
    return_attention: bool = False

    @property
    def sampling(self) -> bool:
        return self.temperature > 0.0

    def for_alignment(self, steps: bool) -> DecodeOptions:
        """These options keeping what word alignments read: each step's attention where the
        decoder returns it (``steps``), else the encoder's output for the aligner graph."""
        return dataclasses.replace(self, return_attention=steps, return_memory=not steps)


@dataclass(frozen=True)
class Hypothesis:
    text: str  # tokenizer.decode(token_ids, skip_special_tokens=True)
    token_ids: list[int]  # the hypothesis's ids after its hidden prefix, no start token; ends with eos on "eos"
    logprob: float
    score: float
    finish_reason: str  # "eos" | "length"
    # The ids the decoder was fed, where glossary terms went through surrogates that token_ids has
    # swapped for their targets (the aligner reads these: server/service/alignments.py); else empty.
    written_ids: list[int] = field(default_factory=list)
    # With DecodeOptions.return_attention, where the engine could keep it: the alignment-layer
    # cross-attention of the steps that chose this hypothesis's ids (its hidden prefix included),
    # (steps, source_tokens) float32, row k the step that chose its k-th id; rows sum to 1. Else None.
    attention: np.ndarray | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class TranslationResult:
    hypotheses: list[Hypothesis]  # best first
    source_tokens: int
    queue_ms: float  # submitted -> admitted into the decode batch
    encode_ms: float
    decode_ms: float  # admitted -> finished
    first_token_ms: float  # submitted -> first generated token
    # With DecodeOptions.return_memory: the encoder's output for the source ids (source prefix
    # included), (source_tokens, d_model) float32; else None.
    memory: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def attention(self) -> np.ndarray | None:
        """The best hypothesis's kept attention (``Hypothesis.attention``), or None."""
        return self.hypotheses[0].attention if self.hypotheses else None


@dataclass(frozen=True)
class StreamEvent:
    delta: str  # new text since the previous event ("" while a multi-token piece is incomplete)
    token_ids: tuple[int, ...]  # the tokens generated since the previous event (hidden prefix left out)
    finish_reason: str | None  # set on the last event only ("eos" | "length")
    queue_ms: float = 0.0  # the last event only: submitted -> admitted into the decode batch
    written_ids: tuple[int, ...] = ()  # the last event only: as Hypothesis.written_ids, for the whole stream
    # the last event only: as TranslationResult.memory and .attention
    memory: np.ndarray | None = field(default=None, repr=False, compare=False)
    attention: np.ndarray | None = field(default=None, repr=False, compare=False)
    # the last event only: the language a pivoted stream went through (set by the translation service)
    pivot_language: str = ""
    # the last event only: the whole result, as a unary call returns it (hypotheses with their scores,
    # timings, what alignments read): draining a stream gives what ``translate`` gives
    result: TranslationResult | None = field(default=None, repr=False, compare=False)
    index: int = 0  # the text of the request this event is of (an engine stream of several texts)
