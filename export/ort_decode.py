"""Greedy decoding over ``encoder.onnx`` / ``decoder.onnx`` with onnxruntime (no torch).

Follows the I/O contract of :mod:`attnserve.contract.graph_io` and the rules of
:mod:`attnserve.models.decoding`: the start token opens every row, the manifest's
``never_generate_ids`` (pad, and start unless it is the end token) are never chosen,
argmax (ties to the lowest id), a row ends at its end token, the
cache grows by one position per step (P = 0 on the first). ``verify`` uses it to check
that the exported graphs decode the same tokens as PyTorch.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from attnserve.contract.graph_io import SCREEN_ARGMAX, SCREEN_IDS, SCREEN_VOCAB, screen_flag
from attnserve.contract.manifest import Manifest
from attnserve.contract.references import feed_for, run_in_place


def run_graph(session: ort.InferenceSession, manifest: Manifest, graph: str, arrays: dict[str, np.ndarray]) -> list:
    """All outputs of ``graph`` on ``arrays``; an in-place decoder runs as the server runs it, its
    past and present bound to one buffer per layer and kind (:func:`run_in_place`)."""
    if graph == "decoder" and manifest.decoder_io().in_place:
        io = manifest.decoder_io()
        return run_in_place(session, arrays, dict(zip(io.past, io.present)))
    return session.run(None, feed_for(session, arrays))


class OrtGreedy:
    """Greedy decoding of a batch over the ``encoder``/``decoder`` sessions of a translation
    model directory, with the names, token ids and shapes of its ``manifest``."""

    def __init__(
        self, encoder: ort.InferenceSession, decoder: ort.InferenceSession, manifest: Manifest, screen: bool = False
    ) -> None:
        """``screen``: feed the decoder's screen flag true (only the argmax is read here):
        ``screen_argmax`` (the argmax comes as ``screen_ids``) or ``screen_vocab`` (in the logits)."""
        self.encoder, self.decoder = encoder, decoder
        flag = screen_flag(i.name for i in decoder.get_overridable_initializers()) or SCREEN_VOCAB
        self.screen = {flag: np.array(True)} if screen else {}
        self.screen_ids = screen and flag == SCREEN_ARGMAX  # the screened argmax comes as an output
        self.outputs = [o.name for o in decoder.get_outputs()]  # in the session's order: run_in_place's
        tok, cfg = manifest.tokenizer, manifest.config
        self.pad_id, self.bos_id, self.eos_id = tok.pad_id, tok.start_id, tok.eos_id
        self.never = tok.never_generate
        self.num_heads, self.head_dim = int(cfg["num_heads"]), int(cfg["d_model"]) // int(cfg["num_heads"])
        self.enc, self.dec = manifest.encoder_io(), manifest.decoder_io()

    def _steps(self, src_ids: np.ndarray, steps: int, forced: np.ndarray | None, prefix: tuple[int, ...] = ()):
        """Yield (step, choice (B,) int64); feeds ``forced[:, step]`` instead of the choice when given.
        ``prefix``: ids chosen first in every row, whatever the logits say (a forced prefix)."""
        B = src_ids.shape[0]
        src_mask = (src_ids != self.pad_id).astype(np.int32)  # (B, L)
        enc, dec = self.enc, self.dec
        self.attention: list[np.ndarray] = []  # the decoder's step_attention of each step, where it returns it
        feeds = feed_for(self.encoder, {enc.src_ids: src_ids, enc.src_mask: src_mask})
        cross = dict(zip(dec.cross, self.encoder.run(list(enc.cross), feeds)))  # (B, H, L, D) each
        capacity = steps if dec.in_place else 0  # in place: one buffer for every step
        cache = {n: np.zeros((B, self.num_heads, capacity, self.head_dim), np.float32) for n in dec.past}
        tokens = np.full((B, 1), self.bos_id, dtype=np.int64)  # (B, 1)
        for step in range(steps):
            arrays = {
                dec.input_ids: tokens,
                dec.positions: np.full((B, 1), step, dtype=np.int64),  # (B, 1)
                dec.src_mask: src_mask,
                **cache,
                **cross,
                **self.screen,
            }
            if dec.in_place:  # every row holds `step` tokens in columns 0..step - 1
                arrays[dec.seqlens] = np.full(B, step, dtype=np.int32)  # (B,)
                arrays[dec.total_length] = np.array(step + 1, dtype=np.int32)
                out = dict(zip(self.outputs, run_in_place(self.decoder, arrays, dict(zip(dec.past, dec.present)))))
            else:
                arrays[dec.self_mask] = np.ones((B, step + 1), dtype=np.int32)  # (B, P + 1)
                names = [*dec.outputs, SCREEN_IDS] if self.screen_ids else dec.outputs
                out = dict(zip(names, self.decoder.run(names, feed_for(self.decoder, arrays))))
            if self.screen_ids:
                choice = out[SCREEN_IDS]  # (B,) the decoder's own argmax, never-generated ids excluded
            else:
                logits = out[dec.logits].astype(np.float32)  # (B, V)
                logits[:, self.never] = -np.inf  # never generated (models/decoding.py)
                choice = logits.argmax(axis=-1)  # (B,): first maximum = lowest id on ties
            if step < len(prefix):
                choice = np.full(B, prefix[step], dtype=np.int64)  # (B,)
            if dec.attention:
                self.attention.append(np.asarray(out[dec.attention], np.float32)[:, -1])  # (B, L)
            yield step, choice
            cache = {past: out[present] for past, present in zip(dec.past, dec.present)}
            following = choice if forced is None else np.where(forced[:, step] >= 0, forced[:, step], self.eos_id)
            tokens = following.astype(np.int64)[:, None]  # (B, 1)

    def decode(self, src_ids: np.ndarray, max_new_tokens: int, prefix: tuple[int, ...] = ()) -> list[list[int]]:
        """src_ids: (B, L) int64, right-padded -> generated ids per row (no start token, eos last if generated);
        ``prefix``: ids every row starts with (forced, part of the output)."""
        rows: list[list[int]] = [[] for _ in range(src_ids.shape[0])]
        done = [False] * len(rows)
        for _, choice in self._steps(src_ids, max_new_tokens, None, tuple(prefix)):
            for b, tok in enumerate(choice.tolist()):
                if not done[b]:
                    rows[b].append(tok)
                    done[b] = tok == self.eos_id
            if all(done):
                break
        return rows

    def step_attention(self) -> np.ndarray | None:
        """After a decode: the decoder's ``step_attention`` of every step, (B, T, L), or None
        when the decoder does not return it."""
        return np.stack(self.attention, axis=1) if self.attention else None

    def forced_choices(self, src_ids: np.ndarray, reference: np.ndarray) -> np.ndarray:
        """Teacher forcing along ``reference`` (B, T) int64 (-1 = past the row's end): the argmax
        at every step (B, T). Compared with ``reference`` it gives the top-1 agreement."""
        choices = [c for _, c in self._steps(src_ids, reference.shape[1], reference)]
        return np.stack(choices, axis=1)  # (B, T)
