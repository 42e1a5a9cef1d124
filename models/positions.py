"""Sinusoidal positional encoding (Vaswani et al. 2017, section 3.5).

Encodings are looked up from explicit per-row positions (B, S), so rows of one batch
may sit at different decoding steps.
"""

from __future__ import annotations

import math

import torch
from torch import nn

LAYOUTS = ("interleaved", "split", "fairseq", "learned")


def sinusoidal_table(num_positions: int, dim: int, layout: str = "interleaved", offset: int = 0) -> torch.Tensor:
    """(num_positions, dim) float32 table, computed in float64; row ``p`` encodes position ``p + offset``.

    ``interleaved``: PE(pos, 2i) = sin(pos / 10000^(2i/dim)), PE(pos, 2i+1) = cos(...),
    as in the paper. ``split``: all sines, then all cosines (Marian layout), the same
    frequencies. ``fairseq``: split, with frequencies 10000^(-i/(dim/2 - 1)) (tensor2tensor's,
    used by fairseq's M2M100 / NLLB, whose first token sits at position ``padding_idx + 1``:
    pass that as ``offset``).
    """
    if dim % 2:
        raise ValueError(f"sinusoidal positions need an even dim, got {dim}")
    if layout not in LAYOUTS or layout == "learned":
        raise ValueError(f"unknown sinusoidal layout {layout!r}; expected one of {LAYOUTS[:-1]}")
    pos = torch.arange(offset, offset + num_positions, dtype=torch.float64)[:, None]  # (N, 1)
    if layout == "fairseq":
        half = dim // 2
        inv_freq = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float64) / max(half - 1, 1))
    else:
        inv_freq = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (dim/2,)
    angles = pos * inv_freq[None, :]  # (N, dim/2)
    if layout in ("split", "fairseq"):
        table = torch.cat([angles.sin(), angles.cos()], dim=-1)  # (N, dim)
    else:
        table = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)  # (N, dim)
    return table.float()


class SinusoidalPositions(nn.Module):
    """positions (B, S) int64 -> (B, S, dim) float32. A fixed buffer, not saved with the weights;
    ``layout="learned"``: a trained (num_positions, dim) parameter instead, saved as ``table``."""

    def __init__(self, num_positions: int, dim: int, layout: str = "interleaved", offset: int = 0) -> None:
        super().__init__()
        self.num_positions = num_positions
        if layout == "learned":
            self.table = nn.Parameter(torch.zeros(num_positions, dim))
        else:
            self.register_buffer("table", sinusoidal_table(num_positions, dim, layout, offset), persistent=False)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self.table[positions]  # (B, S, dim)
