"""Multi-head attention with one API and several backends (Vaswani et al. 2017, 3.2).

One module serves every case of both models: self-attention, causal self-attention
with a KV cache, and cross-attention on keys/values projected once per sequence.

Backends, chosen at call time with :func:`attention_backend`:

- eager: ``sdpa`` (default, ``F.scaled_dot_product_attention``) and ``math`` (the
  written-out reference the tests compare against);
- export (only while ``torch.onnx.is_in_onnx_export()``): ``fused`` (default, one
  ``com.microsoft::MultiHeadAttention`` node), ``onnx`` (one standard ONNX
  ``Attention`` node, opset 23) and ``decomposed`` (plain MatMul/Softmax, the math
  path traced as is).

Masks follow :mod:`attnserve.models.masks`: boolean, True = may attend.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from .masks import combine_masks

EAGER_BACKENDS = ("sdpa", "math")
EXPORT_TARGETS = ("fused", "onnx", "decomposed")
# ONNX op type emitted per export target, used to count attention nodes in a graph.
EXPORT_OP_TYPES = {
    "fused": ("com.microsoft", "MultiHeadAttention"),
    "onnx": ("", "Attention"),
    "decomposed": None,
}

_eager_backend: contextvars.ContextVar[str] = contextvars.ContextVar("eager", default="sdpa")
_export_target: contextvars.ContextVar[str] = contextvars.ContextVar("export", default="fused")

KV = tuple[torch.Tensor, torch.Tensor]


@contextlib.contextmanager
def attention_backend(name: str) -> Iterator[None]:
    """Select the attention backend for calls made inside the block.

    ``sdpa``/``math`` set the eager backend; ``fused``/``onnx``/``decomposed`` set the
    form emitted while exporting to ONNX.
    """
    if name in EAGER_BACKENDS:
        var = _eager_backend
    elif name in EXPORT_TARGETS:
        var = _export_target
    else:
        raise ValueError(f"unknown attention backend {name!r}; expected one of {EAGER_BACKENDS + EXPORT_TARGETS}")
    token = var.set(name)
    try:
        yield
    finally:
        var.reset(token)


def current_backend() -> str:
    """The backend a call made now would use."""
    return _export_target.get() if torch.onnx.is_in_onnx_export() else _eager_backend.get()


def math_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Written-out scaled dot-product attention, the reference for every backend.

    q: (B, H, S, D), k/v: (B, H, L, D), mask: bool broadcastable to (B, H, S, L).
    Returns (B, H, S, D).
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, S, L)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)  # (B, H, S, L)
    return scores.softmax(dim=-1) @ v  # (B, H, S, D)


def _split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    B, T, C = x.shape
    return x.view(B, T, num_heads, C // num_heads).transpose(1, 2)  # (B, H, T, D)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    B, H, T, D = x.shape
    return x.transpose(1, 2).reshape(B, T, H * D)  # (B, T, C)


class Attention(nn.Module):
    """Multi-head attention; ``cross=False``: packed ``qkv``, ``cross=True``: ``q`` + packed ``kv``.

    Self-attention forward: ``x`` (B, S, C); optional cache ``past`` = (k, v), each
    (B, H, P, D) with P >= 0; returns ``(out (B, S, C), present)`` where present has
    P + S positions (None when no cache is kept).

    Cross-attention forward: ``x`` (B, S, C) and ``kv`` = (k, v) from
    :meth:`project_kv`, each (B, H, L, D), computed once per source sequence.

    ``key_padding_mask``: (B, L_total) bool over every key (past + new for self,
    source for cross). ``causal``: query i attends to keys ``<= P + i``.
    """

    def __init__(self, dim: int, num_heads: int, *, cross: bool = False, bias: bool = True) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim {dim} is not divisible by num_heads {num_heads}")
        self.dim, self.num_heads, self.head_dim, self.cross = dim, num_heads, dim // num_heads, cross
        if cross:
            self.q = nn.Linear(dim, dim, bias=bias)
            self.kv = nn.Linear(dim, 2 * dim, bias=bias)
        else:
            self.qkv = nn.Linear(dim, 3 * dim, bias=bias)
        self.proj = nn.Linear(dim, dim, bias=bias)

    def project_kv(self, memory: torch.Tensor) -> KV:
        """Cross-attention keys/values, once per sequence. memory: (B, L, C) -> 2 x (B, H, L, D)."""
        if not self.cross:
            raise TypeError("project_kv is for cross-attention modules")
        B, L, _ = memory.shape
        k, v = self.kv(memory).view(B, L, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        return k, v  # 2 x (B, H, L, D)

    def weights(self, x: torch.Tensor, kv: KV, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Cross-attention probabilities, for word alignment: written out (MatMul and
        Softmax when exported), since the fused kernels return only the attended values.

        x: (B, S, C) the layer's query input; kv from :meth:`project_kv`; key_padding_mask: (B, L)
        bool. Returns (B, H, S, L) float32, each row summing to 1 over the unmasked keys.
        """
        if not self.cross:
            raise TypeError("attention weights are read from cross-attention modules")
        q = _split_heads(self.q(x), self.num_heads)  # (B, H, S, D)
        scores = q @ kv[0].transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, S, L)
        if key_padding_mask is not None:
            scores = scores.masked_fill(~key_padding_mask[:, None, None, :], torch.finfo(scores.dtype).min)
        return scores.softmax(dim=-1)  # (B, H, S, L)

    def forward(
        self,
        x: torch.Tensor,
        *,
        key_padding_mask: torch.Tensor | None = None,
        causal: bool = False,
        past: KV | None = None,
        kv: KV | None = None,
        use_cache: bool = False,
    ) -> tuple[torch.Tensor, KV | None]:
        if self.cross:
            if kv is None:
                raise TypeError("cross-attention needs kv=(k, v) from project_kv")
            if past is not None or causal:
                raise TypeError("cross-attention takes no cache and is never causal")
            q = self.q(x)  # (B, S, C)
            out = self.attend(q, kv=kv, key_padding_mask=key_padding_mask)[0]  # (B, S, C)
            return self.proj(out), None
        q, k, v = self.qkv(x).split(self.dim, dim=-1)  # 3 x (B, S, C)
        out, present = self.attend(
            q, k, v, key_padding_mask=key_padding_mask, causal=causal, past=past, keep_cache=use_cache
        )  # (B, S, C)
        return self.proj(out), present

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor | None = None,
        v: torch.Tensor | None = None,
        *,
        kv: KV | None = None,
        key_padding_mask: torch.Tensor | None = None,
        causal: bool = False,
        past: KV | None = None,
        keep_cache: bool = False,
    ) -> tuple[torch.Tensor, KV | None]:
        """The attention itself, between the projections; one node when exported.

        q/k/v: (B, S, C) projected, not yet split into heads; or kv: pre-projected
        2 x (B, H, L, D). Returns out (B, S, C) and the present cache when
        ``keep_cache`` or ``past`` is given.
        """
        keep_cache = keep_cache or past is not None
        backend = current_backend()
        if backend == "fused":
            return self._attend_fused(q, k, v, kv, key_padding_mask, causal, past, keep_cache)
        qh = _split_heads(q, self.num_heads)  # (B, H, S, D)
        if kv is not None:
            kh, vh = kv  # (B, H, L, D)
        else:
            kh, vh = _split_heads(k, self.num_heads), _split_heads(v, self.num_heads)  # (B, H, S, D)
            if past is not None:
                kh = torch.cat([past[0], kh], dim=2)  # (B, H, P+S, D)
                vh = torch.cat([past[1], vh], dim=2)  # (B, H, P+S, D)
        present = (kh, vh) if keep_cache else None
        S, L = qh.shape[2], kh.shape[2]
        mask = combine_masks(key_padding_mask, causal, S, L, device=q.device)  # (B|1, 1, S, L)
        if backend == "onnx":
            if mask is not None:  # onnxruntime wants the query axis spelled out, not broadcast
                mask = mask.expand(mask.shape[0], 1, S, L)  # (B|1, 1, S, L)
            out = torch.onnx.ops.attention(qh, kh, vh, mask)[0]  # (B, H, S, D)
        elif backend == "sdpa":
            out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)  # (B, H, S, D)
        else:  # math, decomposed
            out = math_attention(qh, kh, vh, mask)  # (B, H, S, D)
        return _merge_heads(out), present  # (B, S, C)

    def _attend_fused(
        self,
        q: torch.Tensor,
        k: torch.Tensor | None,
        v: torch.Tensor | None,
        kv: KV | None,
        key_padding_mask: torch.Tensor | None,
        causal: bool,
        past: KV | None,
        keep_cache: bool,
    ) -> tuple[torch.Tensor, KV | None]:
        """One com.microsoft::MultiHeadAttention node (onnxruntime contrib op, opset 1).

        Inputs by position: query, key, value, bias, key_padding_mask, attention_bias,
        past_key, past_value. Keys/values are either (B, L, C) to be split into heads
        by the op, or (B, H, L, D) already projected (cross-attention).
        """
        B, S, C = q.shape
        H, D = self.num_heads, self.head_dim
        mask_i32 = None if key_padding_mask is None else key_padding_mask.to(torch.int32)  # (B, L)
        attrs = {"num_heads": H, "unidirectional": int(causal)}
        if kv is not None:
            (out,) = torch.onnx.ops.symbolic_multi_out(
                "com.microsoft::MultiHeadAttention",
                [q, kv[0], kv[1], None, mask_i32],
                attrs,
                dtypes=[q.dtype],
                shapes=[[B, S, C]],
                version=1,
            )
            return out, None
        if not keep_cache:
            (out,) = torch.onnx.ops.symbolic_multi_out(
                "com.microsoft::MultiHeadAttention",
                [q, k, v, None, mask_i32],
                attrs,
                dtypes=[q.dtype],
                shapes=[[B, S, C]],
                version=1,
            )
            return out, None
        if past is None:  # first step of a cache: an empty past keeps one graph for every step
            past = (q.new_zeros(B, H, 0, D), q.new_zeros(B, H, 0, D))
        total = past[0].shape[2] + S
        out, pk, pv = torch.onnx.ops.symbolic_multi_out(
            "com.microsoft::MultiHeadAttention",
            [q, k, v, None, mask_i32, None, past[0], past[1]],
            attrs,
            dtypes=[q.dtype, q.dtype, q.dtype],
            shapes=[[B, S, C], [B, H, total, D], [B, H, total, D]],
            version=1,
        )
        return out, (pk, pv)
