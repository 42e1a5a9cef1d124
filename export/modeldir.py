"""Write model directories (the contract of :mod:`attnserve.contract`) from PyTorch models.

A directory is built in a temporary sibling (:func:`~attnserve.export.staging.staged_directory`)
and renamed into place at the end, so an interrupted or failed export never leaves a half-written
model directory behind. The steps are plain functions called in order: check the inputs, write
the graphs into the staged directory, (the pipeline: reference outputs, precision,
verification, report), :func:`seal` (file hashes, model.json), commit.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, models, pre_tokenizers, processors

from attnserve.contract.graph_io import ClassifierIO, DecoderIO, expected_io
from attnserve.contract.kinds import IMAGE_CLASSIFICATION, IN_PLACE, LEFT_PADDED, TRANSLATION
from attnserve.contract.manifest import (
    MANIFEST_NAME,
    GraphSpec,
    Languages,
    Manifest,
    Preprocessing,
    TokenizerSpec,
    file_entries,
    write_manifest,
)
from attnserve.contract.quality import QualityCalibration
from attnserve.models import TranslationConfig, TranslationTransformer, VisionTransformer

from .errors import ExportError
from .graphs import DEFAULT_OPSET, export_aligner, export_decoder, export_encoder, export_vit
from .staging import staged_directory

try:
    from importlib.metadata import version as _pkg_version

    ATTNSERVE_VERSION = _pkg_version("attnserve")
except Exception:  # noqa: BLE001 - running from a source tree without metadata
    ATTNSERVE_VERSION = "0.0.0"

Stage = Callable[[str], None]  # progress callback: called with a stage name as it starts


def placeholder_tokenizer(vocab_size: int, pad_id: int = 0, bos_id: int = 1, eos_id: int = 2, unk_id: int = 3):
    """A word-level tokenizer over ``vocab_size`` ids for models with random weights.

    Specials are ``<pad> <s> </s> <unk>`` at their ids; every other id ``i`` is the word
    ``t{i}``, so ``"t5 t17"`` encodes to ``[5, 17, eos]``. A model that starts decoding from
    its end token (``bos_id == eos_id``, M2M100's layout) has no ``<s>``. For tests and
    benchmarks of presets; trained models ship their real tokenizer.
    """
    specials = {pad_id: "<pad>", bos_id: "<s>", eos_id: "</s>", unk_id: "<unk>"}
    vocab = {specials.get(i, f"t{i}"): i for i in range(vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", eos_id)])
    tok.add_special_tokens(list(dict.fromkeys(specials.values())))  # each at its id: none past the vocabulary
    return tok


def _load_tokenizer(tokenizer: Tokenizer | Path | str) -> Tokenizer:
    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    path = Path(tokenizer)
    if not path.is_file():
        raise ExportError(f"tokenizer file not found: {path}")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001 - tokenizers raises plain Exception
        raise ExportError(f"{path}: not a Hugging Face tokenizers file ({exc})") from None


def _noop(stage: str) -> None:
    pass


@dataclass(frozen=True)
class TranslationLimits:
    max_source_len: int
    max_target_len: int


def check_translation(
    model: TranslationTransformer,
    tokenizer: Tokenizer | Path | str,
    max_source_len: int | None = None,
    max_target_len: int | None = None,
    source_eos: bool = True,
) -> tuple[Tokenizer, TranslationLimits]:
    """The tokenizer, loaded, and the limits (None = the model's max_positions); raises ExportError.
    ``source_eos``: the model reads sources ending with its end token (CTranslate2 models may not)."""
    cfg = model.cfg
    tok = _load_tokenizer(tokenizer)
    if tok.get_vocab_size(with_added_tokens=True) > cfg.vocab_size:
        raise ExportError(
            f"tokenizer has {tok.get_vocab_size(with_added_tokens=True)} tokens but the model's vocabulary is "
            f"{cfg.vocab_size}"
        )
    _check_specials(cfg, tok, source_eos)
    limits = TranslationLimits(
        cfg.max_positions if max_source_len is None else max_source_len,
        cfg.max_positions if max_target_len is None else max_target_len,
    )
    for flag, value in (("max-source-len", limits.max_source_len), ("max-target-len", limits.max_target_len)):
        if not 1 <= value <= cfg.max_positions:
            raise ExportError(f"--{flag} {value} outside 1..{cfg.max_positions} (the model's max_positions)")
    return tok, limits


def _check_specials(cfg, tok: Tokenizer, source_eos: bool = True) -> None:
    """The tokenizer is the model's: it ends a text with the model's end token (the server
    relies on it), and its ``<pad>`` / ``</s>`` / ``<unk>``, where it has them, are the
    model's ids. Another model's tokenizer would otherwise export cleanly and translate
    with the wrong ids."""
    ends = tok.encode("a").ids
    if source_eos and (not ends or ends[-1] != cfg.eos_id):
        got = f"id {ends[-1]} ({tok.id_to_token(ends[-1])!r})" if ends else "nothing"
        raise ExportError(
            f"the tokenizer ends a text with {got}, but this model's end token is id {cfg.eos_id}: "
            "pass the tokenizer the model was trained with (its post-processor must append the end token)"
        )
    for token, name, ours in (
        ("<pad>", "pad", cfg.pad_id),
        ("</s>", "end", cfg.eos_id),
        ("<unk>", "unknown", cfg.unk_id),
    ):
        theirs = tok.token_to_id(token)
        if theirs is not None and theirs != ours:
            raise ExportError(
                f"the tokenizer's {token} is id {theirs}, but this model's {name} token is id {ours}: "
                "pass the tokenizer the model was trained with"
            )


def write_translation_graphs(
    model: TranslationTransformer,
    directory: Path,
    tokenizer: Tokenizer,
    limits: TranslationLimits,
    *,
    name: str,
    attention: str = "fused",
    opset: int = DEFAULT_OPSET,
    extra: dict[str, Any] | None = None,
    stage: Stage = _noop,
    family: str = "attnserve",
    languages: Languages | None = None,
    kv_cache: str = IN_PLACE,
    step_attention: bool = True,
) -> Manifest:
    """encoder.onnx, decoder.onnx, aligner.onnx and tokenizer.json into ``directory``; returns their fp32
    manifest, without file hashes (:func:`seal` adds them and writes model.json). ``step_attention``:
    a fused decoder also returns its step's attention (``ExportOptions.step_attention``)."""
    cfg = model.cfg
    model = model.eval()
    stage("export encoder")
    export_encoder(model, directory / "encoder.onnx", attention, opset)
    stage("export decoder")
    kv_cache = kv_cache if attention == "fused" else LEFT_PADDED  # GroupQueryAttention is a fused op
    step_attention = step_attention and attention == "fused"
    export_decoder(model, directory / "decoder.onnx", attention, opset, kv_cache, extra, step_attention)
    stage("export aligner")
    export_aligner(model, directory / "aligner.onnx", attention, opset, extra)
    tokenizer.save(str(directory / "tokenizer.json"))
    return Manifest(
        name=name,
        kind=TRANSLATION,
        attention=attention,
        precision="fp32",
        opset=opset,
        config=dataclasses.asdict(cfg),
        graphs=_translation_graphs(cfg, kv_cache, step_attention),
        tokenizer=TokenizerSpec(
            "tokenizer.json",
            cfg.pad_id,
            cfg.bos_id,
            cfg.eos_id,
            cfg.unk_id,
            decoder_start_id=cfg.bos_id,
            never_generate_ids=list(cfg.never_generate),
        ),
        limits=dataclasses.asdict(limits),
        extra=extra or {},
        family=family,
        languages=languages,
        attnserve_version=ATTNSERVE_VERSION,
        kv_cache=kv_cache,
    )


def _translation_graphs(cfg: TranslationConfig, kv_cache: str, step_attention: bool) -> dict[str, GraphSpec]:
    """The three graphs' files and the contract's inputs and outputs for them."""
    io = expected_io(TRANSLATION, dataclasses.asdict(cfg), kv_cache)
    decoder = io["decoder"]
    if step_attention:  # the step decoder returns its attention (export/step_attention.py)
        assert isinstance(decoder, DecoderIO)
        decoder = decoder.with_attention()
    return {
        "encoder": GraphSpec("encoder.onnx", io["encoder"].inputs, io["encoder"].outputs),
        "decoder": GraphSpec("decoder.onnx", decoder.inputs, decoder.outputs),
        "aligner": GraphSpec("aligner.onnx", io["aligner"].inputs, io["aligner"].outputs),
    }


def check_vit(
    model: VisionTransformer, labels: list[str] | None = None, preprocessing: dict[str, Any] | None = None
) -> tuple[list[str], Preprocessing]:
    """Labels (default "0".."K-1") and preprocessing (default: the model's size and channels,
    mean = std = 0.5), checked against the model; raises ExportError."""
    cfg = model.cfg
    labels = labels or [str(i) for i in range(cfg.num_classes)]
    if len(labels) != cfg.num_classes:
        raise ExportError(f"{len(labels)} labels for a model with {cfg.num_classes} classes")
    prep = {
        "image_size": cfg.image_size,
        "channels": cfg.in_channels,
        "mean": [0.5] * cfg.in_channels,
        "std": [0.5] * cfg.in_channels,
        "resample": "bilinear",
        "invert": False,
        **(preprocessing or {}),
    }
    if prep["image_size"] != cfg.image_size or prep["channels"] != cfg.in_channels:
        raise ExportError(
            f"preprocessing says {prep['image_size']}px x {prep['channels']} channels, "
            f"the model takes {cfg.image_size}px x {cfg.in_channels}"
        )
    return list(labels), Preprocessing(**prep)


def write_vit_graph(
    model: VisionTransformer,
    directory: Path,
    labels: list[str],
    preprocessing: Preprocessing,
    *,
    name: str,
    attention: str = "fused",
    opset: int = DEFAULT_OPSET,
    extra: dict[str, Any] | None = None,
    stage: Stage = _noop,
) -> Manifest:
    """model.onnx and labels.json into ``directory``; returns their fp32 manifest, without file hashes."""
    stage("export model")
    export_vit(model.eval(), directory / "model.onnx", attention, opset)
    (directory / "labels.json").write_text(json.dumps(labels, indent=1) + "\n")
    io = ClassifierIO.standard()
    return Manifest(
        name=name,
        kind=IMAGE_CLASSIFICATION,
        attention=attention,
        precision="fp32",
        opset=opset,
        config=dataclasses.asdict(model.cfg),
        graphs={"model": GraphSpec("model.onnx", io.inputs, io.outputs)},
        labels=labels,
        preprocessing=preprocessing,
        extra=extra or {},
        attnserve_version=ATTNSERVE_VERSION,
    )


def seal(directory: Path, manifest: Manifest, stage: Stage = _noop) -> Manifest:
    """The sha256 and size of every file in ``directory`` into the manifest, written as model.json."""
    stage("write model.json")
    names = [p.name for p in directory.iterdir() if p.is_file() and p.name != MANIFEST_NAME]
    manifest = dataclasses.replace(manifest, files=file_entries(directory, names))
    write_manifest(directory, manifest)
    return manifest


def write_translation_dir(
    model: TranslationTransformer,
    out: Path,
    tokenizer: Tokenizer | Path | str,
    *,
    name: str,
    attention: str = "fused",
    opset: int = DEFAULT_OPSET,
    max_source_len: int | None = None,
    max_target_len: int | None = None,
    extra: dict[str, Any] | None = None,
    languages: Languages | None = None,
    force: bool = False,
    stage: Stage = _noop,
    kv_cache: str = IN_PLACE,
    quality: QualityCalibration | None = None,
) -> Manifest:
    """Export ``model`` to ``out``: encoder.onnx, decoder.onnx, tokenizer.json, model.json (fp32,
    no reference outputs or verification: :func:`attnserve.export.pipeline.export_translation` adds those).
    ``quality``: the quality score's calibration (``contract.quality``), when fit for this model."""
    tok, limits = check_translation(model, tokenizer, max_source_len, max_target_len)
    with staged_directory(out, force) as tmp:
        manifest = write_translation_graphs(
            model,
            tmp,
            tok,
            limits,
            name=name,
            attention=attention,
            opset=opset,
            extra=extra,
            stage=stage,
            languages=languages,
            kv_cache=kv_cache,
        )
        manifest = seal(tmp, dataclasses.replace(manifest, quality=quality), stage)
    return manifest


def write_vit_dir(
    model: VisionTransformer,
    out: Path,
    *,
    name: str,
    labels: list[str] | None = None,
    preprocessing: dict[str, Any] | None = None,
    attention: str = "fused",
    opset: int = DEFAULT_OPSET,
    extra: dict[str, Any] | None = None,
    force: bool = False,
    stage: Stage = _noop,
) -> Manifest:
    """Export ``model`` to ``out``: model.onnx, labels.json, model.json (see :func:`check_vit` for the defaults)."""
    labels, prep = check_vit(model, labels, preprocessing)
    with staged_directory(out, force) as tmp:
        manifest = write_vit_graph(
            model, tmp, labels, prep, name=name, attention=attention, opset=opset, extra=extra, stage=stage
        )
        manifest = seal(tmp, manifest, stage)
    return manifest
