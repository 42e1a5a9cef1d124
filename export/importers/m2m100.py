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

from .hf_files import ConfigReader, ImportCheckpointError, load_weights, model_dir, read_config, read_json
from .m2m100_tokenizer import m2m100_tokenizer, nllb_languages, plain_post_processor
from .marian import ACTIVATIONS, ImportedTranslator, _layer_weights, _limits, _linear_and_norm_pairs, _move

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
    for i in range(cfg.encoder_layers):
        t, o = f"encoder.layers.{i}", f"encoder_layers.{i}"
        ours |= _layer_weights(state, f"{t}.self_attn", f"{o}.self_attn", source)
        pairs = _linear_and_norm_pairs(f"{t}.self_attn_layer_norm", f"{o}.res1.norm")
        pairs += _linear_and_norm_pairs(f"{t}.fc1", f"{o}.ffn.fc1") + _linear_and_norm_pairs(f"{t}.fc2", f"{o}.ffn.fc2")
        pairs += _linear_and_norm_pairs(f"{t}.final_layer_norm", f"{o}.res2.norm")
        ours |= _move(state, pairs, source)
    for i in range(cfg.decoder_layers):
        t, o = f"decoder.layers.{i}", f"decoder_layers.{i}"
        ours |= _layer_weights(state, f"{t}.self_attn", f"{o}.self_attn", source)
        ours |= _layer_weights(state, f"{t}.encoder_attn", f"{o}.cross_attn", source, cross=True)
        pairs = _linear_and_norm_pairs(f"{t}.self_attn_layer_norm", f"{o}.res1.norm")
        pairs += _linear_and_norm_pairs(f"{t}.encoder_attn_layer_norm", f"{o}.res2.norm")
        pairs += _linear_and_norm_pairs(f"{t}.fc1", f"{o}.ffn.fc1") + _linear_and_norm_pairs(f"{t}.fc2", f"{o}.ffn.fc2")
        pairs += _linear_and_norm_pairs(f"{t}.final_layer_norm", f"{o}.res3.norm")
        ours |= _move(state, pairs, source)
    if state:
        raise ImportCheckpointError(f"{source}: unexpected weights {sorted(state)[:5]} (not an M2M100 model?)")
    return ours


def _special_names(tok_cfg: dict) -> dict[str, str]:
    names = {k: tok_cfg.get(f"{k}_token", d) for k, d in (("unk", "<unk>"), ("eos", "</s>"), ("pad", "<pad>"))}
    return {k: v if isinstance(v, str) else v.get("content", "") for k, v in names.items()}


def load_m2m100(path: Path | str) -> ImportedTranslator:
    """Import a local M2M100 or NLLB directory: ``config.json``, weights, and either
    ``tokenizer.json`` (NLLB) or ``sentencepiece.bpe.model`` + ``vocab.json`` (M2M100)."""
    directory = model_dir(path)
    config = read_config(directory, "m2m_100")
    tok_cfg = read_json(directory / "tokenizer_config.json", required=False) or {}
    names = _special_names(tok_cfg)
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
