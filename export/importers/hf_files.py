"""Reading local Hugging Face model directories: ``config.json``, weights, optional packages.

Only local directories are read; nothing is ever downloaded. Weights come from
``model.safetensors`` (or a sharded ``model.safetensors.index.json``), else from
``pytorch_model.bin`` (or its index), loaded with ``weights_only=True``.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import torch

from attnserve.export.modeldir import ExportError

INSTALL_HINT = "pip install 'attnserve[import]'"
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


class ImportCheckpointError(ExportError):
    """A Hugging Face directory that cannot be imported; the message names the file and the field."""


LFS_POINTER = b"version https://git-lfs.github.com/spec/"  # how a Git LFS pointer file starts


def unreadable(path: Path, what: str, reason: object) -> ImportCheckpointError:
    """``path`` could not be read as ``what``: the error names the file and why. A Git LFS pointer
    (a repository cloned without git-lfs holds these instead of its weights and tokenizer
    models) is named as such, with what fetches the real file."""
    try:
        with path.open("rb") as f:
            pointer = f.read(len(LFS_POINTER)) == LFS_POINTER
    except OSError:
        pointer = False
    if pointer:
        return ImportCheckpointError(
            f"{path}: a Git LFS pointer, not the file itself (cloned without git-lfs?): run "
            "`git lfs install && git lfs pull` in the directory, or use `attnserve-export pull`"
        )
    return ImportCheckpointError(f"{path}: {what} ({reason})")


def require_module(name: str, purpose: str) -> ModuleType:
    """Import an optional package (transformers, sentencepiece) or say how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise ImportCheckpointError(f"{purpose} needs the {name!r} package: {INSTALL_HINT}") from None


def model_dir(path: Path | str) -> Path:
    path = Path(path)
    if not path.is_dir():
        raise ImportCheckpointError(f"{path}: not a directory (expected a local Hugging Face model directory)")
    return path


def read_json(path: Path, required: bool = True) -> dict[str, Any] | None:
    if not path.is_file():
        if required:
            raise ImportCheckpointError(f"{path}: file not found")
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise unreadable(path, "not valid JSON", exc) from None
    if not isinstance(data, dict):
        raise ImportCheckpointError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def special_tokens(tok_cfg: dict[str, Any], defaults: dict[str, str]) -> dict[str, str]:
    """``{kind: token}`` from tokenizer_config.json's ``{kind}_token`` entries (a string, or an
    AddedToken dict: its ``content``), ``defaults[kind]`` where an entry is absent."""
    names = {kind: tok_cfg.get(f"{kind}_token", default) for kind, default in defaults.items()}
    return {
        k: v if isinstance(v, str) else v.get("content", "") if isinstance(v, dict) else "" for k, v in names.items()
    }


SPECIALS = {"unk": "<unk>", "eos": "</s>", "pad": "<pad>"}  # what every importer reads


def read_config(directory: Path, model_type: str) -> dict[str, Any]:
    """``config.json`` of ``directory``, checked to be of ``model_type``."""
    path = directory / "config.json"
    config = read_json(path)
    if config.get("model_type") != model_type:
        raise ImportCheckpointError(f"{path}: model_type is {config.get('model_type')!r}, expected {model_type!r}")
    return config


class ConfigReader:
    """Typed access to ``config.json`` fields with errors that name the file and the field."""

    def __init__(self, path: Path, config: dict[str, Any]) -> None:
        self.path, self.config = path, config

    def get(self, key: str, default: Any, types: type | tuple[type, ...]) -> Any:
        value = self.config.get(key)
        if value is None:  # absent or null: transformers takes its default
            value = default
        if value is None:
            return None
        if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
            self.fail(key, f"expected {types}, got {value!r}")
        if not isinstance(value, types):
            self.fail(key, f"expected {getattr(types, '__name__', types)}, got {value!r}")
        return value

    def fail(self, key: str, message: str) -> NoReturn:
        raise ImportCheckpointError(f"{self.path}: {key}: {message}")


def _load_one(path: Path) -> dict[str, torch.Tensor]:
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - safetensors / pickle raise many kinds
        raise unreadable(path, "cannot read weights", exc) from None
    if not isinstance(state, dict):
        raise ImportCheckpointError(f"{path}: expected a state dict, got {type(state).__name__}")
    return state


def load_weights(directory: Path) -> dict[str, torch.Tensor]:
    """All tensors of the directory's checkpoint, float32, by their stored names."""
    for name in WEIGHT_FILES:
        path = directory / name
        if not path.is_file():
            continue
        if name.endswith(".index.json"):
            weight_map = read_json(path).get("weight_map")
            if not isinstance(weight_map, dict):
                raise ImportCheckpointError(f"{path}: weight_map missing or not an object")
            state: dict[str, torch.Tensor] = {}
            for shard in sorted(set(weight_map.values())):
                shard_path = directory / shard
                if not shard_path.is_file():
                    raise ImportCheckpointError(f"{path}: weight_map names {shard!r}, which is missing")
                state.update(_load_one(shard_path))
        else:
            state = _load_one(path)
        return {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
    raise ImportCheckpointError(f"{directory}: no weights found (looked for {', '.join(WEIGHT_FILES)})")


def take(state: dict[str, torch.Tensor], key: str, source: Path, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """Pop a tensor, failing with the checkpoint's name when it is missing or mis-shaped."""
    if key not in state:
        raise ImportCheckpointError(f"{source}: weight {key!r} missing")
    tensor = state.pop(key)
    if shape is not None and tuple(tensor.shape) != tuple(shape):
        raise ImportCheckpointError(f"{source}: weight {key!r} has shape {tuple(tensor.shape)}, expected {shape}")
    return tensor
