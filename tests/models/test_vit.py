"""The Vision Transformer and token pruning."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attnserve.models import VisionTransformer, ViTConfig, create_model

from .conftest import TINY_VIT


def test_shapes_and_seams(tiny_vit):
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        feats = tiny_vit.forward_features(x)
        assert feats.shape == (3, 1 + 16, 32)
        torch.testing.assert_close(tiny_vit.forward_head(feats), tiny_vit(x))
    assert tiny_vit(x).shape == (3, 7)


def test_keep_rate_one_is_the_plain_model(tiny_vit):
    pruned_cfg = dataclasses.replace(TINY_VIT, keep_rate=1.0, prune_layers=(1,))
    other = VisionTransformer(pruned_cfg).eval()
    other.load_state_dict(tiny_vit.state_dict())
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(other(x), tiny_vit(x))
    assert all(b.keep is None for b in other.blocks)


def test_keep_rate_drops_tokens_and_keeps_the_class_token(tiny_vit):
    cfg = dataclasses.replace(TINY_VIT, keep_rate=0.5, prune_layers=(0,))
    model = VisionTransformer(cfg).eval()
    model.load_state_dict(tiny_vit.state_dict())
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        feats = model.forward_features(x)
    assert feats.shape == (2, 1 + 8, 32)
    assert cfg.tokens_per_block() == [9, 9]
    # The class token's path is the same up to the first pruning (block 0's attention).
    assert model(x).shape == (2, 7)


def test_default_pruning_placement_follows_dynamicvit():
    cfg = ViTConfig(keep_rate=0.7)
    assert cfg.pruning_layers == (3, 6, 9)
    counts = cfg.tokens_per_block()
    assert counts[0] == 197 and counts[3] == 1 + 138 and counts[-1] < counts[3]


def test_presets_exist_with_their_shapes():
    vit = create_model("vit-s16")
    assert vit.cfg.dim == 384 and vit.cfg.depth == 12 and vit.cfg.num_patches == 196
    mt = create_model("mt-small")
    assert (mt.cfg.d_model, mt.cfg.encoder_layers, mt.cfg.vocab_size) == (256, 3, 8000)
    with pytest.raises(KeyError, match="unknown preset"):
        create_model("vit-huge")


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="multiple of patch_size"):
        ViTConfig(image_size=30, patch_size=16)
    with pytest.raises(ValueError, match="keep_rate"):
        ViTConfig(keep_rate=0.0)
