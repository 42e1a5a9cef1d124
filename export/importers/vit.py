"""Hugging Face ``ViTForImageClassification`` -> :class:`VisionTransformer`.

HF ViT is what ours is: conv patch embedding, class token, learned positions,
pre-norm blocks with exact GELU, a final layer norm and a linear classifier on the
class token. Query/key/value are packed into our ``qkv``. Both weight layouts are
read: the one on disk (``vit.encoder.layer.N.attention.attention.query``, what every
checkpoint and transformers 5's ``save_pretrained`` write) and transformers 5's
in-memory names (``vit.layers.N.attention.q_proj``). Needs neither transformers nor
sentencepiece.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attnserve.models import VisionTransformer, ViTConfig

from .hf_files import ConfigReader, ImportCheckpointError, load_weights, model_dir, read_config, read_json, take

# PIL.Image.Resampling values -> the server's names (HF stores the PIL integer).
RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic"}

# On-disk (transformers 4 and the Hub) -> transformers 5 names, applied in order.
_RENAMES = [
    (r"^vit\.encoder\.layer\.(\d+)\.", r"vit.layers.\1."),
    (r"\.attention\.attention\.query\.", ".attention.q_proj."),
    (r"\.attention\.attention\.key\.", ".attention.k_proj."),
    (r"\.attention\.attention\.value\.", ".attention.v_proj."),
    (r"\.attention\.output\.dense\.", ".attention.o_proj."),
    (r"\.intermediate\.dense\.", ".mlp.fc1."),
    (r"\.output\.dense\.", ".mlp.fc2."),
]
_IGNORED = re.compile(r"^vit\.(pooler\.|embeddings\.mask_token$)")


@dataclass
class ImportedViT:
    model: VisionTransformer  # eval mode
    labels: list[str]  # class names by id
    preprocessing: dict[str, Any]  # image_size, channels, mean, std, resample (as write_vit_dir takes)
    name: str


def _mlp_ratio(dim: int, hidden: int) -> float:
    """A ratio with ``int(dim * ratio) == hidden`` (ViTConfig stores a ratio, HF an integer size)."""
    ratio = hidden / dim
    for _ in range(4):
        if int(dim * ratio) == hidden:
            return ratio
        ratio = math.nextafter(ratio, math.inf)
    raise ValueError(f"intermediate_size {hidden} has no float ratio to hidden_size {dim}")


def _square(r: ConfigReader, key: str, default: int) -> int:
    value = r.get(key, default, (int, list, tuple))
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or value[0] != value[1]:
            r.fail(key, f"{value} is not square")
        value = value[0]
    return value


def vit_config_from_hf(path: Path, config: dict[str, Any], num_classes: int) -> ViTConfig:
    r = ConfigReader(path, config)
    act = r.get("hidden_act", "gelu", str)
    if act != "gelu":
        r.fail("hidden_act", f"{act!r} is not supported (only the exact 'gelu')")
    if not r.get("qkv_bias", True, bool):
        r.fail("qkv_bias", "false is not supported (our attention has one bias switch for qkv and the output)")
    dim, heads = r.get("hidden_size", 768, int), r.get("num_attention_heads", 12, int)
    head_dim = r.get("head_dim", None, int)
    if head_dim is not None and head_dim * heads != dim:
        r.fail("head_dim", f"{head_dim} x {heads} heads != hidden_size {dim}")
    channels = r.get("num_channels", 3, int)
    if channels not in (1, 3):
        r.fail("num_channels", f"{channels} is not supported (1 or 3)")
    try:
        return ViTConfig(
            image_size=_square(r, "image_size", 224),
            patch_size=_square(r, "patch_size", 16),
            in_channels=channels,
            num_classes=num_classes,
            dim=dim,
            depth=r.get("num_hidden_layers", 12, int),
            num_heads=heads,
            mlp_ratio=_mlp_ratio(dim, r.get("intermediate_size", 3072, int)),
            qkv_bias=True,
            layer_norm_eps=float(r.get("layer_norm_eps", 1e-12, (int, float))),
            dropout=0.0,
        )
    except ValueError as exc:
        raise ImportCheckpointError(f"{path}: {exc}") from None


def _labels(path: Path, config: dict[str, Any]) -> list[str]:
    id2label = config.get("id2label")
    if id2label is None:  # transformers' default: num_labels (2) generic names
        return [f"LABEL_{i}" for i in range(int(config.get("num_labels", 2)))]
    try:
        by_id = {int(k): str(v) for k, v in id2label.items()}
    except (AttributeError, ValueError):
        raise ImportCheckpointError(f"{path}: id2label must map integer ids to names") from None
    if sorted(by_id) != list(range(len(by_id))) or not by_id:
        raise ImportCheckpointError(f"{path}: id2label ids must be 0..{len(by_id) - 1}")
    return [by_id[i] for i in range(len(by_id))]


def state_from_hf_vit(state: dict[str, torch.Tensor], cfg: ViTConfig, source: Path) -> dict[str, torch.Tensor]:
    renamed = {}
    for key, value in state.items():
        for pattern, repl in _RENAMES:
            key = re.sub(pattern, repl, key)
        if not _IGNORED.match(key):
            renamed[key] = value
    state = renamed
    ours = {
        "cls_token": take(state, "vit.embeddings.cls_token", source, (1, 1, cfg.dim)),
        "pos_embed": take(state, "vit.embeddings.position_embeddings", source, (1, cfg.num_patches + 1, cfg.dim)),
        "norm.weight": take(state, "vit.layernorm.weight", source),
        "norm.bias": take(state, "vit.layernorm.bias", source),
        "head.weight": take(state, "classifier.weight", source, (cfg.num_classes, cfg.dim)),
        "head.bias": take(state, "classifier.bias", source),
    }
    for p in ("weight", "bias"):
        ours[f"patch_embed.proj.{p}"] = take(state, f"vit.embeddings.patch_embeddings.projection.{p}", source)
    for i in range(cfg.depth):
        t, o = f"vit.layers.{i}", f"blocks.{i}"
        for p in ("weight", "bias"):
            ours[f"{o}.attn.qkv.{p}"] = torch.cat([take(state, f"{t}.attention.{n}_proj.{p}", source) for n in "qkv"])
            pairs = [("attention.o_proj", "attn.proj"), ("layernorm_before", "norm1"), ("layernorm_after", "norm2")]
            pairs += [("mlp.fc1", "mlp.fc1"), ("mlp.fc2", "mlp.fc2")]
            for theirs, mine in pairs:
                ours[f"{o}.{mine}.{p}"] = take(state, f"{t}.{theirs}.{p}", source)
    if state:
        raise ImportCheckpointError(
            f"{source}: unexpected weights {sorted(state)[:5]} (not a ViTForImageClassification?)"
        )
    return ours


def preprocessing_from_hf(directory: Path, cfg: ViTConfig) -> dict[str, Any]:
    """``preprocessor_config.json`` -> the model directory's preprocessing (ViTImageProcessor defaults if absent)."""
    path = directory / "preprocessor_config.json"
    data = read_json(path, required=False) or {}
    r = ConfigReader(path, data)
    size = r.get("size", cfg.image_size, (int, dict))
    if isinstance(size, dict):
        if "height" in size and "width" in size and size["height"] == size["width"]:
            size = size["height"]
        else:
            r.fail("size", f"{size} is not a square height/width (the server resizes to image_size x image_size)")
    if size != cfg.image_size:
        r.fail("size", f"{size} differs from config.json image_size {cfg.image_size}")
    if r.get("do_center_crop", False, bool):
        r.fail("do_center_crop", "center cropping is not supported (the server resizes straight to image_size)")
    if not r.get("do_rescale", True, bool) or abs(r.get("rescale_factor", 1 / 255, (int, float)) - 1 / 255) > 1e-9:
        r.fail("rescale_factor", "pixels must be rescaled by 1/255 (the server feeds [0, 1] values)")
    resample = r.get("resample", 2, int)
    if resample not in RESAMPLE:
        r.fail("resample", f"PIL filter {resample} is not supported (one of {sorted(RESAMPLE)})")
    n = cfg.in_channels
    if r.get("do_normalize", True, bool):
        mean, std = r.get("image_mean", [0.5] * n, list), r.get("image_std", [0.5] * n, list)
    else:
        mean, std = [0.0] * n, [1.0] * n
    for key, values in (("image_mean", mean), ("image_std", std)):
        if len(values) != n or not all(isinstance(v, (int, float)) for v in values):
            r.fail(key, f"needs {n} numbers, got {values}")
    return {
        "image_size": cfg.image_size,
        "channels": n,
        "mean": [float(v) for v in mean],
        "std": [float(v) for v in std],
        "resample": RESAMPLE[resample],
    }


def load_hf_vit(path: Path | str) -> ImportedViT:
    """Import a local ViTForImageClassification directory (``config.json`` + weights,
    ``preprocessor_config.json`` optional)."""
    directory = model_dir(path)
    config = read_config(directory, "vit")
    labels = _labels(directory / "config.json", config)
    cfg = vit_config_from_hf(directory / "config.json", config, len(labels))
    model = VisionTransformer(cfg)
    state = state_from_hf_vit(load_weights(directory), cfg, directory)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:  # shape mismatches
        raise ImportCheckpointError(f"{directory}: weights do not fit config.json ({exc})") from None
    return ImportedViT(model.eval(), labels, preprocessing_from_hf(directory, cfg), directory.resolve().name)
