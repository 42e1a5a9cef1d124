"""The parts of a sentencepiece model the tokenizer builders read (Marian's and Argos' Unigram,
M2M100's BPE): the model file checked for what the rebuilt tokenizers cannot reproduce, a
``vocab.json`` of dense ids, the normaliser, and the ``$A </s>`` post-processor."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Regex, Tokenizer, normalizers, processors

from .hf_files import LFS_POINTER, ImportCheckpointError, read_json, require_module, unreadable

NORMAL, UNKNOWN, CONTROL, USER_DEFINED = 1, 2, 3, 4  # sentencepiece ModelProto.SentencePiece.Type
UNIGRAM, BPE = 1, 2  # sentencepiece TrainerSpec.ModelType
MODEL_TYPES = {UNIGRAM: "unigram", BPE: "BPE"}


def read_spm(path: Path, model_type: int, missing: str = "file not found"):
    """The sentencepiece ``ModelProto`` of ``path``, of ``model_type``, without the options the
    rebuilt tokenizers do not reproduce (byte fallback, whitespace as suffix, a denormaliser)."""
    pb2 = require_module("sentencepiece.sentencepiece_model_pb2", "reading sentencepiece models")
    if not path.is_file():
        raise ImportCheckpointError(f"{path}: {missing}")
    proto = pb2.ModelProto()
    try:
        data = path.read_bytes()
        if data.startswith(LFS_POINTER):  # protobuf may parse its text as a model of nothing
            raise ValueError("a Git LFS pointer")
        proto.ParseFromString(data)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise unreadable(path, "not a sentencepiece model", exc) from None
    if not any(p.type == NORMAL for p in proto.pieces):  # zero bytes parse as a model of nothing
        raise ImportCheckpointError(f"{path}: not a sentencepiece model (no pieces: empty or cut short?)")
    if proto.trainer_spec.model_type != model_type:
        raise ImportCheckpointError(
            f"{path}: trainer_spec.model_type is {proto.trainer_spec.model_type}, only "
            f"{MODEL_TYPES[model_type]} ({model_type}) is supported"
        )
    if proto.trainer_spec.byte_fallback:
        raise ImportCheckpointError(f"{path}: trainer_spec.byte_fallback is true, which is not supported")
    if proto.trainer_spec.treat_whitespace_as_suffix:
        raise ImportCheckpointError(f"{path}: trainer_spec.treat_whitespace_as_suffix is true, not supported")
    if proto.denormalizer_spec.precompiled_charsmap:
        raise ImportCheckpointError(f"{path}: denormalizer_spec is set, which is not supported")
    return proto


def read_vocab(path: Path) -> dict[str, int]:
    """``vocab.json``: token -> id, the ids exactly 0..n-1."""
    vocab = read_json(path)
    ids = sorted(vocab.values()) if all(isinstance(i, int) and not isinstance(i, bool) for i in vocab.values()) else []
    if ids != list(range(len(vocab))):
        raise ImportCheckpointError(f"{path}: ids must be the integers 0..{len(vocab) - 1}, each once")
    return vocab


def normalizer_steps(spec) -> list:
    """sentencepiece's normalisation of ``spec`` (a NormalizerSpec): its precompiled charsmap,
    then, with ``remove_extra_whitespaces``, the ends stripped and runs of spaces collapsed."""
    steps = [normalizers.Precompiled(spec.precompiled_charsmap)] if spec.precompiled_charsmap else []
    if spec.remove_extra_whitespaces:
        steps += [normalizers.Replace(Regex("^ +| +$"), ""), normalizers.Replace(Regex(" {2,}"), " ")]
    return steps


def end_of_sentence_post_processor(tok: Tokenizer, eos: str) -> None:
    """``$A </s>``: what Marian and M2M100 append to a source; a language token is the serving
    side's to add."""
    tok.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A $B {eos}", special_tokens=[(eos, tok.token_to_id(eos))]
    )
