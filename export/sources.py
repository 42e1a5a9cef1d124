"""Where an exported model comes from: an attnserve checkpoint, a preset with random
weights, or a local Hugging Face directory (through :mod:`attnserve.export.importers`).

Each loader returns a :class:`Source`: the model in eval mode plus what the checkpoint
says about serving it (tokenizer, labels, preprocessing, limits) and a description of
the source for ``model.json``'s ``extra``.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import nn

from attnserve.contract.manifest import sha256_file
from attnserve.models import PRESETS, TranslationConfig, ViTConfig, create_model, load_checkpoint
from attnserve.models.checkpoint import read_checkpoint_metadata

from .modeldir import ExportError, placeholder_tokenizer

COMMANDS = {"translation": "translation", "vit": "vit"}  # checkpoint kind -> CLI subcommand
CONFIGS = {"translation": TranslationConfig, "vit": ViTConfig}
SERVING_KEYS = ("labels", "preprocessing", "limits")  # checkpoint extra consumed by the export


@dataclass
class Source:
    model: nn.Module
    description: dict[str, Any]  # -> model.json extra.source
    tokenizer: Tokenizer | Path | None = None
    labels: list[str] | None = None
    preprocessing: dict[str, Any] | None = None
    limits: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # the checkpoint's free-form extra (training metrics, ...)
    family: str = "attnserve"  # model.json's family
    languages: dict[str, Any] | None = None  # model.json's languages (contract.manifest.Languages fields)
    source_eos: bool = True  # the model reads sources ending with its end token (CTranslate2's may not)


def from_checkpoint(kind: str, path: Path, *, keep_rate: float | None = None) -> Source:
    """An attnserve ``.safetensors`` checkpoint of ``kind`` ("translation" | "vit")."""
    found, _, _ = read_checkpoint_metadata(path)  # CheckpointError: missing or not a checkpoint
    if found != kind:
        raise ExportError(f"{path} is a {found} checkpoint; export it with `attnserve-export {COMMANDS[found]}`")
    overrides = {} if keep_rate is None else {"keep_rate": keep_rate}
    model, extra = load_checkpoint(path, **overrides)
    serving = {k: extra[k] for k in SERVING_KEYS if k in extra}
    return Source(
        model=model,
        description={"type": "checkpoint", "path": str(Path(path).resolve()), "sha256": sha256_file(path)},
        labels=serving.get("labels"),
        preprocessing=serving.get("preprocessing"),
        limits=serving.get("limits") or {},
        extra={k: v for k, v in extra.items() if k not in SERVING_KEYS},
    )


def from_preset(kind: str, name: str, *, seed: int, keep_rate: float | None = None) -> Source:
    """A preset with random weights (``torch.manual_seed(seed)``): for tests and benchmarks."""
    if name not in PRESETS:
        raise ExportError(f"unknown preset {name!r}; {kind} presets: {', '.join(presets_of(kind))}")
    if not isinstance(PRESETS[name], CONFIGS[kind]):
        other = next(k for k, cls in CONFIGS.items() if isinstance(PRESETS[name], cls))
        raise ExportError(f"preset {name!r} is a {other} model; export it with `attnserve-export {other}`")
    torch.manual_seed(seed)
    model = create_model(name, **({} if keep_rate is None else {"keep_rate": keep_rate})).eval()
    return Source(model=model, description={"type": "preset", "preset": name, "seed": seed, "weights": "random"})


def presets_of(kind: str) -> list[str]:
    return sorted(n for n, cfg in PRESETS.items() if isinstance(cfg, CONFIGS[kind]))


def _importers(flag: str):
    try:
        return importlib.import_module("attnserve.export.importers")
    except ImportError as exc:
        raise ExportError(f"{flag} needs the importers: pip install 'attnserve[import]' ({exc})") from None


def from_hf(path: Path, flag: str = "--from-hf", expected: str | None = None) -> Source:
    """A local Hugging Face translation directory (MarianMT / opus-mt, M2M100, NLLB), by its model_type."""
    try:
        imported = _importers(flag).load_hf_translation(path, expected)
    except ImportError as exc:  # transformers / sentencepiece missing
        raise ExportError(f"{flag} needs the importers: pip install 'attnserve[import]' ({exc})") from None
    return Source(
        model=imported.model.eval(),
        description={"type": imported.family, "path": str(Path(path).resolve()), "name": imported.name},
        tokenizer=imported.tokenizer,
        limits=dict(imported.limits or {}),
        family=imported.family,
        languages=imported.languages,
    )


def from_argos(path: Path | str, *, compare: bool = True) -> Source:
    """One Argos Translate package (a ``.argosmodel`` file or an unpacked package directory): its
    CTranslate2 model read into ours, checked against CTranslate2 when installed (``compare``)."""
    try:
        imported = _importers("--from-argos").load_argos(path, compare=compare)
    except ImportError as exc:  # sentencepiece missing
        raise ExportError(f"--from-argos needs the importers: pip install 'attnserve[import]' ({exc})") from None
    description = {"type": "argos", "path": str(Path(path).resolve()), "name": imported.name, **imported.details}
    return Source(
        model=imported.model.eval(),
        description=description | {"checks": imported.checks},
        tokenizer=imported.tokenizer,
        limits=dict(imported.limits or {}),
        family=imported.family,
        languages=imported.languages,
        source_eos=bool(imported.details.get("source_eos", True)),
    )


def from_marian(path: Path) -> Source:
    """A local Hugging Face MarianMT (opus-mt) directory (``--from-marian``: ``--from-hf`` that insists on it)."""
    return from_hf(path, "--from-marian", expected="marian")


def from_hf_vit(path: Path, *, keep_rate: float | None = None) -> Source:
    """A local Hugging Face ViTForImageClassification directory."""
    try:
        imported = _importers("--from-hf-vit").load_hf_vit(path)
    except ImportError as exc:
        raise ExportError(f"--from-hf-vit needs the importers: pip install 'attnserve[import]' ({exc})") from None
    model = imported.model.eval()
    if keep_rate is not None:
        model = with_config(model, keep_rate=keep_rate)
    return Source(
        model=model,
        description={"type": "hf-vit", "path": str(Path(path).resolve()), "name": imported.name},
        labels=list(imported.labels),
        preprocessing=dict(imported.preprocessing),
    )


def with_config(model: nn.Module, **overrides) -> nn.Module:
    """The same weights in a model built with config fields that do not change shapes (keep_rate)."""
    cfg = dataclasses.replace(model.cfg, **overrides)
    rebuilt = type(model)(cfg)
    rebuilt.load_state_dict(model.state_dict())
    return rebuilt.eval()


def read_labels(path: Path) -> list[str]:
    """A JSON list of class names (a ``.json`` file, or any file whose text starts with ``[``),
    or a text file with one name per line."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ExportError(f"--labels {path}: {exc.strerror or exc}") from None
    if Path(path).suffix == ".json" or text.lstrip().startswith("["):
        try:
            labels = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ExportError(f"--labels {path}: not valid JSON ({exc})") from None
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise ExportError(f"--labels {path}: expected a JSON list of strings")
        return labels
    return [line.strip() for line in text.splitlines() if line.strip()]


def tokenizer_for(source: Source, tokenizer: Path | None, *, checkpoint: Path | None) -> tuple[Any, dict[str, Any]]:
    """(tokenizer, extra) for a translation export.

    ``--tokenizer`` wins; an imported directory brings its own; a checkpoint needs
    ``--tokenizer``; a preset without one gets :func:`placeholder_tokenizer` (recorded).
    """
    if tokenizer is not None:
        return tokenizer, {}
    if source.tokenizer is not None:
        return source.tokenizer, {}
    if checkpoint is not None:
        beside = Path(checkpoint).with_name("tokenizer.json")
        hint = f" (found {beside})" if beside.is_file() else ""
        raise ExportError(f"--checkpoint needs --tokenizer PATH, the tokenizer the model was trained with{hint}")
    cfg = source.model.cfg
    placeholder = placeholder_tokenizer(cfg.vocab_size, cfg.pad_id, cfg.bos_id, cfg.eos_id, cfg.unk_id)
    note = "placeholder: word-level 't<id>' tokens for a preset with random weights (tests, benchmarks)"
    return placeholder, {"tokenizer": note}
