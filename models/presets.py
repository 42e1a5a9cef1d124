"""Named model presets (timm style): ``create_model("vit-s16", num_classes=10)``."""

from __future__ import annotations

import dataclasses

from torch import nn

from .translation import TranslationConfig, TranslationTransformer
from .vit import VisionTransformer, ViTConfig

# Translation presets follow Marian / opus-mt conventions (post-norm, swish, split
# sinusoids, shared + tied embeddings, final logits bias) so that they map 1:1 onto
# transformers' MarianMTModel and CTranslate2 for side-by-side benchmarks.
_MARIAN_STYLE = dict(activation="swish", position_layout="split", final_logits_bias=True)
_M2M100_STYLE = dict(
    activation="relu", norm_first=True, position_layout="fairseq", position_offset=2, pad_id=1, bos_id=2, eos_id=2
)

PRESETS: dict[str, TranslationConfig | ViTConfig] = {
    "mt-tiny": TranslationConfig(
        vocab_size=1000, d_model=64, num_heads=4, encoder_layers=2, decoder_layers=2, ffn_dim=256, **_MARIAN_STYLE
    ),
    "mt-small": TranslationConfig(
        vocab_size=8000, d_model=256, num_heads=4, encoder_layers=3, decoder_layers=3, ffn_dim=1024, **_MARIAN_STYLE
    ),
    "mt-base": TranslationConfig(
        vocab_size=8000, d_model=512, num_heads=8, encoder_layers=6, decoder_layers=6, ffn_dim=2048, **_MARIAN_STYLE
    ),
    # The bundled English -> German translator (models/zoo/translator-en-de): pre-norm trains
    # stably at a high learning rate, which a 30-minute CPU budget needs.
    "mt-numbers": TranslationConfig(
        vocab_size=2000,
        d_model=192,
        num_heads=4,
        encoder_layers=3,
        decoder_layers=3,
        ffn_dim=768,
        norm_first=True,
        dropout=0.05,
        max_positions=128,
    ),
    # M2M100 / NLLB's layout (pre-norm + final norms, ReLU, fairseq positions from padding_idx + 1,
    # <s> <pad> </s> <unk> = 0..3, decoding from </s>) at mt-small's size: the decode benchmark's
    # M2M100-shaped model (transformers' M2M100ForConditionalGeneration and CTranslate2 run the same weights).
    "m2m100-small": TranslationConfig(
        vocab_size=8000, d_model=256, num_heads=4, encoder_layers=3, decoder_layers=3, ffn_dim=1024, **_M2M100_STYLE
    ),
    "vit-tiny": ViTConfig(dim=192, depth=12, num_heads=3),
    "vit-s16": ViTConfig(dim=384, depth=12, num_heads=6),
    "vit-b16": ViTConfig(dim=768, depth=12, num_heads=12),
}


def preset_config(name: str, **overrides) -> TranslationConfig | ViTConfig:
    """The preset's config with ``overrides`` applied (unknown fields raise TypeError)."""
    try:
        cfg = PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown preset {name!r}; available: {', '.join(sorted(PRESETS))}") from None
    return dataclasses.replace(cfg, **overrides)


def build_model(cfg: TranslationConfig | ViTConfig) -> nn.Module:
    """The model a config describes."""
    if isinstance(cfg, TranslationConfig):
        return TranslationTransformer(cfg)
    if isinstance(cfg, ViTConfig):
        return VisionTransformer(cfg)
    raise TypeError(f"not a model config: {type(cfg).__name__}")


def create_model(name: str, **overrides) -> nn.Module:
    """A freshly initialised model of preset ``name`` (see :data:`PRESETS`)."""
    return build_model(preset_config(name, **overrides))
