"""The aligner graph of a translation model directory (``aligner.onnx``): the
cross-attention of finished translations, for word alignments.

A fused export's step decoder returns each step's attention at the layer read (its
``step_attention`` output), which the engine keeps for the texts that ask
(``DecodeOptions.return_attention``, :mod:`.step_attention`); what no step kept (decoders
without that output: older exports, ``--device cuda``, attention not fused) runs one
more, teacher-forced pass of the decoder per finished sentence here: the encoder's output and the whole output in, the
decoder layers' cross-attention out (``contract.graph_io``). The encoder's output is the one
the engine kept from decoding the sentence (``DecodeOptions.return_memory``), so the source is
not encoded again; a sentence without it (a stream's) is encoded here with the model's encoder
graph. An aligner graph that takes source ids (the older layout) encodes them itself and is run
that way.

The layer read is the model's ``extra.alignment.layer`` (model.json), else the second to last
(the aligner graph computes the decoder layers up to it, no further):
the last layers of a decoder attend to what the next word needs, the layers before them to the
word being translated (Garg et al. 2019 found the penultimate layer the best aligner of a
6-layer Transformer; ``benchmarks/alignment_aer.py`` measures every layer of the bundled
translator). Heads are averaged: single heads align worse on the gold set and no head is named
in advance.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from attnserve.contract.graph_io import alignment_layer as contract_alignment_layer
from attnserve.contract.manifest import Manifest

log = logging.getLogger(__name__)

ROWS_PER_RUN = 16  # sentences per aligner run: padding a long document's sentences to one length costs more

Pair = tuple[Sequence[int], Sequence[int], "np.ndarray | None"]  # source ids, decoder inputs, memory (S, C)


def alignment_layer(manifest: Manifest) -> int:
    """The decoder layer whose cross-attention aligns (see the module docstring)."""
    return contract_alignment_layer(manifest.config, manifest.extra)


class Aligner:
    """Runs ``aligner.onnx``: (source ids, decoder inputs, the encoder's output or None) triples
    -> the chosen layer's head-averaged cross-attention of each, (T, S) float32. ``encoder``: the
    model's encoder session, for sources given without their encoder output."""

    def __init__(
        self, session: ort.InferenceSession, manifest: Manifest, encoder: ort.InferenceSession | None = None
    ) -> None:
        self.session, self.encoder = session, encoder
        self.io = manifest.aligner_io()
        self.encoder_io = manifest.encoder_io()
        self.layer = alignment_layer(manifest)
        computed = session.get_outputs()[0].shape[1]  # the layers the graph computes (up to the one read)
        if isinstance(computed, int) and computed <= self.layer:
            raise ValueError(
                f"aligner.onnx computes {computed} decoder layers; alignments read layer {self.layer} "
                "(model.json extra.alignment.layer): re-export the model"
            )
        assert manifest.tokenizer is not None, "a translation manifest has a tokenizer"
        self.pad_id = manifest.tokenizer.pad_id
        self.start_id = manifest.tokenizer.start_id
        self.d_model = int(manifest.config["d_model"])

    def decoder_inputs(self, hidden_prefix: Sequence[int], token_ids: Sequence[int]) -> list[int]:
        """The teacher-forced decoder inputs of an output: the start token, the hidden prefix,
        the output without its last token; row ``len(hidden_prefix) + k`` generated token k."""
        return [self.start_id, *hidden_prefix, *token_ids][:-1] if token_ids else [self.start_id, *hidden_prefix]

    def attention(self, pairs: Sequence[Pair]) -> list[np.ndarray]:
        """For each (source ids, decoder inputs, memory): the (T, S) attention, rows summing to 1.
        ``memory``: the encoder's output for those source ids, (S, C) float32, or None. Runs of at
        most ROWS_PER_RUN pairs of like lengths (sorted first), so little padding is computed."""
        order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][0]), len(pairs[i][1])))
        out: list[np.ndarray] = [np.zeros(0)] * len(pairs)
        for at in range(0, len(order), ROWS_PER_RUN):
            run = order[at : at + ROWS_PER_RUN]
            for i, weights in zip(run, self._run([pairs[i] for i in run])):
                out[i] = weights
        return out

    def _run(self, pairs: Sequence[Pair]) -> list[np.ndarray]:
        return [weights[self.layer].mean(axis=0) for weights in self.every_layer(pairs)]  # (T, S) each

    def every_layer(self, pairs: Sequence[Pair]) -> list[np.ndarray]:
        """Every decoder layer's and head's attention of each pair, (N, H, T, S), in one run."""
        B = len(pairs)
        L, T = max(len(s) for s, _, _ in pairs), max(len(t) for _, t, _ in pairs)
        src = np.full((B, L), self.pad_id, dtype=np.int64)  # (B, L)
        tgt = np.full((B, T), self.pad_id, dtype=np.int64)  # (B, T)
        src_mask, tgt_mask = np.zeros((B, L), dtype=np.int32), np.zeros((B, T), dtype=np.int32)
        for row, (s, t, _) in enumerate(pairs):
            src[row, : len(s)], src_mask[row, : len(s)] = s, 1
            tgt[row, : len(t)], tgt_mask[row, : len(t)] = t, 1
        io = self.io
        source = src if io.encodes else self._memory(pairs, src, src_mask)
        feeds = {io.source: source, io.src_mask: src_mask, io.tgt_ids: tgt, io.tgt_mask: tgt_mask}
        (weights,) = self.session.run([io.cross_attention], feeds)  # (B, N, H, T, L)
        return [weights[row, :, :, : len(t), : len(s)] for row, (s, t, _) in enumerate(pairs)]

    def _memory(self, pairs: Sequence[Pair], src: np.ndarray, src_mask: np.ndarray) -> np.ndarray:
        """(B, L, C): the rows' encoder outputs, right-padded; those not given, from the encoder."""
        B, L = src.shape
        memory = np.zeros((B, L, self.d_model), dtype=np.float32)
        missing = []
        for row, (s, _, m) in enumerate(pairs):
            if m is not None and m.shape == (len(s), self.d_model):
                memory[row, : len(s)] = m
                continue
            if m is not None:  # not these ids' output: a caller's mistake, not the user's; encoded again
                log.warning("aligner: encoder output of shape %s for %d source ids, encoding them", m.shape, len(s))
            missing.append(row)
        if missing:
            if self.encoder is None:
                raise RuntimeError("the aligner was given no encoder output and has no encoder session")
            io = self.encoder_io
            (encoded,) = self.encoder.run([io.memory], {io.src_ids: src[missing], io.src_mask: src_mask[missing]})
            memory[missing] = encoded  # (n, L, C)
        return memory
