"""Attention masks. One convention everywhere: boolean, ``True`` = may attend.

Only these helpers build masks; the attention backends combine them. The ONNX side
receives the key-padding mask as int32 (1 = may attend), see ``attention.py``.
"""

from __future__ import annotations

import torch


def padding_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Key-padding mask from token ids.

    ids: (B, L) int64 -> (B, L) bool, True where the token is not padding.
    """
    return ids != pad_id


def lengths_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """Right-padding mask from lengths.

    lengths: (B,) int64 -> (B, max_len) bool, True for the first ``lengths[b]`` slots.
    """
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]  # (B, L)


def causal_mask(query_len: int, key_len: int, device: torch.device | None = None) -> torch.Tensor:
    """Causal mask for ``query_len`` new positions after ``key_len - query_len`` cached ones.

    Query i sits at absolute slot ``P + i`` (P = key_len - query_len) and may attend
    to slots ``j <= P + i`` (Vaswani et al. 2017, section 3.2.3).
    Returns (query_len, key_len) bool.
    """
    past = key_len - query_len
    if past < 0:
        raise ValueError(f"causal_mask: key_len {key_len} < query_len {query_len}")
    q = torch.arange(query_len, device=device)[:, None] + past  # (S, 1)
    k = torch.arange(key_len, device=device)[None, :]  # (1, L)
    return k <= q  # (S, L)


def combine_masks(
    key_padding_mask: torch.Tensor | None,
    causal: bool,
    query_len: int,
    key_len: int,
    device: torch.device | None = None,
) -> torch.Tensor | None:
    """The full mask that ``key_padding_mask`` + ``causal`` mean, broadcastable to (B, H, S, L).

    key_padding_mask: (B, L) bool or None. Returns (B, 1, S, L), (1, 1, S, L) or None.
    """
    mask = None
    if key_padding_mask is not None:
        if key_padding_mask.shape[-1] != key_len:
            raise ValueError(f"key_padding_mask covers {key_padding_mask.shape[-1]} keys, attention has {key_len}")
        mask = key_padding_mask[:, None, None, :]  # (B, 1, 1, L)
    if causal:
        cm = causal_mask(query_len, key_len, device=device)[None, None]  # (1, 1, S, L)
        mask = cm if mask is None else mask & cm  # (B, 1, S, L)
    return mask
