"""Encoder-decoder translation Transformer (Vaswani et al. 2017).

The option set covers the original model (post-norm, ReLU, interleaved sinusoids) and
Hugging Face Marian / opus-mt checkpoints exactly (swish, split sinusoids, shared and
tied embeddings, final logits bias), so those import without approximation.

Seams, after the Annotated Transformer: :meth:`TranslationTransformer.encode` and
:meth:`TranslationTransformer.decode`; export and every decoder use only these (plus
:meth:`cross_kv` and :meth:`logits`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .attention import KV, Attention
from .positions import LAYOUTS, SinusoidalPositions

ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,  # exact (erf)
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # OpenNMT-py's and CTranslate2's "fast" GELU
    "swish": F.silu,
}


@dataclass(frozen=True)
class TranslationConfig:
    vocab_size: int = 8000
    d_model: int = 512
    num_heads: int = 8
    encoder_layers: int = 6
    decoder_layers: int = 6
    ffn_dim: int = 2048
    activation: str = "relu"  # relu | gelu | gelu_tanh | swish
    norm_first: bool = False  # False: post-norm as in the paper; True: pre-norm + final norms
    final_norm: bool = True  # pre-norm only: end each stack with a layer norm (CTranslate2's no_final_norm: False)
    share_embeddings: bool = True  # one embedding for source and target
    tie_output: bool = True  # output projection = target embedding
    scale_embedding: bool = True  # multiply embeddings by sqrt(d_model) (paper, 3.4)
    final_logits_bias: bool = False  # Marian adds a learned bias to the logits
    # interleaved (paper) | split (Marian) | fairseq (M2M100, NLLB) | learned (a trained table, e.g. CTranslate2's)
    position_layout: str = "interleaved"
    position_offset: int = 0  # position p is encoded as p + offset (M2M100 / NLLB: padding_idx + 1)
    max_positions: int = 512
    dropout: float = 0.1
    layer_norm_eps: float = 1e-5
    pad_id: int = 0
    bos_id: int = 1  # decoder start token (M2M100 / NLLB start from the end token)
    eos_id: int = 2
    unk_id: int = 3

    def __post_init__(self) -> None:
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation {self.activation!r} not in {sorted(ACTIVATIONS)}")
        if self.position_layout not in LAYOUTS:
            raise ValueError(f"position_layout {self.position_layout!r} not in {LAYOUTS}")
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by num_heads {self.num_heads}")
        for name in ("pad_id", "bos_id", "eos_id", "unk_id"):
            if not 0 <= getattr(self, name) < self.vocab_size:
                raise ValueError(f"{name} {getattr(self, name)} outside the vocabulary (size {self.vocab_size})")
        if self.position_offset < 0:
            raise ValueError(f"position_offset must be >= 0, got {self.position_offset}")

    @property
    def never_generate(self) -> tuple[int, ...]:
        """Ids decoding never chooses: pad, and the start token unless it is also the end token
        (Marian starts from pad; M2M100 / NLLB start from ``</s>``, which must stay choosable)."""
        return tuple(sorted({self.pad_id} | ({self.bos_id} - {self.eos_id})))


class FeedForward(nn.Module):
    """Position-wise feed-forward network (paper, 3.3)."""

    def __init__(self, cfg: TranslationConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.d_model, cfg.ffn_dim)
        self.fc2 = nn.Linear(cfg.ffn_dim, cfg.d_model)
        self.act = ACTIVATIONS[cfg.activation]
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dropout(self.act(self.fc1(x))))  # (B, T, C)


class Residual(nn.Module):
    """x + dropout(sublayer(x)), normalised after (post-norm) or before (pre-norm)."""

    def __init__(self, cfg: TranslationConfig) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)
        self.norm_first = cfg.norm_first

    def forward(self, x: torch.Tensor, sublayer) -> tuple[torch.Tensor, KV | None]:
        out, cache = sublayer(self.norm(x) if self.norm_first else x)  # (B, T, C)
        x = x + self.dropout(out)  # (B, T, C)
        return (x if self.norm_first else self.norm(x)), cache


class EncoderLayer(nn.Module):
    def __init__(self, cfg: TranslationConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg.d_model, cfg.num_heads)
        self.ffn = FeedForward(cfg)
        self.res1, self.res2 = Residual(cfg), Residual(cfg)

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        x, _ = self.res1(x, lambda h: self.self_attn(h, key_padding_mask=src_mask))  # (B, L, C)
        x, _ = self.res2(x, lambda h: (self.ffn(h), None))  # (B, L, C)
        return x


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TranslationConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg.d_model, cfg.num_heads)
        self.cross_attn = Attention(cfg.d_model, cfg.num_heads, cross=True)
        self.ffn = FeedForward(cfg)
        self.res1, self.res2, self.res3 = Residual(cfg), Residual(cfg), Residual(cfg)

    def forward(
        self,
        x: torch.Tensor,
        tgt_mask: torch.Tensor,
        cross_kv: KV,
        src_mask: torch.Tensor,
        past: KV | None,
        use_cache: bool,
    ) -> tuple[torch.Tensor, KV | None]:
        x, present = self.res1(
            x,
            lambda h: self.self_attn(h, key_padding_mask=tgt_mask, causal=True, past=past, use_cache=use_cache),
        )  # (B, S, C)
        x, _ = self.res2(x, lambda h: self.cross_attn(h, key_padding_mask=src_mask, kv=cross_kv))  # (B, S, C)
        x, _ = self.res3(x, lambda h: (self.ffn(h), None))  # (B, S, C)
        return x, present

    def cross_weights(
        self, x: torch.Tensor, tgt_mask: torch.Tensor, cross_kv: KV, src_mask: torch.Tensor, last: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced layer (no cache) that also returns its cross-attention probabilities
        (B, H, S, L). ``last``: the layer's output is not needed (its cross-attention output and
        feed-forward are skipped)."""
        x, _ = self.res1(x, lambda h: self.self_attn(h, key_padding_mask=tgt_mask, causal=True))  # (B, S, C)
        weights = self.cross_attn.weights(self.res2.norm(x) if self.res2.norm_first else x, cross_kv, src_mask)
        if last:
            return x, weights  # (B, S, C), (B, H, S, L)
        x, _ = self.res2(x, lambda h: self.cross_attn(h, key_padding_mask=src_mask, kv=cross_kv))  # (B, S, C)
        x, _ = self.res3(x, lambda h: (self.ffn(h), None))  # (B, S, C)
        return x, weights


class TranslationTransformer(nn.Module):
    """Encoder-decoder Transformer.

    Typical use (greedy, one step at a time)::

        memory = model.encode(src, src_mask)            # (B, L, C)
        cross = model.cross_kv(memory)                  # per layer 2 x (B, H, L, D)
        hidden, past = model.decode(tgt, pos, tgt_mask, cross, src_mask, past)
        logits = model.logits(hidden[:, -1:])           # (B, 1, V)
    """

    def __init__(self, cfg: TranslationConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.src_embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.tgt_embed = (
            self.src_embed
            if cfg.share_embeddings
            else nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        )
        self.positions = SinusoidalPositions(cfg.max_positions, cfg.d_model, cfg.position_layout, cfg.position_offset)
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embedding else 1.0
        self.dropout = nn.Dropout(cfg.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        # Pre-norm stacks end with a norm (the residual stream is never normalised otherwise),
        # unless the checkpoint was trained without one.
        final = cfg.norm_first and cfg.final_norm
        self.encoder_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if final else nn.Identity()
        self.decoder_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if final else nn.Identity()
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_output:
            self.lm_head.weight = self.tgt_embed.weight
        if cfg.final_logits_bias:
            self.register_buffer("logits_bias", torch.zeros(cfg.vocab_size))
        else:
            self.logits_bias = None
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=self.cfg.d_model**-0.5)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()

    def _embed(self, embedding: nn.Embedding, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = embedding(ids) * self.embed_scale + self.positions(positions)  # (B, T, C)
        return self.dropout(x)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """src: (B, L) int64, src_mask: (B, L) bool (True = token) -> memory (B, L, C) float32."""
        positions = torch.arange(src.shape[1], device=src.device).expand_as(src)  # (B, L)
        x = self._embed(self.src_embed, src, positions)  # (B, L, C)
        for layer in self.encoder_layers:
            x = layer(x, src_mask)  # (B, L, C)
        return self.encoder_norm(x)

    def cross_kv(self, memory: torch.Tensor) -> list[KV]:
        """Every decoder layer's cross-attention keys/values, computed once per source.

        memory: (B, L, C) -> per layer 2 x (B, H, L, D).
        """
        return [layer.cross_attn.project_kv(memory) for layer in self.decoder_layers]

    def decode(
        self,
        tgt: torch.Tensor,
        positions: torch.Tensor,
        tgt_mask: torch.Tensor,
        cross_kv: list[KV],
        src_mask: torch.Tensor,
        past: list[KV] | None = None,
        use_cache: bool = False,
    ) -> tuple[torch.Tensor, list[KV] | None]:
        """Run the decoder on S new target tokens after P cached ones.

        tgt: (B, S) int64; positions: (B, S) int64, each row's own step numbers (rows
        may be at different steps); tgt_mask: (B, P + S) bool over cached + new slots
        (left padding of shorter rows is False); cross_kv from :meth:`cross_kv`;
        src_mask: (B, L) bool; past: per layer 2 x (B, H, P, D) or None.
        Returns hidden (B, S, C) and, when caching, per layer 2 x (B, H, P + S, D).
        """
        use_cache = use_cache or past is not None
        x = self._embed(self.tgt_embed, tgt, positions)  # (B, S, C)
        present: list[KV] = []
        for i, layer in enumerate(self.decoder_layers):
            x, layer_present = layer(x, tgt_mask, cross_kv[i], src_mask, None if past is None else past[i], use_cache)
            present.append(layer_present)
        return self.decoder_norm(x), (present if use_cache else None)

    def cross_attention(
        self, src: torch.Tensor, src_mask: torch.Tensor, tgt: torch.Tensor, tgt_mask: torch.Tensor
    ) -> torch.Tensor:
        """Every decoder layer's cross-attention probabilities for a whole target (teacher forcing),
        what word alignment reads: :meth:`cross_attention_of` the source's encoding.

        src: (B, L) int64, src_mask: (B, L) bool; tgt: (B, T) int64 the decoder's inputs (start
        token, then the output without its last token), tgt_mask: (B, T) bool (right padding).
        Returns (B, N, H, T, L) float32: N decoder layers, H heads; row t is the attention of
        the step that generated output token t.
        """
        return self.cross_attention_of(self.encode(src, src_mask), src_mask, tgt, tgt_mask)

    def cross_attention_of(
        self,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        tgt: torch.Tensor,
        tgt_mask: torch.Tensor,
        layers: int | None = None,
    ) -> torch.Tensor:
        """:meth:`cross_attention` from the encoder's output, memory: (B, L, C) float32 (what the
        encoder graph returns beside the cross K/V, so a server that has decoded the source does
        not encode it again). ``layers``: only the first N decoder layers (None: all), the last
        of them only up to its attention probabilities; returns (B, N, H, T, L)."""
        n = len(self.decoder_layers) if layers is None else layers
        positions = torch.arange(tgt.shape[1], device=tgt.device).expand_as(tgt)  # (B, T)
        x = self._embed(self.tgt_embed, tgt, positions)  # (B, T, C)
        weights = []
        for i, layer in enumerate(self.decoder_layers[:n]):
            kv = layer.cross_attn.project_kv(memory)  # 2 x (B, H, L, D)
            x, layer_weights = layer.cross_weights(x, tgt_mask, kv, src_mask, i == n - 1)  # (B, H, T, L)
            weights.append(layer_weights)
        return torch.stack(weights, dim=1)  # (B, N, H, T, L)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: (B, S, C) -> (B, S, V) float32."""
        logits = self.lm_head(hidden)  # (B, S, V)
        return logits if self.logits_bias is None else logits + self.logits_bias

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """Teacher forcing for training. src: (B, L), tgt: (B, S) starting with bos -> (B, S, V)."""
        src_mask = src != self.cfg.pad_id  # (B, L)
        tgt_mask = tgt != self.cfg.pad_id  # (B, S)
        tgt_mask[:, 0] = True  # the start token is real even where it is the pad id (Marian: bos == pad)
        memory = self.encode(src, src_mask)  # (B, L, C)
        positions = torch.arange(tgt.shape[1], device=tgt.device).expand_as(tgt)  # (B, S)
        hidden, _ = self.decode(tgt, positions, tgt_mask, self.cross_kv(memory), src_mask)  # (B, S, C)
        return self.logits(hidden)
