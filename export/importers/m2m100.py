"""Hugging Face M2M100 and NLLB (``model_type: m2m_100``) -> :class:`TranslationTransformer`.

What differs from Marian, and how :class:`TranslationConfig` expresses it:

- pre-norm layers with a final layer norm on each stack (``norm_first=True``: our
  ``encoder_norm`` / ``decoder_norm`` are ``encoder.layer_norm`` / ``decoder.layer_norm``);
- fairseq's sinusoidal positions: sines then cosines with frequencies
  ``10000^(-i/(d/2 - 1))``, and the first token at position ``padding_idx + 1``
  (``position_layout="fairseq"``, ``position_offset=pad_id + 1``); with right-padded
  sources and one decoder token per step this is exactly transformers' cumsum positions;
- embeddings scaled by ``sqrt(d_model)``, shared by both sides and tied to the output,
  no logits bias, ReLU;
- decoding starts from ``</s>`` (``decoder_start_token_id`` = eos) with the target
  language's token forced first (``forced_bos_token_id``): the start token is then not
  banned (``TranslationConfig.never_generate``) and the language token is a per-request
  forced prefix, hidden from the text.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from attnserve.models import TranslationConfig, TranslationTransformer

from .hf_files import (
    SPECIALS,
    ConfigReader,
    ImportCheckpointError,
    load_weights,
    model_dir,
    read_config,
    read_json,
    require_module,
    special_tokens,
)
from .m2m100_tokenizer import m2m100_tokenizer, nllb_languages, plain_post_processor
from .marian import (
    ACTIVATIONS,
    ImportedTranslator,
    _limits,
    _linear_and_norm_pairs,
    _move,
    state_to_marian,
    take_layers,
)

log = logging.getLogger(__name__)

LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, as transformers' M2M100 uses


def translation_config_from_m2m100(path: Path, config: dict[str, Any], unk_id: int) -> TranslationConfig:
    r = ConfigReader(path, config)
    heads = r.get("encoder_attention_heads", 16, int)
    if r.get("decoder_attention_heads", 16, int) != heads:
        r.fail("decoder_attention_heads", f"must equal encoder_attention_heads ({heads})")
    ffn_dim = r.get("encoder_ffn_dim", 4096, int)
    if r.get("decoder_ffn_dim", 4096, int) != ffn_dim:
        r.fail("decoder_ffn_dim", f"must equal encoder_ffn_dim ({ffn_dim})")
    activation = r.get("activation_function", "relu", str)
    if activation not in ACTIVATIONS:
        r.fail("activation_function", f"{activation!r} is not supported (one of {sorted(ACTIVATIONS)})")
    pad_id = r.get("pad_token_id", 1, int)
    try:
        return TranslationConfig(
            vocab_size=r.get("vocab_size", 128112, int),
            d_model=r.get("d_model", 1024, int),
            num_heads=heads,
            encoder_layers=r.get("encoder_layers", 12, int),
            decoder_layers=r.get("decoder_layers", 12, int),
            ffn_dim=ffn_dim,
            activation=ACTIVATIONS[activation],
            norm_first=True,
            share_embeddings=True,
            tie_output=r.get("tie_word_embeddings", True, bool),
            scale_embedding=r.get("scale_embedding", True, bool),
            final_logits_bias=False,
            position_layout="fairseq",
            position_offset=pad_id + 1,
            max_positions=r.get("max_position_embeddings", 1024, int),
            dropout=float(r.get("dropout", 0.1, (int, float))),
            layer_norm_eps=LAYER_NORM_EPS,
            pad_id=pad_id,
            bos_id=r.get("decoder_start_token_id", 2, int),
            eos_id=r.get("eos_token_id", 2, int),
            unk_id=unk_id,
        )
    except ValueError as exc:
        raise ImportCheckpointError(f"{path}: {exc}") from None


def state_from_m2m100(state: dict, cfg: TranslationConfig, source: Path) -> dict:
    """An M2M100ForConditionalGeneration checkpoint's tensors -> our state dict."""
    state = {k.removeprefix("model."): v for k, v in state.items()}
    for side in ("encoder", "decoder"):
        state.pop(f"{side}.embed_positions.weights", None)  # the fixed table, when a checkpoint stores it
    shared = state.pop("shared.weight", None)
    src = state.pop("encoder.embed_tokens.weight", None)
    tgt = state.pop("decoder.embed_tokens.weight", None)
    lm_head = state.pop("lm_head.weight", None)
    embed = shared if shared is not None else (src if src is not None else tgt)
    if embed is None:
        raise ImportCheckpointError(f"{source}: weight 'model.shared.weight' missing")
    ours = {"src_embed.weight": embed}
    if not cfg.tie_output:
        if lm_head is None:
            raise ImportCheckpointError(f"{source}: weight 'lm_head.weight' missing (tie_word_embeddings is false)")
        ours["lm_head.weight"] = lm_head
    for side, norm in (("encoder", "encoder_norm"), ("decoder", "decoder_norm")):
        ours |= _move(state, _linear_and_norm_pairs(f"{side}.layer_norm", norm), source)
    ours |= take_layers(state, cfg, source)
    if state:
        raise ImportCheckpointError(f"{source}: unexpected weights {sorted(state)[:5]} (not an M2M100 model?)")
    return ours


def load_m2m100(path: Path | str) -> ImportedTranslator:
    """Import a local M2M100 or NLLB directory: ``config.json``, weights, and either
    ``tokenizer.json`` (NLLB) or ``sentencepiece.bpe.model`` + ``vocab.json`` (M2M100)."""
    directory = model_dir(path)
    config = read_config(directory, "m2m_100")
    tok_cfg = read_json(directory / "tokenizer_config.json", required=False) or {}
    names = special_tokens(tok_cfg, SPECIALS)
    vocab_size = ConfigReader(directory / "config.json", config).get("vocab_size", 128112, int)
    if (directory / "tokenizer.json").is_file():
        if tok_cfg.get("legacy_behaviour"):
            raise ImportCheckpointError(
                f"{directory / 'tokenizer_config.json'}: legacy_behaviour is true (the language token after </s>); "
                "only the current layout (language token first) is supported"
            )
        try:
            tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception
            raise ImportCheckpointError(f"{directory / 'tokenizer.json'}: cannot be read ({exc})") from None
        if tokenizer.token_to_id(names["eos"]) is None:
            raise ImportCheckpointError(f"{directory / 'tokenizer.json'}: no {names['eos']!r} token")
        plain_post_processor(tokenizer, names["eos"])
        languages = nllb_languages(tokenizer, vocab_size)
    else:
        tokenizer, languages = m2m100_tokenizer(directory, names)
    ids = {k: tokenizer.token_to_id(v) for k, v in names.items()}
    if None in ids.values():
        raise ImportCheckpointError(f"{directory}: the tokenizer lacks {names}")
    cfg = translation_config_from_m2m100(directory / "config.json", config, ids["unk"])
    for name, ours in (("pad", cfg.pad_id), ("eos", cfg.eos_id)):
        if ids[name] != ours:
            raise ImportCheckpointError(
                f"{directory / 'config.json'}: {name}_token_id is {ours} but the tokenizer maps {names[name]!r} "
                f"to {ids[name]}"
            )
    if tokenizer.get_vocab_size(with_added_tokens=True) > cfg.vocab_size:
        log.info("%s: the tokenizer has ids past vocab_size %d (unused)", directory, cfg.vocab_size)
    state = state_from_m2m100(load_weights(directory), cfg, directory)
    model = TranslationTransformer(cfg)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:
        raise ImportCheckpointError(f"{directory}: weights do not fit config.json ({exc})") from None
    tied = {"tgt_embed.weight"} | ({"lm_head.weight"} if cfg.tie_output else set())
    if set(missing) - tied or unexpected:
        raise ImportCheckpointError(f"{directory}: weights missing {sorted(set(missing) - tied)[:5]}")
    codes = list(languages)
    default_source = tok_cfg.get("src_lang") if tok_cfg.get("src_lang") in languages else None
    default_target = tok_cfg.get("tgt_lang") if tok_cfg.get("tgt_lang") in languages else None
    gen = read_json(directory / "generation_config.json", required=False) or {}
    forced = gen.get("forced_bos_token_id")
    if default_target is None and isinstance(forced, int):
        default_target = next((c for c, t in languages.items() if tokenizer.token_to_id(t) == forced), None)
    return ImportedTranslator(
        model.eval(),
        tokenizer,
        directory.resolve().name,
        _limits(directory, cfg),
        family="m2m_100",
        languages={
            "source": codes,
            "target": codes,
            "tokens": languages,
            "default_source": default_source,
            "default_target": default_target,
        },
    )


# --- the reverse, for benchmarks: our M2M100-shaped model -> transformers.M2M100ForConditionalGeneration ---


def to_m2m100(model: TranslationTransformer):
    """A ``transformers.M2M100ForConditionalGeneration`` (eval mode) with ``model``'s config and
    weights, its generation config following attnserve's rules (greedy, pad never generated,
    no forced tokens). Raises ValueError naming an option M2M100 cannot express."""
    cfg = model.cfg
    checks = {
        "norm_first": (cfg.norm_first, True),
        "position_layout": (cfg.position_layout, "fairseq"),
        "position_offset": (cfg.position_offset, cfg.pad_id + 1),
        "share_embeddings": (cfg.share_embeddings, True),
        "final_logits_bias": (cfg.final_logits_bias, False),
        "layer_norm_eps": (cfg.layer_norm_eps, LAYER_NORM_EPS),
    }
    for name, (value, needed) in checks.items():
        if value != needed:
            raise ValueError(f"{name}={value!r} cannot be expressed in M2M100 (needs {needed!r})")
    transformers = require_module("transformers", "to_m2m100")
    config = transformers.M2M100Config(
        vocab_size=cfg.vocab_size, d_model=cfg.d_model, encoder_layers=cfg.encoder_layers,
        decoder_layers=cfg.decoder_layers, encoder_attention_heads=cfg.num_heads,
        decoder_attention_heads=cfg.num_heads, encoder_ffn_dim=cfg.ffn_dim, decoder_ffn_dim=cfg.ffn_dim,
        activation_function={"swish": "silu"}.get(cfg.activation, cfg.activation),
        max_position_embeddings=cfg.max_positions, scale_embedding=cfg.scale_embedding,
        tie_word_embeddings=cfg.tie_output, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        pad_token_id=cfg.pad_id, eos_token_id=cfg.eos_id, decoder_start_token_id=cfg.bos_id, bos_token_id=0,
    )  # fmt: skip
    hf = transformers.M2M100ForConditionalGeneration(config)
    state = state_to_marian(model)  # the same parameter names, plus a zero final_logits_bias
    state.pop("final_logits_bias")
    for side, norm in (("encoder", model.encoder_norm), ("decoder", model.decoder_norm)):
        state[f"model.{side}.layer_norm.weight"], state[f"model.{side}.layer_norm.bias"] = norm.weight, norm.bias
    missing, unexpected = hf.load_state_dict(state, strict=False)
    if [k for k in missing if "embed_positions" not in k] or unexpected:  # an internal invariant
        raise RuntimeError(f"M2M100 weights not mapped: missing {missing[:5]}, unexpected {unexpected[:5]}")
    hf.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=cfg.bos_id, eos_token_id=cfg.eos_id, pad_token_id=cfg.pad_id,
        bad_words_ids=[[cfg.pad_id]], forced_eos_token_id=None, num_beams=1, do_sample=False,
        max_length=cfg.max_positions,
    )  # fmt: skip
    return hf.eval()
