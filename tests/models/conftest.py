from __future__ import annotations

import pytest
import torch

from attnserve.models import TranslationConfig, TranslationTransformer, VisionTransformer, ViTConfig

TINY_MT = TranslationConfig(
    vocab_size=97, d_model=32, num_heads=4, encoder_layers=2, decoder_layers=2, ffn_dim=64, dropout=0.0
)
TINY_VIT = ViTConfig(image_size=32, patch_size=8, in_channels=3, num_classes=7, dim=32, depth=2, num_heads=4)


@pytest.fixture
def tiny_translator() -> TranslationTransformer:
    torch.manual_seed(0)
    return TranslationTransformer(TINY_MT).eval()


@pytest.fixture
def tiny_vit() -> VisionTransformer:
    torch.manual_seed(0)
    return VisionTransformer(TINY_VIT).eval()
