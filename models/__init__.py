"""PyTorch models of attnserve: the attention module, the translation Transformer and the ViT.

Imports nothing else of attnserve; ``export`` builds on it, ``server`` never imports it.
The names below are loaded from their modules on first use (PEP 562), so that importing a
subpackage such as ``attnserve.models.training.cli`` does not import PyTorch before that
command can say it is missing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_MODULES = {
    ".attention": ("Attention", "attention_backend", "current_backend", "math_attention"),
    ".checkpoint": ("CheckpointError", "load_checkpoint", "read_checkpoint_metadata", "save_checkpoint"),
    ".decoding": ("Hypothesis", "beam_search", "greedy_decode"),
    ".masks": ("causal_mask", "combine_masks", "lengths_mask", "padding_mask"),
    ".positions": ("SinusoidalPositions", "sinusoidal_table"),
    ".presets": ("PRESETS", "build_model", "create_model", "preset_config"),
    ".translation": ("TranslationConfig", "TranslationTransformer"),
    ".vit": ("VisionTransformer", "ViTConfig"),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}
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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # once loaded, a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # what static tools and editors see
    from .attention import Attention, attention_backend, current_backend, math_attention
    from .checkpoint import CheckpointError, load_checkpoint, read_checkpoint_metadata, save_checkpoint
    from .decoding import Hypothesis, beam_search, greedy_decode
    from .masks import causal_mask, combine_masks, lengths_mask, padding_mask
    from .positions import SinusoidalPositions, sinusoidal_table
    from .presets import PRESETS, build_model, create_model, preset_config
    from .translation import TranslationConfig, TranslationTransformer
    from .vit import VisionTransformer, ViTConfig
