"""``model.json``: the only contract between the export CLI and the server.

Torch-free on purpose: the export writes it with :func:`write_manifest`, the server
reads it with :func:`load_manifest`, which checks every field, the graphs' input and
output names (against :mod:`.graph_io`, for the kind and decoder layer count) and every
file's sha256, and raises :class:`ManifestError` naming the file and the field. New
fields are optional with defaults, so older model directories still load
(``format_version`` stays 1).

Layout of ``model.json`` (``format_version`` 1)::

    {
      "format_version": 1, "attnserve_version": "0.1.0",
      "name": "translator-en-de", "kind": "translation" | "image-classification",
      "attention": "fused" | "onnx" | "decomposed", "precision": "fp32" | "fp16" | "int8",
      "opset": 23,
      "config": {...the model config...},
      "graphs": {"encoder": {"file": "encoder.onnx", "inputs": [...], "outputs": [...]},
                 "decoder": {...}}                    # translation
              | {"model": {...}},                      # image-classification
      "files": {"encoder.onnx": {"sha256": "...", "bytes": 123}, ...},   # every file but model.json
      "tokenizer": {"file": "tokenizer.json", "pad_id": 0, "bos_id": 1, "eos_id": 2, "unk_id": 3,
                    "decoder_start_id": 1,             # optional: decoding starts here (default bos_id)
                    "never_generate_ids": [0, 1]},     # optional: never chosen (default pad and bos)
      "family": "attnserve" | "marian" | "m2m_100" | "argos",  # optional: the weights' origin (default attnserve)
      "languages": {"source": ["en"], "target": ["de", "fr"],           # optional, translation
                    "tokens": {"de": ">>deu<<", ...},                  # code -> the token that selects it
                    "default_source": "en", "default_target": null},
      "limits": {"max_source_len": 256, "max_target_len": 256},          # translation
      "kv_cache": "in-place" | "left-padded",   # optional, translation: the decoder's cache layout
                                                # (contract.kinds; absent: "left-padded", older directories)
      "labels": ["0", "1", ...],                                          # image-classification
      "preprocessing": {"image_size": 32, "channels": 1, "mean": [0.5], "std": [0.5],
                        "resample": "bilinear", "invert": false}          # image-classification
      "quality": {"features": [...], "mean": [...], "scale": [...], "weights": [...], "bias": 0.0},
                # optional, translation: the quality score's calibration (contract.quality)
      "extra": {...}   # free-form: training metrics, source checkpoint, ...
    }
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from .graph_io import STEP_ATTENTION, AlignerIO, DecoderIO, expected_io
from .kinds import (
    ATTENTION_TARGETS,
    GRAPHS_BY_KIND,
    IN_PLACE,
    KINDS,
    KV_CACHE_LAYOUTS,
    LEFT_PADDED,
    OPTIONAL_GRAPHS,
    PRECISIONS,
    RESAMPLE,
    TRANSLATION,
)
from .manifest_types import (
    FORMAT_VERSION,
    GraphSpec,
    Languages,
    Manifest,
    ManifestError,
    Preprocessing,
    TokenizerSpec,
)
from .quality import parse_calibration

MANIFEST_NAME = "model.json"
TRANSLATION_CONFIG_INTS = ("decoder_layers", "num_heads", "d_model")  # what decoding needs to size the cache


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_entries(model_dir: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    """sha256 and size of each named file in ``model_dir``."""
    return {n: {"sha256": sha256_file(model_dir / n), "bytes": (model_dir / n).stat().st_size} for n in sorted(names)}


def write_manifest(model_dir: Path, manifest: Manifest) -> Path:
    path = Path(model_dir) / MANIFEST_NAME
    path.write_text(json.dumps(manifest.to_json(), indent=2, sort_keys=False) + "\n")
    return path


def _require(data: dict, key: str, types, path: Path, prefix: str = "") -> Any:
    name = f"{prefix}{key}"
    if key not in data:
        raise ManifestError(path, name, "missing")
    value = data[key]
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
        raise ManifestError(path, name, f"expected {_type_names(types)}, got {type(value).__name__} {value!r:.60}")
    return value


def _as_tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def _type_names(types) -> str:
    return " or ".join(t.__name__ for t in _as_tuple(types))


def _choice(data: dict, key: str, choices: tuple, path: Path) -> str:
    value = _require(data, key, str, path)
    if value not in choices:
        raise ManifestError(path, key, f"{value!r} is not one of {', '.join(choices)}")
    return value


def parse_manifest(data: Any, path: Path) -> Manifest:
    """Validate the decoded JSON of ``path`` and build a :class:`Manifest`."""
    if not isinstance(data, dict):
        raise ManifestError(path, "(root)", "expected a JSON object")
    version = _require(data, "format_version", int, path)
    if version != FORMAT_VERSION:
        raise ManifestError(
            path, "format_version", f"unsupported version {version} (this server reads {FORMAT_VERSION})"
        )
    kind = _choice(data, "kind", KINDS, path)
    graphs = _parse_graphs(_require(data, "graphs", dict, path), kind, path)
    files = _require(data, "files", dict, path)
    for fname, entry in files.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
            raise ManifestError(path, f"files.{fname}.sha256", "missing")
    manifest = Manifest(
        name=_require(data, "name", str, path),
        kind=kind,
        attention=_choice(data, "attention", ATTENTION_TARGETS, path),
        precision=_choice(data, "precision", PRECISIONS, path),
        opset=_require(data, "opset", int, path),
        config=_require(data, "config", dict, path),
        graphs=graphs,
        files=files,
        limits=data.get("limits") or {},
        extra=data.get("extra") or {},
        family=_require(data, "family", str, path) if "family" in data else "attnserve",
        format_version=version,
        attnserve_version=str(data.get("attnserve_version", "")),
        kv_cache=_choice(data, "kv_cache", KV_CACHE_LAYOUTS, path) if "kv_cache" in data else LEFT_PADDED,
    )
    if manifest.kv_cache == IN_PLACE and (kind != TRANSLATION or manifest.attention != "fused"):
        raise ManifestError(path, "kv_cache", "in-place needs a translation model with attention 'fused'")
    for g in graphs.values():
        if g.file not in files:
            raise ManifestError(path, "files", f"graph file {g.file!r} has no sha256 entry")
    if kind == TRANSLATION:
        _check_translation_config(manifest.config, path)
    _check_graph_io(manifest, path)
    if kind == TRANSLATION:
        return _with_translation_fields(manifest, data, path)
    labels = _require(data, "labels", list, path)
    if not labels or not all(isinstance(x, str) for x in labels):
        raise ManifestError(path, "labels", "expected a non-empty list of strings")
    prep = _parse_preprocessing(_require(data, "preprocessing", dict, path), path)
    return replace(manifest, labels=list(labels), preprocessing=prep)


def _parse_graphs(graphs_raw: dict, kind: str, path: Path) -> dict[str, GraphSpec]:
    """The graphs ``kind`` needs, and those of its optional graphs the directory has."""
    graphs = {}
    optional = [g for g in OPTIONAL_GRAPHS[kind] if g in graphs_raw]
    for gname in (*GRAPHS_BY_KIND[kind], *optional):
        g = _require(graphs_raw, gname, dict, path, "graphs.")
        prefix = f"graphs.{gname}."
        inputs = _require(g, "inputs", list, path, prefix)
        outputs = _require(g, "outputs", list, path, prefix)
        if not all(isinstance(x, str) for x in inputs + outputs):
            raise ManifestError(path, f"graphs.{gname}", "inputs and outputs must be lists of names")
        graphs[gname] = GraphSpec(_require(g, "file", str, path, prefix), inputs, outputs)
    return graphs


def _check_translation_config(config: dict, path: Path) -> None:
    for key in TRANSLATION_CONFIG_INTS:
        if _require(config, key, int, path, "config.") < 1:
            raise ManifestError(path, f"config.{key}", f"must be >= 1, got {config[key]}")
    if config["d_model"] % config["num_heads"]:
        raise ManifestError(path, "config.num_heads", "must divide config.d_model")


def _with_translation_fields(manifest: Manifest, data: dict, path: Path) -> Manifest:
    """``manifest`` with what only a translation model has: tokenizer, languages, limits, quality."""
    tokenizer = _parse_tokenizer(_require(data, "tokenizer", dict, path), manifest.files, path)
    languages = _parse_languages(data.get("languages"), path)
    for key in ("max_source_len", "max_target_len"):
        value = _require(manifest.limits, key, int, path, "limits.")
        if value < 1:
            raise ManifestError(path, f"limits.{key}", f"must be >= 1, got {value}")
    manifest = replace(manifest, languages=languages, tokenizer=tokenizer)
    if data.get("quality") is not None:
        try:
            manifest = replace(manifest, quality=parse_calibration(data["quality"]))
        except ValueError as exc:
            where, message = str(exc).split(": ", 1)  # "quality.scale: every scale must be > 0"
            raise ManifestError(path, where, message) from None
    return manifest


def _parse_tokenizer(tok: dict, files: dict, path: Path) -> TokenizerSpec:
    ids = {k: _require(tok, k, int, path, "tokenizer.") for k in ("pad_id", "bos_id", "eos_id", "unk_id")}
    if tok.get("decoder_start_id") is not None:
        ids["decoder_start_id"] = _require(tok, "decoder_start_id", int, path, "tokenizer.")
    if tok.get("never_generate_ids") is not None:
        never = _require(tok, "never_generate_ids", list, path, "tokenizer.")
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in never):
            raise ManifestError(path, "tokenizer.never_generate_ids", "expected a list of token ids")
        ids["never_generate_ids"] = never
    tok_file = _require(tok, "file", str, path, "tokenizer.")
    if tok_file not in files:
        raise ManifestError(path, "files", f"tokenizer file {tok_file!r} has no sha256 entry")
    return TokenizerSpec(file=tok_file, **ids)


def _parse_preprocessing(pre: dict, path: Path) -> Preprocessing:
    size = _require(pre, "image_size", int, path, "preprocessing.")
    channels = _require(pre, "channels", int, path, "preprocessing.")
    if channels not in (1, 3):
        raise ManifestError(path, "preprocessing.channels", f"must be 1 or 3, got {channels}")
    mean = _require(pre, "mean", list, path, "preprocessing.")
    std = _require(pre, "std", list, path, "preprocessing.")
    if len(mean) != channels or len(std) != channels or any(s == 0 for s in std):
        raise ManifestError(path, "preprocessing.mean/std", f"need {channels} values each, std non-zero")
    resample = pre.get("resample", "bilinear")
    if resample not in RESAMPLE:
        raise ManifestError(path, "preprocessing.resample", f"{resample!r} is not one of {', '.join(RESAMPLE)}")
    auto_invert, crop = bool(pre.get("auto_invert", False)), bool(pre.get("crop_to_ink", False))
    if (auto_invert or crop) and channels != 1:
        raise ManifestError(path, "preprocessing.auto_invert/crop_to_ink", "need channels 1 (grayscale)")
    return Preprocessing(
        size,
        channels,
        [float(x) for x in mean],
        [float(x) for x in std],
        resample,
        bool(pre.get("invert", False)),
        auto_invert,
        crop,
    )


def _parse_languages(raw: Any, path: Path) -> Languages | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ManifestError(path, "languages", f"expected an object, got {type(raw).__name__}")
    lists = {}
    for key in ("source", "target"):
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(x, str) and x for x in value):
            raise ManifestError(path, f"languages.{key}", "expected a list of language codes")
        lists[key] = value
    tokens = raw.get("tokens", {})
    if not isinstance(tokens, dict) or not all(isinstance(v, str) for v in tokens.values()):
        raise ManifestError(path, "languages.tokens", "expected an object of language code -> token")
    defaults = {}
    for key, side in (("default_source", "source"), ("default_target", "target")):
        value = raw.get(key)
        if value is not None and value not in lists[side]:
            raise ManifestError(path, f"languages.{key}", f"{value!r} is not one of languages.{side}")
        defaults[key] = value
    return Languages(lists["source"], lists["target"], dict(tokens), **defaults)


def _check_graph_io(manifest: Manifest, path: Path) -> None:
    """The graphs' input and output lists are the contract's, name for name and in order."""
    expected = expected_io(manifest.kind, manifest.config, manifest.kv_cache)
    layers = f" with {manifest.config['decoder_layers']} decoder layers" if manifest.kind == TRANSLATION else ""
    for role, io in expected.items():
        graph = manifest.graphs.get(role)
        if graph is None:  # an optional graph the directory does not have
            continue
        if role == "aligner" and graph.inputs == AlignerIO.encoding().inputs:
            io = AlignerIO.encoding()  # exported before the aligner took the encoder's output
        if isinstance(io, DecoderIO) and graph.outputs[-1:] == [STEP_ATTENTION]:
            io = io.with_attention()  # a fused export's decoder also returns its step's attention
        for side, got, want in (("inputs", graph.inputs, io.inputs), ("outputs", graph.outputs, io.outputs)):
            if got == want:
                continue
            where = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            detail = (
                f"name {where} is {got[where]!r}, expected {want[where]!r}"
                if where < min(len(got), len(want))
                else f"{len(got)} names, expected {len(want)}"
            )
            raise ManifestError(path, f"graphs.{role}.{side}", f"{detail} (the contract for the {role} graph{layers})")


def load_manifest(model_dir: Path | str, verify_files: bool = True) -> Manifest:
    """Read and validate ``model_dir/model.json``; with ``verify_files``, check every sha256."""
    model_dir = Path(model_dir)
    path = model_dir / MANIFEST_NAME
    if not path.is_file():
        raise ManifestError(path, "(file)", "not found: not a model directory (attnserve-export writes one)")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(path, "(file)", f"not valid JSON: {exc}") from None
    manifest = parse_manifest(data, path)
    if verify_files:
        verify_manifest_files(model_dir, manifest)
    return manifest


def verify_manifest_files(model_dir: Path, manifest: Manifest) -> None:
    """Every listed file exists, has the listed size and sha256."""
    for fname, entry in manifest.files.items():
        fpath = model_dir / fname
        if not fpath.is_file():
            raise ManifestError(fpath, f"files.{fname}", "listed in model.json but missing")
        size = entry.get("bytes")
        if size is not None and fpath.stat().st_size != size:
            raise ManifestError(
                fpath,
                f"files.{fname}.bytes",
                f"expected {size} bytes, found {fpath.stat().st_size} (truncated or replaced)",
            )
        actual = sha256_file(fpath)
        if actual != entry["sha256"]:
            raise ManifestError(
                fpath,
                f"files.{fname}.sha256",
                f"mismatch: model.json says {entry['sha256'][:12]}..., file is {actual[:12]}...",
            )
