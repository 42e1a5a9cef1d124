"""Read a CTranslate2 model directory (``model.bin`` + ``config.json`` + vocabularies) without CTranslate2.

CTranslate2's Python package runs models but exposes no weights, so ``model.bin`` is parsed
here, as its C++ loader reads it (``src/models/model.cc``; written by ``specs/model_spec.py``
``ModelSpec._serialize``), little-endian throughout:

    u32 binary_version                       (1..6 are read)
    version >= 2: str spec_name, u32 spec_revision
    u32 n; n x variable:
        str name, u8 rank, rank x u32 dims,
        version >= 4: u8 dtype id, u32 byte count   (dtype ids: float32 int8 int16 int32 float16 bfloat16)
        else:         u8 item size, u32 item count
        bytes
    version >= 3: u32 n; n x (str alias, str variable name)
    str: u16 length including a final NUL, the UTF-8 bytes, NUL

Scalars (rank 0) are the spec's attributes (``pre_norm``, ``activation``, ``num_heads`` ...).
Quantized weights carry ``<name>_scale``: int8 per output row, int16 one scale (older int16
models have none: CTranslate2's global 1000); :meth:`CT2Model.weight` dequantizes them to
float32 as CTranslate2's ``Dequantize`` does (value / scale).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .hf_files import LFS_POINTER, ImportCheckpointError, unreadable

MAX_BINARY_VERSION = 6
NEWER_BINARY_VERSIONS = range(MAX_BINARY_VERSION + 1, 100)  # what a later CTranslate2 may write
DTYPES = ("float32", "int8", "int16", "int32", "float16", "bfloat16")  # CTranslate2's DataType enum order
ITEM_SIZES = {4: "float32", 2: "int16", 1: "int8"}  # binary version < 4: the dtype from the item size
INT16_GLOBAL_SCALE = 1000.0  # ops::Quantize::global_int16_scale: int16 models saved without a scale
# Features a TransformerSpec may hold that attnserve's model lacks, by a part of their variables'
# names, so a refusal names the feature and the training option behind it, not only the variables.
RELATIVE = "relative positions (OpenNMT-py's max_relative_positions > 0)"
FEATURES = {
    "relative_position_keys": RELATIVE,
    "relative_position_values": RELATIVE,
    "relative_attention_bias": "T5-style relative attention biases",
    "relative_attention_max_distance": "T5-style relative attention biases",
    "layernorm_embedding": "a layer norm on the embeddings (layernorm_embedding)",
    "linear_0_noact": "a gated feed-forward (GLU)",
    "rotary_dim": "rotary position embeddings",
    "num_heads_kv": "grouped-query attention (num_heads_kv)",
}
SHOWN = 3  # variable names quoted per feature


@dataclass
class CT2Model:
    """A CTranslate2 model directory, read: every variable by name (aliases resolved to the same array)."""

    path: Path  # the directory
    binary_version: int
    spec: str  # "TransformerSpec", ...
    revision: int
    variables: dict[str, np.ndarray]
    config: dict[str, Any] = field(default_factory=dict)  # config.json ({} for models without one)
    used: set[str] = field(default_factory=set)  # names read so far (what the mapping left is reported)

    def has(self, name: str) -> bool:
        return name in self.variables

    def attribute(self, name: str, default: Any = None) -> Any:
        """A scalar attribute as a Python value (``default`` when absent)."""
        if name not in self.variables:
            return default
        value = self.variables[name]
        self.used.add(name)
        if value.ndim != 0:
            where = self.path / "model.bin"
            raise ImportCheckpointError(f"{where}: {name!r} should be a scalar, has shape {value.shape}")
        return value.item()

    def weight(self, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """Variable ``name`` as float32 (dequantized with its ``_scale``); ``shape`` checked when given."""
        if name not in self.variables:
            raise ImportCheckpointError(f"{self.path / 'model.bin'}: variable {name!r} missing")
        value = self.variables[name]
        self.used.add(name)
        if value.dtype in (np.int8, np.int16):
            scale = self.variables.get(f"{name}_scale")
            self.used.add(f"{name}_scale")
            if scale is None and value.dtype == np.int16:
                scale = np.float32(INT16_GLOBAL_SCALE)
            elif scale is None:
                raise ImportCheckpointError(f"{self.path / 'model.bin'}: int8 variable {name!r} has no {name}_scale")
            scale = scale.astype(np.float32)
            value = value.astype(np.float32) / (scale[:, None] if scale.ndim == 1 and value.ndim == 2 else scale)
        elif value.dtype != np.float32:
            value = value.astype(np.float32)
        if shape is not None and tuple(value.shape) != tuple(shape):
            raise ImportCheckpointError(
                f"{self.path / 'model.bin'}: variable {name!r} has shape {tuple(value.shape)}, expected {tuple(shape)}"
            )
        return value


class _Reader:
    def __init__(self, data: bytes, path: Path) -> None:
        self.data, self.pos, self.path = memoryview(data), 0, path

    def take(self, n: int, what: str) -> memoryview:
        if self.pos + n > len(self.data):
            raise ImportCheckpointError(
                f"{self.path}: incomplete (truncated?): {what} of {n} bytes at byte {self.pos}, "
                f"the file has {len(self.data)}"
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str, what: str) -> int:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))[0]

    def string(self, what: str) -> str:
        n = self.unpack("H", f"{what} length")
        if n == 0:
            raise ImportCheckpointError(f"{self.path}: invalid string length 0 at byte {self.pos - 2} ({what})")
        raw = bytes(self.take(n, what))
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError:
            raise ImportCheckpointError(f"{self.path}: {what} at byte {self.pos - n} is not UTF-8") from None


def read_model_bin(path: Path) -> tuple[int, str, int, dict[str, np.ndarray]]:
    """``model.bin`` -> (binary version, spec name, spec revision, variables with aliases resolved)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ImportCheckpointError(f"{path}: {exc.strerror or exc}") from None
    if data.startswith(LFS_POINTER):
        raise unreadable(path, "model.bin", "a Git LFS pointer")
    r = _Reader(data, path)
    version = r.unpack("I", "binary version")
    if version in NEWER_BINARY_VERSIONS:
        raise ImportCheckpointError(
            f"{path}: binary version {version}, written by a newer CTranslate2 than this importer reads "
            f"(binary versions 1..{MAX_BINARY_VERSION})"
        )
    if not 1 <= version <= MAX_BINARY_VERSION:
        raise ImportCheckpointError(
            f"{path}: binary version {version} is not one this importer reads (1..{MAX_BINARY_VERSION}); "
            "not a CTranslate2 model.bin?"
        )
    spec, revision = "", 1
    if version >= 2:
        spec = r.string("spec name")
        revision = r.unpack("I", "spec revision")
    variables: dict[str, np.ndarray] = {}
    for _ in range(r.unpack("I", "variable count")):
        name = r.string("variable name")
        shape = tuple(r.unpack("I", f"{name} dimension") for _ in range(r.unpack("B", f"{name} rank")))
        if version >= 4:
            type_id = r.unpack("B", f"{name} dtype")
            if type_id >= len(DTYPES):
                raise ImportCheckpointError(f"{path}: variable {name!r} has unknown dtype id {type_id}")
            dtype, nbytes = DTYPES[type_id], r.unpack("I", f"{name} size")
        else:
            item = r.unpack("B", f"{name} item size")
            if item not in ITEM_SIZES:
                raise ImportCheckpointError(f"{path}: variable {name!r} has unknown item size {item}")
            dtype = ITEM_SIZES[item]
            nbytes = r.unpack("I", f"{name} size") * item
        variables[name] = _array(r.take(nbytes, f"variable {name!r}"), dtype, shape, name, path)
    if version >= 3:
        for _ in range(r.unpack("I", "alias count")):
            alias, target = r.string("alias"), r.string("alias target")
            if target not in variables:
                raise ImportCheckpointError(f"{path}: alias {alias!r} names a missing variable {target!r}")
            variables[alias] = variables[target]
            if f"{target}_scale" in variables:  # the C++ loader aliases the quantization scale too
                variables[f"{alias}_scale"] = variables[f"{target}_scale"]
    if r.pos != len(data):
        raise ImportCheckpointError(f"{path}: {len(data) - r.pos} bytes after the last entry (corrupt?)")
    return version, spec, revision, variables


def _array(raw: memoryview, dtype: str, shape: tuple[int, ...], name: str, path: Path) -> np.ndarray:
    count = int(np.prod(shape)) if shape else 1
    size = 2 if dtype in ("float16", "bfloat16", "int16") else (1 if dtype == "int8" else 4)
    if count * size != len(raw):
        raise ImportCheckpointError(f"{path}: variable {name!r} has an invalid payload size ({len(raw)} bytes)")
    if dtype == "bfloat16":  # numpy has none: the upper 16 bits of a float32
        return (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)


def describe_unsupported(names: list[str]) -> str:
    """Variables nothing reads, grouped by the feature they belong to (:data:`FEATURES`), for an error."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(next((FEATURES[p] for p in name.split("/") if p in FEATURES), ""), []).append(name)
    parts = []
    for feature, group in groups.items():
        shown = ", ".join(group[:SHOWN]) + (f" and {len(group) - SHOWN} more" if len(group) > SHOWN else "")
        parts.append(f"{feature} in {shown}" if feature else shown)
    return "; ".join(parts)


def read_vocabulary(directory: Path, name: str) -> list[str] | None:
    """``<name>_vocabulary.json`` (a JSON list) or the older ``.txt`` (one token per line); None if neither."""
    path = directory / f"{name}_vocabulary.json"
    if path.is_file():
        try:
            tokens = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise unreadable(path, "not a JSON list of tokens", exc) from None
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise ImportCheckpointError(f"{path}: not a JSON list of tokens")
        return tokens
    path = directory / f"{name}_vocabulary.txt"
    if path.is_file():
        try:
            return path.read_text(encoding="utf-8").split("\n")[:-1] if path.stat().st_size else []
        except (OSError, UnicodeDecodeError) as exc:
            raise ImportCheckpointError(f"{path}: cannot be read ({exc})") from None
    return None


def read_ct2_model(directory: Path) -> tuple[CT2Model, list[str], list[str]]:
    """A CTranslate2 directory -> (model, source vocabulary, target vocabulary)."""
    if not (directory / "model.bin").is_file():
        raise ImportCheckpointError(f"{directory}: no model.bin (not a CTranslate2 model directory)")
    version, spec, revision, variables = read_model_bin(directory / "model.bin")
    config: dict[str, Any] = {}
    if (directory / "config.json").is_file():
        try:
            config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise unreadable(directory / "config.json", "not valid JSON", exc) from None
        if not isinstance(config, dict):
            raise ImportCheckpointError(f"{directory / 'config.json'}: not a JSON object")
    shared = read_vocabulary(directory, "shared")
    source = shared if shared is not None else read_vocabulary(directory, "source")
    target = shared if shared is not None else read_vocabulary(directory, "target")
    if source is None or target is None:
        raise ImportCheckpointError(
            f"{directory}: no vocabulary (shared_vocabulary.json, or source_ and target_vocabulary.json)"
        )
    return CT2Model(directory, version, spec, revision, variables, config), source, target
