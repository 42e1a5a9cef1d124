"""Vision Transformer (Dosovitskiy et al. 2021) with optional token pruning.

Patch embedding (a conv with stride = patch), class token, learned positions, pre-norm
blocks, final norm, linear head on the class token. Seams after timm:
``forward_features`` -> ``forward_head`` -> ``forward``.

Token pruning (EViT, Liang et al. 2022; DynamicViT, Rao et al. 2021): after the
attention of each block listed in ``prune_layers``, only the ``ceil(keep_rate * N)``
patch tokens the class token attends to most are kept (the class token always stays).
The kept count is static, so the exported graph really shrinks: every later block
runs on fewer tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .attention import Attention


@dataclass(frozen=True)
class ViTConfig:
    image_size: int = 224
    patch_size: int = 16
    in_channels: int = 3
    num_classes: int = 1000
    dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    layer_norm_eps: float = 1e-6
    dropout: float = 0.0
    keep_rate: float = 1.0  # fraction of patch tokens kept at each pruning layer
    # Blocks after whose attention tokens are dropped; () = DynamicViT's placement,
    # at 1/4, 1/2 and 3/4 of the depth (blocks 3, 6, 9 of 12).
    prune_layers: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size {self.image_size} is not a multiple of patch_size {self.patch_size}")
        if self.dim % self.num_heads:
            raise ValueError(f"dim {self.dim} is not divisible by num_heads {self.num_heads}")
        if not 0.0 < self.keep_rate <= 1.0:
            raise ValueError(f"keep_rate must be in (0, 1], got {self.keep_rate}")
        bad = [i for i in self.prune_layers if not 0 <= i < self.depth]
        if bad:
            raise ValueError(f"prune_layers {bad} outside 0..{self.depth - 1}")

    @property
    def pruning_layers(self) -> tuple[int, ...]:
        if self.keep_rate >= 1.0:
            return ()
        if self.prune_layers:
            return tuple(sorted(set(self.prune_layers)))
        return tuple(sorted({max(1, self.depth * k // 4) for k in (1, 2, 3)} - {self.depth}))

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    def tokens_per_block(self) -> list[int]:
        """Tokens (class token included) each block's MLP sees after pruning."""
        counts, n = [], self.num_patches
        for i in range(self.depth):
            if i in self.pruning_layers:
                n = max(1, math.ceil(self.keep_rate * n))
            counts.append(n + 1)
        return counts


class PatchEmbed(nn.Module):
    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.proj = nn.Conv2d(cfg.in_channels, cfg.dim, kernel_size=cfg.patch_size, stride=cfg.patch_size)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.proj(pixels).flatten(2).transpose(1, 2)  # (B, N, C)


class Mlp(nn.Module):
    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        hidden = int(cfg.dim * cfg.mlp_ratio)
        self.fc1, self.fc2 = nn.Linear(cfg.dim, hidden), nn.Linear(hidden, cfg.dim)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.fc2(self.dropout(F.gelu(self.fc1(x)))))  # (B, N, C)


def keep_top_tokens(x: torch.Tensor, cls_attn: torch.Tensor, keep: int) -> torch.Tensor:
    """Keep the class token and the ``keep`` patch tokens with the most class attention.

    x: (B, 1 + N, C); cls_attn: (B, N) float -> (B, 1 + keep, C).
    """
    idx = cls_attn.topk(keep, dim=-1).indices  # (B, keep)
    patches = x[:, 1:].gather(1, idx[..., None].expand(-1, -1, x.shape[-1]))  # (B, keep, C)
    return torch.cat([x[:, :1], patches], dim=1)  # (B, 1 + keep, C)


class Block(nn.Module):
    """Pre-norm block: x + attn(norm1(x)), [prune], x + mlp(norm2(x))."""

    def __init__(self, cfg: ViTConfig, keep: int | None = None) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.dim, eps=cfg.layer_norm_eps)
        self.attn = Attention(cfg.dim, cfg.num_heads, bias=cfg.qkv_bias)
        self.norm2 = nn.LayerNorm(cfg.dim, eps=cfg.layer_norm_eps)
        self.mlp = Mlp(cfg)
        self.dropout = nn.Dropout(cfg.dropout)
        self.keep = keep  # patch tokens kept after this block's attention; None = all

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)  # (B, T, C)
        if self.keep is None:
            x = x + self.dropout(self.attn(h)[0])  # (B, T, C)
        else:
            q, k, v = self.attn.qkv(h).split(self.attn.dim, dim=-1)  # 3 x (B, T, C)
            x = x + self.dropout(self.attn.proj(self.attn.attend(q, k, v)[0]))  # (B, T, C)
            x = keep_top_tokens(x, self.cls_attention(q, k), self.keep)  # (B, 1 + keep, C)
        return x + self.mlp(self.norm2(x))  # (B, T', C)

    def cls_attention(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Head-averaged attention of the class token on the patch tokens (EViT).

        q, k: (B, T, C) -> (B, T - 1). A separate row of scores: the fused attention
        node does not return probabilities, and one query row costs O(T C).
        """
        B, T, C = k.shape
        H = self.attn.num_heads
        qc = q[:, :1].reshape(B, 1, H, C // H).transpose(1, 2)  # (B, H, 1, D)
        kh = k.reshape(B, T, H, C // H).transpose(1, 2)  # (B, H, T, D)
        scores = (qc @ kh.transpose(-2, -1)) / math.sqrt(C // H)  # (B, H, 1, T)
        return scores.softmax(dim=-1).mean(dim=1)[:, 0, 1:]  # (B, T - 1)


class VisionTransformer(nn.Module):
    """pixels: (B, C_in, H, W) float32, normalised -> logits (B, num_classes) float32."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.patch_embed = PatchEmbed(cfg)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, cfg.num_patches + 1, cfg.dim))
        self.pos_drop = nn.Dropout(cfg.dropout)
        counts = cfg.tokens_per_block()
        before = [cfg.num_patches + 1, *counts[:-1]]
        self.blocks = nn.ModuleList(
            Block(cfg, keep=counts[i] - 1 if counts[i] < before[i] else None) for i in range(cfg.depth)
        )
        self.norm = nn.LayerNorm(cfg.dim, eps=cfg.layer_norm_eps)
        self.head = nn.Linear(cfg.dim, cfg.num_classes)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.trunc_normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward_features(self, pixels: torch.Tensor) -> torch.Tensor:
        """pixels: (B, C_in, H, W) -> normalised tokens (B, T', C), class token first."""
        x = self.patch_embed(pixels)  # (B, N, C)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed  # (B, 1 + N, C)
        x = self.pos_drop(x)
        for block in self.blocks:
            x = block(x)  # (B, T', C)
        return self.norm(x)

    def forward_head(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(features[:, 0])  # (B, num_classes)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(pixels))
