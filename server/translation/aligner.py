"""The aligner graph of a translation model directory (``aligner.onnx``, issue 34): the
cross-attention of finished translations, for word alignments.

The step decoder never computes attention probabilities (its fused kernels return only the
attended values), so a request that asks for alignments runs one more, teacher-forced pass
per finished sentence: source ids and the whole output in, every decoder layer's
cross-attention out (``contract.graph_io``). The layer read is the model's
``extra.alignment.layer`` (model.json), else the second to last: the last layers of a
decoder attend to what the next word needs, the layers before them to the word being
translated (Garg et al. 2019 found the penultimate layer the best aligner of a 6-layer
Transformer; ``benchmarks/alignment_aer.py`` measures every layer of the bundled translator).
Heads are averaged: single heads align worse on the gold set and no head is named in advance.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from attnserve.contract.manifest import Manifest

log = logging.getLogger(__name__)

ROWS_PER_RUN = 16  # sentences per aligner run: padding a long document's sentences to one length costs more


def alignment_layer(manifest: Manifest) -> int:
    """The decoder layer whose cross-attention aligns (see the module docstring)."""
    layers = int(manifest.config["decoder_layers"])
    chosen = (manifest.extra.get("alignment") or {}).get("layer")
    if isinstance(chosen, int) and not isinstance(chosen, bool) and 0 <= chosen < layers:
        return chosen
    return max(0, layers - 2)


class Aligner:
    """Runs ``aligner.onnx``: (source ids, decoder inputs) pairs -> the chosen layer's
    head-averaged cross-attention of each, (T, S) float32."""

    def __init__(self, session: ort.InferenceSession, manifest: Manifest) -> None:
        self.session = session
        self.io = manifest.aligner_io()
        self.layer = alignment_layer(manifest)
        assert manifest.tokenizer is not None, "a translation manifest has a tokenizer"
        self.pad_id = manifest.tokenizer.pad_id
        self.start_id = manifest.tokenizer.start_id

    def decoder_inputs(self, hidden_prefix: Sequence[int], token_ids: Sequence[int]) -> list[int]:
        """The teacher-forced decoder inputs of an output: the start token, the hidden prefix,
        the output without its last token; row ``len(hidden_prefix) + k`` generated token k."""
        return [self.start_id, *hidden_prefix, *token_ids][:-1] if token_ids else [self.start_id, *hidden_prefix]

    def attention(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[np.ndarray]:
        """For each (source ids, decoder inputs): the (T, S) attention, rows summing to 1. Runs of
        at most ROWS_PER_RUN pairs of like lengths (sorted first), so little padding is computed."""
        order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][0]), len(pairs[i][1])))
        out: list[np.ndarray] = [np.zeros(0)] * len(pairs)
        for at in range(0, len(order), ROWS_PER_RUN):
            run = order[at : at + ROWS_PER_RUN]
            for i, weights in zip(run, self._run([pairs[i] for i in run])):
                out[i] = weights
        return out

    def _run(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[np.ndarray]:
        B = len(pairs)
        L, T = max(len(s) for s, _ in pairs), max(len(t) for _, t in pairs)
        src = np.full((B, L), self.pad_id, dtype=np.int64)  # (B, L)
        tgt = np.full((B, T), self.pad_id, dtype=np.int64)  # (B, T)
        src_mask, tgt_mask = np.zeros((B, L), dtype=np.int32), np.zeros((B, T), dtype=np.int32)
        for row, (s, t) in enumerate(pairs):
            src[row, : len(s)], src_mask[row, : len(s)] = s, 1
            tgt[row, : len(t)], tgt_mask[row, : len(t)] = t, 1
        io = self.io
        feeds = {io.src_ids: src, io.src_mask: src_mask, io.tgt_ids: tgt, io.tgt_mask: tgt_mask}
        (weights,) = self.session.run([io.cross_attention], feeds)  # (B, N, H, T, L)
        layer = weights[:, self.layer].mean(axis=1)  # (B, T, L)
        return [layer[row, : len(t), : len(s)] for row, (s, t) in enumerate(pairs)]
