"""Input and output names of the exported graphs: the one place they are spelled.

translation ``encoder.onnx``
    in:  src_ids (B, L) int64, src_mask (B, L) int32 (1 = token)
    out: memory (B, L, C) float32; cross_key_{i}, cross_value_{i} (B, H, L, D) per decoder layer

translation ``decoder.onnx`` (one graph for every step; P = 0 on the first)
    in:  input_ids (B, S) int64, positions (B, S) int64, self_mask (B, P + S) int32,
         src_mask (B, L) int32, past_key_{i}, past_value_{i} (B, H, P, D),
         cross_key_{i}, cross_value_{i} (B, H, L, D)
    out: logits (B, V) float32 of the last position; present_key_{i}, present_value_{i} (B, H, P + S, D);
         optionally last, step_attention (B, S, L) float32: the cross-attention probabilities of
         the layer alignments read (:func:`alignment_layer`), heads averaged, each new position's
         row summing to 1 over the row's source tokens (fused exports for the CPU return it;
         alignments then need no aligner graph)

translation ``decoder.onnx``, ``kv_cache: in-place`` (:data:`~.kinds.IN_PLACE`; S = 1)
    in:  input_ids (B, 1) int64, positions (B, 1) int64, src_mask (B, L) int32,
         past_key_{i}, past_value_{i} (B, H, capacity, D) (row r's tokens in columns 0..seqlens_k[r] - 1),
         cross_key_{i}, cross_value_{i} (B, H, L, D), seqlens_k (B,) int32 (each row's cached
         tokens), total_sequence_length () int32 (max(seqlens_k) + 1 <= capacity)
    out: logits (B, V) float32; present_key_{i}, present_value_{i} (B, H, capacity, D): the same
         buffer when bound to the past's ``OrtValue`` (io binding), the new token at column seqlens_k[r];
         optionally last, step_attention (B, 1, L) float32, as above

translation ``decoder.onnx`` of an fp32 CPU export (``extra.screen_vocab`` in model.json)
    in, besides the above and not listed in model.json: screen_argmax () bool, an overridable
    initializer (default false; onnxruntime lists it among ``get_overridable_initializers``, not
    ``get_inputs``)
    out, besides the above and not listed in model.json, last: screen_ids (B,) int64. Fed true, it
    is each row's argmax over the ids but ``never_ids`` and ``logits`` is (B, 1), that logit; fed
    false, ``logits`` is (B, V) and screen_ids is empty (export/screen_vocab.py). A decoder whose
    flag is named screen_vocab instead has no screen_ids: fed true, its (B, V) logits are -inf but
    on a few candidates, whose argmax is the full projection's (a server that knows only that
    name never feeds screen_argmax, so it reads full logits from a decoder that has it)

translation ``aligner.onnx`` (optional: word alignments)
    in:  memory (B, L, C) float32 (the encoder's, right-padded), src_mask (B, L) int32,
         tgt_ids (B, T) int64 (start token + output but its last token), tgt_mask (B, T) int32
         (1 = token)
    out: cross_attention (B, N, H, T, L) float32: the cross-attention probabilities of the
         decoder layers up to the one alignments read (:func:`alignment_layer`; N = that
         layer + 1), row t the step that generated output token t
    Directories exported before the aligner took the encoder's output have src_ids (B, L) int64
    as the first input instead of memory (the aligner encodes the source itself) and every
    decoder layer in its output; they load.

image-classification ``model.onnx``
    in:  pixels (B, C_in, H, W) float32, normalised
    out: logits (B, num_classes) float32

The exporter names the graphs with :func:`expected_io` and lists the names in
``model.json``; the manifest loader refuses a directory whose lists differ from these
(for its kind and decoder layer count); the server reads them back from the manifest
(:meth:`EncoderIO.from_lists` and friends), so the positions below are the contract and
a rename happens here only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .kinds import IMAGE_CLASSIFICATION, IN_PLACE, LEFT_PADDED, TRANSLATION

KV = ("key", "value")
STEP_ATTENTION = "step_attention"  # the decoder's optional last output (module docstring)
SCREEN_VOCAB = "screen_vocab"  # the decoder's optional bool input with a default (module docstring)
SCREEN_ARGMAX = "screen_argmax"  # the flag of a decoder that returns SCREEN_IDS (module docstring)
SCREEN_IDS = "screen_ids"  # the screened decoder's last output: each row's argmax when screened


def screen_flag(overridable: Iterable[str]) -> str | None:
    """The screen flag among a decoder session's overridable initializers' names (module
    docstring): :data:`SCREEN_ARGMAX` where it has one, else :data:`SCREEN_VOCAB`, else None."""
    names = set(overridable)
    return next((flag for flag in (SCREEN_ARGMAX, SCREEN_VOCAB) if flag in names), None)


def alignment_layer(config: dict[str, Any], extra: dict[str, Any]) -> int:
    """The decoder layer whose cross-attention word alignments read: ``extra["alignment"]["layer"]``
    (model.json) where it names one, else the second to last (``server/translation/aligner.py``
    says why)."""
    layers = int(config["decoder_layers"])
    chosen = (extra.get("alignment") or {}).get("layer")
    if isinstance(chosen, int) and not isinstance(chosen, bool) and 0 <= chosen < layers:
        return chosen
    return max(0, layers - 2)


def per_layer(prefix: str, num_layers: int) -> tuple[str, ...]:
    """``prefix_key_0, prefix_value_0, prefix_key_1, ...``: 2 names per layer, key first."""
    return tuple(f"{prefix}_{kind}_{i}" for i in range(num_layers) for kind in KV)


@dataclass(frozen=True)
class EncoderIO:
    src_ids: str
    src_mask: str
    memory: str
    cross: tuple[str, ...]  # 2 per decoder layer (key, value), layer 0 first

    @classmethod
    def standard(cls, num_layers: int) -> EncoderIO:
        return cls("src_ids", "src_mask", "memory", per_layer("cross", num_layers))

    @classmethod
    def from_lists(cls, inputs: list[str], outputs: list[str]) -> EncoderIO:
        """The names as ``model.json`` lists them (validated: see the module docstring)."""
        return cls(inputs[0], inputs[1], outputs[0], tuple(outputs[1:]))

    @property
    def inputs(self) -> list[str]:
        return [self.src_ids, self.src_mask]

    @property
    def outputs(self) -> list[str]:
        return [self.memory, *self.cross]


@dataclass(frozen=True)
class DecoderIO:
    input_ids: str
    positions: str
    self_mask: str  # "" in the in-place layout (each row's length is its seqlens_k)
    src_mask: str
    past: tuple[str, ...]  # 2 per layer (key, value)
    cross: tuple[str, ...]  # 2 per layer, the encoder's ``cross`` outputs
    logits: str
    present: tuple[str, ...]  # 2 per layer, fed back as ``past`` on the next step
    seqlens: str = ""  # in-place layout: cached tokens per row (B,) int32
    total_length: str = ""  # in-place layout: max(seqlens) + 1, a scalar int32
    attention: str = ""  # the step's alignment-layer cross-attention (B, S, L), where the graph returns it

    @property
    def in_place(self) -> bool:
        return bool(self.seqlens)

    def with_attention(self) -> DecoderIO:
        """The same names with the ``step_attention`` output last (a fused export's decoder)."""
        return dataclasses.replace(self, attention=STEP_ATTENTION)

    @classmethod
    def standard(cls, num_layers: int, kv_cache: str = LEFT_PADDED) -> DecoderIO:
        in_place = kv_cache == IN_PLACE
        return cls(
            "input_ids",
            "positions",
            "" if in_place else "self_mask",
            "src_mask",
            per_layer("past", num_layers),
            per_layer("cross", num_layers),
            "logits",
            per_layer("present", num_layers),
            "seqlens_k" if in_place else "",
            "total_sequence_length" if in_place else "",
        )

    @classmethod
    def from_lists(cls, inputs: list[str], outputs: list[str], kv_cache: str = LEFT_PADDED) -> DecoderIO:
        """The names as ``model.json`` lists them (validated: see the module docstring)."""
        attention = outputs[-1] if outputs and outputs[-1] == STEP_ATTENTION else ""
        outputs = outputs[:-1] if attention else outputs
        n2 = len(outputs) - 1  # 2 per layer
        if kv_cache == IN_PLACE:
            ids, positions, src_mask = inputs[:3]
            past, cross = tuple(inputs[3 : 3 + n2]), tuple(inputs[3 + n2 : 3 + 2 * n2])
            seqlens, total = inputs[3 + 2 * n2 : 5 + 2 * n2]
            present = tuple(outputs[1:])
            return cls(ids, positions, "", src_mask, past, cross, outputs[0], present, seqlens, total, attention)
        past, cross = tuple(inputs[4 : 4 + n2]), tuple(inputs[4 + n2 :])
        return cls(*inputs[:4], past, cross, outputs[0], tuple(outputs[1:]), attention=attention)

    @property
    def inputs(self) -> list[str]:
        if self.in_place:
            return [
                self.input_ids,
                self.positions,
                self.src_mask,
                *self.past,
                *self.cross,
                self.seqlens,
                self.total_length,
            ]
        return [self.input_ids, self.positions, self.self_mask, self.src_mask, *self.past, *self.cross]

    @property
    def outputs(self) -> list[str]:
        return [self.logits, *self.present, *([self.attention] if self.attention else [])]


@dataclass(frozen=True)
class AlignerIO:
    source: str  # memory, or src_ids in an aligner that encodes the source itself (``encodes``)
    src_mask: str
    tgt_ids: str
    tgt_mask: str
    cross_attention: str
    encodes: bool = False

    @classmethod
    def standard(cls) -> AlignerIO:
        return cls("memory", "src_mask", "tgt_ids", "tgt_mask", "cross_attention")

    @classmethod
    def encoding(cls) -> AlignerIO:
        """The form before the aligner took the encoder's output: source ids in."""
        return cls("src_ids", "src_mask", "tgt_ids", "tgt_mask", "cross_attention", encodes=True)

    @classmethod
    def from_lists(cls, inputs: list[str], outputs: list[str]) -> AlignerIO:
        return cls(*inputs[:4], outputs[0], encodes=inputs[0] == cls.encoding().source)

    @property
    def inputs(self) -> list[str]:
        return [self.source, self.src_mask, self.tgt_ids, self.tgt_mask]

    @property
    def outputs(self) -> list[str]:
        return [self.cross_attention]


@dataclass(frozen=True)
class ClassifierIO:
    pixels: str
    logits: str

    @classmethod
    def standard(cls) -> ClassifierIO:
        return cls("pixels", "logits")

    @classmethod
    def from_lists(cls, inputs: list[str], outputs: list[str]) -> ClassifierIO:
        return cls(inputs[0], outputs[0])

    @property
    def inputs(self) -> list[str]:
        return [self.pixels]

    @property
    def outputs(self) -> list[str]:
        return [self.logits]


GraphIO = EncoderIO | DecoderIO | AlignerIO | ClassifierIO


def expected_io(kind: str, config: dict[str, Any], kv_cache: str = LEFT_PADDED) -> dict[str, GraphIO]:
    """The graphs of a model directory of ``kind`` by role, named as the contract says (the
    optional ones of ``kinds.OPTIONAL_GRAPHS`` included: checked where a directory has them).

    Translation needs ``config["decoder_layers"]`` (an int >= 1); ``kv_cache`` is the decoder's
    cache layout (:data:`~.kinds.KV_CACHE_LAYOUTS`).
    """
    if kind == TRANSLATION:
        n = int(config["decoder_layers"])
        return {
            "encoder": EncoderIO.standard(n),
            "decoder": DecoderIO.standard(n, kv_cache),
            "aligner": AlignerIO.standard(),
        }
    if kind == IMAGE_CLASSIFICATION:
        return {"model": ClassifierIO.standard()}
    raise ValueError(f"unknown model kind {kind!r}")
