"""Fixed-seed reference inputs and PyTorch outputs, saved with the model as ``verification.npz``.

``attnserve-export verify DIR`` replays them through onnxruntime without the PyTorch
model. Keys are ``<graph>.in.<input>`` and ``<graph>.out.<output>`` (graph and I/O
names of ``model.json``), plus for translation ``greedy.src_ids`` (B, L) int64,
``greedy.tokens`` (B, T) int64 (the reference greedy decode of :mod:`attnserve.models.decoding`,
-1 after a row's last token) and ``greedy.max_new_tokens``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnserve.contract.graph_io import AlignerIO, ClassifierIO, DecoderIO, EncoderIO
from attnserve.contract.kinds import IN_PLACE, LEFT_PADDED
from attnserve.models import TranslationTransformer, VisionTransformer, greedy_decode

from .errors import ExportError
from .graphs import AlignerGraph, DecoderGraph, EncoderGraph, example_aligner_inputs, example_translation_inputs
from .verify import VERIFICATION_FILE

VIT_IMAGES = 8  # enough for a top-1 agreement, small enough to ship (8 x 3 x 224 x 224 float32 = 4.8 MB)
GREEDY_ROWS, GREEDY_SRC_LEN, GREEDY_STEPS = 3, 9, 16


def _named(prefix: str, names: list[str], tensors) -> dict[str, np.ndarray]:
    return {f"{prefix}.{n}": t.detach().cpu().numpy() for n, t in zip(names, tensors)}


def ordinary_ids(model: TranslationTransformer) -> torch.Tensor:
    """(N,) int64: every id but pad, start, end and unknown, wherever they sit in the vocabulary
    (0..3 in ours; opus-mt puts pad last, M2M100 / NLLB start with ``<s> <pad> </s> <unk>``)."""
    cfg = model.cfg
    special = {cfg.pad_id, cfg.bos_id, cfg.eos_id, cfg.unk_id}
    ids = torch.tensor([i for i in range(cfg.vocab_size) if i not in special], dtype=torch.long)
    if not len(ids):
        raise ExportError(f"the vocabulary ({cfg.vocab_size} ids) holds only special tokens {sorted(special)}")
    return ids


def _source_batch(model: TranslationTransformer, rows: int, length: int, seed: int) -> torch.Tensor:
    """(rows, length) int64 source ids ending in eos, right-padded, rows of decreasing length."""
    cfg = model.cfg
    g = torch.Generator().manual_seed(seed)
    ordinary = ordinary_ids(model)  # (N,)
    src = ordinary[torch.randint(len(ordinary), (rows, length), generator=g)]  # (B, L)
    for row in range(rows):
        n = max(1, length - 3 * row)  # tokens in this row, eos included
        src[row, n - 1] = cfg.eos_id
        src[row, n:] = cfg.pad_id
    return src


@torch.no_grad()
def translation_reference(
    model: TranslationTransformer,
    *,
    seed: int = 0,
    max_target_len: int,
    kv_cache: str = LEFT_PADDED,
    extra: dict[str, Any] | None = None,
) -> dict[str, np.ndarray]:
    """Encoder, one decoder step with a cache, the aligner and a greedy decode. The step: P = 3,
    S = 2 with a left-padded slot (``kv_cache`` left-padded), or rows of 2, 0 and 4 cached tokens
    in a buffer written in place (in-place, :func:`in_place_reference`)."""
    model = model.eval()
    n = model.cfg.decoder_layers
    length = min(GREEDY_SRC_LEN, model.cfg.max_positions)
    src = _source_batch(model, GREEDY_ROWS, length, seed)  # (B, L)
    src_mask = (src != model.cfg.pad_id).to(torch.int32)  # (B, L)
    enc = EncoderIO.standard(n)
    data = _named("encoder.in", enc.inputs, (src, src_mask))
    data |= _named("encoder.out", enc.outputs, EncoderGraph(model)(src, src_mask))
    src_len = min(7, model.cfg.max_positions)
    if kv_cache == IN_PLACE:
        inputs, outputs = in_place_reference(model, src_len=src_len, seed=seed)
        data |= {f"decoder.in.{k}": v for k, v in inputs.items()}
        data |= {f"decoder.out.{k}": v for k, v in outputs.items()}
    else:
        _, dec_args = example_translation_inputs(model, batch=2, src_len=src_len, seed=seed)
        dec = DecoderIO.standard(n)
        data |= _named("decoder.in", dec.inputs, dec_args)
        data |= _named("decoder.out", dec.outputs, DecoderGraph(model)(*dec_args))
    align_args = example_aligner_inputs(model, src_len=src_len, seed=seed)
    aligner = AlignerIO.standard()
    data |= _named("aligner.in", aligner.inputs, align_args)
    data |= _named("aligner.out", aligner.outputs, (AlignerGraph(model, extra)(*align_args),))
    steps = min(GREEDY_STEPS, max_target_len)
    hyps = greedy_decode(model, src, max_new_tokens=steps)
    tokens = np.full((len(hyps), steps), -1, dtype=np.int64)  # (B, T)
    for row, hyp in enumerate(hyps):
        tokens[row, : len(hyp.tokens)] = hyp.tokens
    data |= {"greedy.src_ids": src.numpy(), "greedy.tokens": tokens, "greedy.max_new_tokens": np.array(steps)}
    data["greedy.step_attention"] = greedy_step_attention(model, src, tokens, extra)
    return data


def greedy_step_attention(
    model: TranslationTransformer, src: torch.Tensor, tokens: np.ndarray, extra: dict[str, Any] | None
) -> np.ndarray:
    """(B, T, L): the cross-attention of the layer alignments read, heads averaged, at each step of
    the greedy decode ``tokens`` (B, T), -1 past a row's end: what a fused decoder's
    ``step_attention`` returns step by step (rows past a row's end are its padding's, not compared)."""
    cfg = model.cfg
    layer = AlignerGraph(model, extra).layers - 1
    fed = np.where(tokens >= 0, tokens, cfg.eos_id)[:, :-1]  # (B, T - 1): what each step after the first was fed
    tgt = torch.cat([torch.full((len(tokens), 1), cfg.bos_id), torch.from_numpy(fed)], dim=1)  # (B, T)
    src_mask = src != cfg.pad_id  # (B, L)
    memory = model.encode(src, src_mask)  # (B, L, C)
    weights = model.cross_attention_of(memory, src_mask, tgt, torch.ones_like(tgt, dtype=torch.bool), layer + 1)
    return weights[:, layer].mean(dim=1).numpy()  # (B, T, L)


@torch.no_grad()
def vit_reference(model: VisionTransformer, *, seed: int = 0) -> dict[str, np.ndarray]:
    """Logits of ``VIT_IMAGES`` fixed-seed standard-normal (already normalised) images."""
    model = model.eval()
    cfg = model.cfg
    g = torch.Generator().manual_seed(seed)
    pixels = torch.randn(VIT_IMAGES, cfg.in_channels, cfg.image_size, cfg.image_size, generator=g)  # (B, C, H, W)
    io = ClassifierIO.standard()
    return {f"model.in.{io.pixels}": pixels.numpy(), f"model.out.{io.logits}": model(pixels).numpy()}


def save_reference(directory: Path, data: dict[str, np.ndarray]) -> Path:
    path = Path(directory) / VERIFICATION_FILE
    with open(path, "wb") as fh:
        np.savez(fh, **data)
    return path


@torch.no_grad()
def in_place_reference(
    model: TranslationTransformer, src_len: int = 7, lengths: tuple[int, ...] = (2, 0, 4), seed: int = 0
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(inputs, outputs) of the in-place decoder, by contract name, for one step of rows with
    ``lengths`` cached tokens (0: a row's first step) in a buffer of capacity max + 2.

    The outputs come from the PyTorch decoder run on the same rows left-padded to the longest
    and masked (:class:`~.graphs.DecoderGraph`); ``present`` is the input buffer with each row's
    new key/value at column ``lengths[r]``: the columns past it keep their noise."""
    cfg = model.eval().cfg
    n, H, D = cfg.decoder_layers, cfg.num_heads, cfg.d_model // cfg.num_heads
    B, P, capacity = len(lengths), max(lengths), max(lengths) + 2
    g = torch.Generator().manual_seed(seed)
    io = DecoderIO.standard(n, IN_PLACE)
    ids = torch.randint(4, cfg.vocab_size, (B, 1), generator=g)  # (B, 1)
    positions = torch.tensor(lengths, dtype=torch.int64)[:, None]  # (B, 1): the row's next position
    src_mask = torch.ones(B, src_len, dtype=torch.int32)  # (B, L)
    src_mask[0, src_len - 2 :] = 0
    buffers = [torch.randn(B, H, capacity, D, generator=g) for _ in io.past]  # noise past each length
    cross = [torch.randn(B, H, src_len, D, generator=g) for _ in io.cross]
    self_mask = torch.zeros(B, P + 1, dtype=torch.int32)  # (B, P + 1) the left-padded equivalent
    padded = [torch.zeros(B, H, P, D) for _ in io.past]
    for r, length in enumerate(lengths):
        self_mask[r, P - length :] = 1
        for past, buffer in zip(padded, buffers):
            past[r, :, P - length :] = buffer[r, :, :length]
    logits, *present = DecoderGraph(model)(ids, positions, self_mask, src_mask, *padded, *cross)
    written = [buffer.clone() for buffer in buffers]
    for r, length in enumerate(lengths):
        for out, new in zip(written, present):
            out[r, :, length] = new[r, :, P]  # the new token, column P of the left-padded present
    seqlens = torch.tensor(lengths, dtype=torch.int32)
    total = torch.tensor(P + 1, dtype=torch.int32)
    values = [ids, positions, src_mask, *buffers, *cross, seqlens, total]
    inputs = {name: t.numpy() for name, t in zip(io.inputs, values)}
    outputs = {name: t.numpy() for name, t in zip(io.outputs, [logits, *written])}
    return inputs, outputs
