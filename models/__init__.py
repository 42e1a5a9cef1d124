"""PyTorch models of attnserve: the attention module, the translation Transformer and the ViT.

Imports nothing else of attnserve; ``export`` builds on it, ``server`` never imports it.
"""

from .attention import Attention, attention_backend, current_backend, math_attention
from .checkpoint import CheckpointError, load_checkpoint, read_checkpoint_metadata, save_checkpoint
from .decoding import Hypothesis, beam_search, greedy_decode
from .masks import causal_mask, combine_masks, lengths_mask, padding_mask
from .positions import SinusoidalPositions, sinusoidal_table
from .presets import PRESETS, build_model, create_model, preset_config
from .translation import TranslationConfig, TranslationTransformer
from .vit import VisionTransformer, ViTConfig

__all__ = [
    "PRESETS",
    "Attention",
    "CheckpointError",
    "Hypothesis",
    "SinusoidalPositions",
    "TranslationConfig",
    "TranslationTransformer",
    "ViTConfig",
    "VisionTransformer",
    "attention_backend",
    "beam_search",
    "build_model",
    "causal_mask",
    "combine_masks",
    "create_model",
    "current_backend",
    "greedy_decode",
    "lengths_mask",
    "load_checkpoint",
    "math_attention",
    "padding_mask",
    "preset_config",
    "read_checkpoint_metadata",
    "save_checkpoint",
    "sinusoidal_table",
]
