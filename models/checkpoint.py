"""attnserve checkpoints: one ``.safetensors`` file holding the weights and, in its
metadata, the model kind and config (so a checkpoint is self-describing).

metadata: ``{"attnserve.kind": "translation" | "vit", "attnserve.config": <config JSON>,
"attnserve.extra": <free JSON: labels, training metrics, ...>}``
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, safe_open, save_file
from torch import nn

from .translation import TranslationConfig, TranslationTransformer
from .vit import VisionTransformer, ViTConfig

KINDS = {"translation": (TranslationConfig, TranslationTransformer), "vit": (ViTConfig, VisionTransformer)}


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message names the file and the reason."""


def model_kind(model: nn.Module) -> str:
    for kind, (_, cls) in KINDS.items():
        if isinstance(model, cls):
            return kind
    raise TypeError(f"not an attnserve model: {type(model).__name__}")


def save_checkpoint(
    model: nn.Module, path: Path | str, extra: dict[str, Any] | None = None, storage_dtype: torch.dtype | None = None
) -> Path:
    """Write ``model``'s weights and config to ``path`` (.safetensors). Tied weights are stored once.

    ``storage_dtype`` (e.g. ``torch.float16``) stores floating-point weights in that type, half
    the bytes of fp32; :func:`load_checkpoint` casts them back to the model's own dtype.
    """
    path = Path(path)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if storage_dtype is not None:
        state = {k: v.to(storage_dtype) if v.is_floating_point() else v for k, v in state.items()}
    if isinstance(model, TranslationTransformer):  # tied: stored once, re-tied by the constructor
        if model.cfg.share_embeddings:
            state.pop("tgt_embed.weight", None)
        if model.cfg.tie_output:
            state.pop("lm_head.weight", None)
    metadata = {
        "attnserve.kind": model_kind(model),
        "attnserve.config": json.dumps(dataclasses.asdict(model.cfg)),
        "attnserve.extra": json.dumps(extra or {}),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path), metadata=metadata)
    return path


def read_checkpoint_metadata(path: Path | str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(kind, config dict, extra dict) without loading the weights."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"{path}: not a safetensors checkpoint ({exc})") from None
    kind = meta.get("attnserve.kind")
    if kind is None:
        raise CheckpointError(
            f"{path}: not an attnserve checkpoint (no 'attnserve.kind' in its metadata); a Hugging Face checkpoint "
            "is imported from its folder: attnserve-export translation --from-hf DIR, or vit --from-hf-vit DIR"
        )
    if kind not in KINDS:
        raise CheckpointError(f"{path}: metadata 'attnserve.kind' is {kind!r}, expected one of {sorted(KINDS)}")
    try:
        config = json.loads(meta["attnserve.config"])
        extra = json.loads(meta.get("attnserve.extra", "{}"))
    except (KeyError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: metadata 'attnserve.config' missing or not JSON ({exc})") from None
    return kind, config, extra


def config_from_dict(kind: str, config: dict[str, Any]) -> TranslationConfig | ViTConfig:
    cls = KINDS[kind][0]
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(config) - known)
    if unknown:
        raise CheckpointError(f"config has fields {unknown} that {cls.__name__} does not know")
    if "prune_layers" in config:
        config = {**config, "prune_layers": tuple(config["prune_layers"])}
    return cls(**config)


def load_checkpoint(path: Path | str, **overrides) -> tuple[nn.Module, dict[str, Any]]:
    """Build the model a checkpoint describes and load its weights (strict).

    ``overrides`` replace config fields that do not change the weights' shapes
    (e.g. ``dropout=0.0``, ``keep_rate=0.5``). Returns (model in eval mode, extra).
    """
    kind, config, extra = read_checkpoint_metadata(path)
    cfg = config_from_dict(kind, {**config, **overrides})
    model = KINDS[kind][1](cfg)
    state = load_file(str(path))
    expected = model.state_dict()
    resized = [
        f"{k} {tuple(v.shape)} (config: {tuple(expected[k].shape)})"
        for k, v in state.items()
        if k in expected and v.shape != expected[k].shape
    ]
    if resized:  # load_state_dict would raise a RuntimeError listing every tensor
        raise CheckpointError(
            f"{path}: weights do not match the config: {len(resized)} tensors have other shapes, e.g. {resized[0]}"
        )
    state = {k: v.to(expected[k].dtype) if k in expected else v for k, v in state.items()}  # fp16-stored -> fp32
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = set()
    if isinstance(cfg, TranslationConfig):
        tied = {"tgt_embed.weight"} if cfg.share_embeddings else set()
        tied |= {"lm_head.weight"} if cfg.tie_output else set()
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: weights do not match the config: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    return model.eval(), extra
