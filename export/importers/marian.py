"""Hugging Face MarianMT (opus-mt) <-> :class:`TranslationTransformer`, both directions.

:class:`TranslationConfig` was designed to express Marian exactly: post-norm, swish,
split sinusoids (sines then cosines, built in float64 like Marian's numpy table),
scaled, shared and tied embeddings, a final logits bias, layer-norm eps 1e-5. The
only rewrite is packing: Marian's ``q_proj``/``k_proj``/``v_proj`` become our ``qkv``
(self-attention) and ``k_proj``/``v_proj`` our ``kv`` (cross-attention), concatenated
along the output axis in that order.

Marian starts decoding with ``decoder_start_token_id``, which is the pad id in every
opus-mt model; pad is never generated (opus-mt's ``bad_words_ids``), nor is the start
token by our decoders.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from attnserve.models import TranslationConfig, sinusoidal_table

from .hf_files import ConfigReader, ImportCheckpointError, load_weights, model_dir, read_config, read_json, take
from .hf_translation import (
    ImportedTranslator,
    check_special_ids,
    config_fields,
    embedding_weights,
    hf_limits,
    model_from_state,
    take_layers,
    translation_config,
)
from .marian_tokenizer import marian_tokenizer

log = logging.getLogger(__name__)

# MarianConfig's defaults of the fields the families' defaults differ in
MARIAN_DEFAULTS = {
    "activation_function": "gelu",
    "scale_embedding": False,
    "pad_token_id": 58100,
    "decoder_start_token_id": 58100,
    "eos_token_id": 0,
}


def translation_config_from_marian(
    path: Path, config: dict[str, Any], unk_id: int, unified_vocab: int | None = None
) -> TranslationConfig:
    """Our config for a Marian ``config.json`` (missing fields take MarianConfig's defaults).
    ``unified_vocab``: separate vocabularies, merged into one id space of that size."""
    r = ConfigReader(path, config)
    vocab_size = r.get("vocab_size", 58101, int)
    decoder_vocab_size = r.get("decoder_vocab_size", None, int) or vocab_size
    if decoder_vocab_size != vocab_size and unified_vocab is None:
        r.fail(
            "decoder_vocab_size",
            f"{decoder_vocab_size} differs from vocab_size {vocab_size} but tokenizer_config.json does not set "
            "separate_vocabs (with target_vocab.json)",
        )
    if unified_vocab is not None:
        if r.get("share_encoder_decoder_embeddings", True, bool):
            r.fail("share_encoder_decoder_embeddings", "must be false with separate vocabularies")
        vocab_size = unified_vocab
    family = dict(
        vocab_size=vocab_size,
        norm_first=False,
        share_embeddings=r.get("share_encoder_decoder_embeddings", True, bool),
        final_logits_bias=True,
        position_layout="split",
        unk_id=unk_id,
    )
    return translation_config(path, config_fields(r, MARIAN_DEFAULTS) | family)


BANNED_LOGIT = -1e4  # the logits bias of ids outside the target vocabulary: never chosen, finite in fp16


def unify_vocabularies(state: dict[str, torch.Tensor], source_index: list[int], source: Path) -> None:
    """Separate vocabularies -> one id space, in place (see ``marian_tokenizer``): the source
    embedding re-indexed (zeros for ids the source lacks), the target embedding, ``lm_head``
    and the logits bias extended past the target vocabulary (zeros; the bias BANNED_LOGIT)."""
    state.update({k.removeprefix("model."): v for k, v in list(state.items())})
    for k in [k for k in state if k.startswith("model.")]:
        del state[k]
    V = len(source_index)
    src = take(state, "encoder.embed_tokens.weight", source)  # (Vs, C)
    index = torch.tensor(source_index)  # (V,)
    unified = torch.zeros(V, src.shape[1])  # (V, C)
    unified[index >= 0] = src[index[index >= 0]]
    state["encoder.embed_tokens.weight"] = unified
    for key in ("decoder.embed_tokens.weight", "lm_head.weight"):
        if key in state:
            table = state[key]  # (Vt, C)
            state[key] = torch.cat([table, torch.zeros(V - table.shape[0], table.shape[1])])  # (V, C)
    bias = take(state, "final_logits_bias", source)  # (1, Vt)
    state["final_logits_bias"] = torch.cat([bias, torch.full((1, V - bias.shape[1]), BANNED_LOGIT)], dim=1)
    state.pop("shared.weight", None)  # separate embeddings: transformers keeps a spare shared table


def state_from_marian(
    state: dict[str, torch.Tensor], cfg: TranslationConfig, source: Path
) -> tuple[dict[str, torch.Tensor], TranslationConfig]:
    """A Marian checkpoint's tensors (``model.`` prefix optional) -> our state dict and config.

    Embeddings follow what transformers runs (``hf_translation.embedding_weights``).
    """
    state = {k.removeprefix("model."): v for k, v in state.items()}
    for side in ("encoder", "decoder"):
        stored = state.pop(f"{side}.embed_positions.weight", None)
        if stored is not None:  # older checkpoints store the (fixed) table: it must be the one we compute
            table = sinusoidal_table(cfg.max_positions, cfg.d_model, "split")
            if stored.shape != table.shape or (stored - table).abs().max() > 1e-5:
                raise ImportCheckpointError(
                    f"{source}: weight 'model.{side}.embed_positions.weight' is not Marian's sinusoidal table"
                )
    ours, cfg = embedding_weights(state, cfg, source)
    ours["logits_bias"] = take(state, "final_logits_bias", source, (1, cfg.vocab_size))[0]
    ours |= take_layers(state, cfg, source)
    if state:
        raise ImportCheckpointError(f"{source}: unexpected weights {sorted(state)[:5]} (not a MarianMTModel?)")
    return ours, cfg


def load_marian(path: Path | str) -> ImportedTranslator:
    """Import a local opus-mt style directory: ``config.json``, weights, ``source.spm``,
    ``target.spm``, ``vocab.json`` (plus ``tokenizer_config.json`` / ``generation_config.json``
    when present). Needs ``sentencepiece`` (to read the .spm files); never downloads.
    """
    directory = model_dir(path)
    config = read_config(directory, "marian")
    tokenizer, special_ids, source_index = marian_tokenizer(directory)
    unified = None if source_index is None else len(source_index)
    cfg = translation_config_from_marian(directory / "config.json", config, special_ids["unk"], unified)
    check_special_ids(directory / "config.json", cfg, special_ids, "vocab.json maps the {name} token to", {})
    if tokenizer.get_vocab_size(with_added_tokens=True) > cfg.vocab_size:
        raise ImportCheckpointError(
            f"{directory / 'vocab.json'}: {tokenizer.get_vocab_size(with_added_tokens=True)} tokens, more than "
            f"config.json vocab_size {cfg.vocab_size}"
        )
    weights = load_weights(directory)
    if source_index is not None:
        unify_vocabularies(weights, source_index, directory)
    state, cfg = state_from_marian(weights, cfg, directory)
    return ImportedTranslator(
        model_from_state(directory, cfg, state),
        tokenizer,
        directory.resolve().name,
        hf_limits(directory, cfg),
        languages=marian_languages(directory, tokenizer),
    )


def marian_languages(directory: Path, tokenizer: Tokenizer) -> dict[str, Any] | None:
    """model.json languages of an opus-mt directory: ``tokenizer_config.json``'s ``source_lang`` /
    ``target_lang`` (else the ``opus-mt-SRC-TGT`` directory name); multilingual targets are the
    ``>>xx<<`` tokens of the vocabulary. None when nothing says."""
    tok_cfg = read_json(directory / "tokenizer_config.json", required=False) or {}
    named = re.fullmatch(r"opus-mt-(?:tc-big-|tc-base-)?([a-z]{2,3})-([a-z]{2,3})", directory.resolve().name)
    source = tok_cfg.get("source_lang") or (named.group(1) if named else None)
    target = tok_cfg.get("target_lang") or (named.group(2) if named else None)
    tokens = marian_language_tokens(tokenizer)
    if not tokens and not (isinstance(source, str) and isinstance(target, str)):
        return None
    return {
        "source": [source] if isinstance(source, str) else [],
        "target": list(tokens) if tokens else [target],
        "tokens": tokens,
        "default_source": source if isinstance(source, str) else None,
    }


def marian_language_tokens(tokenizer: Tokenizer) -> dict[str, str]:
    """Multilingual opus-mt targets: ``{"fra": ">>fra<<", ...}`` from the vocabulary's ``>>xx<<`` tokens."""
    tokens = sorted(t for t in tokenizer.get_vocab(with_added_tokens=True) if t.startswith(">>") and t.endswith("<<"))
    return {t[2:-2]: t for t in tokens if len(t) > 4}
