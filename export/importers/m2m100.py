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

from attnserve.models import TranslationConfig

from .hf_files import (
    SPECIALS,
    ConfigReader,
    ImportCheckpointError,
    load_weights,
    model_dir,
    read_config,
    read_json,
    special_tokens,
    unreadable,
)
from .hf_translation import (
    ImportedTranslator,
    check_special_ids,
    config_fields,
    embedding_weights,
    generation_settings,
    hf_limits,
    model_from_state,
    move_weights,
    take_layers,
    translation_config,
    weight_and_bias_pairs,
)
from .m2m100_tokenizer import m2m100_tokenizer, nllb_languages
from .spm_parts import end_of_sentence_post_processor

log = logging.getLogger(__name__)

# M2M100Config's defaults of the fields the families' defaults differ in
M2M100_DEFAULTS = {
    "activation_function": "relu",
    "scale_embedding": True,
    "pad_token_id": 1,
    "decoder_start_token_id": 2,
    "eos_token_id": 2,
}


def translation_config_from_m2m100(path: Path, config: dict[str, Any], unk_id: int) -> TranslationConfig:
    r = ConfigReader(path, config)
    fields = config_fields(r, M2M100_DEFAULTS)
    family = dict(
        vocab_size=r.get("vocab_size", 128112, int),
        norm_first=True,
        share_embeddings=True,
        final_logits_bias=False,
        position_layout="fairseq",
        position_offset=fields["pad_id"] + 1,
        unk_id=unk_id,
    )
    return translation_config(path, fields | family)


def state_from_m2m100(state: dict, cfg: TranslationConfig, source: Path) -> tuple[dict, TranslationConfig]:
    """An M2M100ForConditionalGeneration checkpoint's tensors -> our state dict and config (embeddings
    as transformers runs them: ``hf_translation.embedding_weights``)."""
    state = {k.removeprefix("model."): v for k, v in state.items()}
    for side in ("encoder", "decoder"):
        state.pop(f"{side}.embed_positions.weights", None)  # the fixed table, when a checkpoint stores it
    ours, cfg = embedding_weights(state, cfg, source)
    for side, norm in (("encoder", "encoder_norm"), ("decoder", "decoder_norm")):
        ours |= move_weights(state, weight_and_bias_pairs(f"{side}.layer_norm", norm), source)
    ours |= take_layers(state, cfg, source)
    if state:
        raise ImportCheckpointError(f"{source}: unexpected weights {sorted(state)[:5]} (not an M2M100 model?)")
    return ours, cfg


def load_m2m100(path: Path | str) -> ImportedTranslator:
    """Import a local M2M100 or NLLB directory: ``config.json``, weights, and either
    ``tokenizer.json`` (NLLB) or ``sentencepiece.bpe.model`` + ``vocab.json`` (M2M100)."""
    directory = model_dir(path)
    config = read_config(directory, "m2m_100")
    tok_cfg = read_json(directory / "tokenizer_config.json", required=False) or {}
    names = special_tokens(tok_cfg, SPECIALS)
    vocab_size = ConfigReader(directory / "config.json", config).get("vocab_size", 128112, int)
    tokenizer, languages = _tokenizer(directory, tok_cfg, names, vocab_size)
    ids = {k: tokenizer.token_to_id(v) for k, v in names.items()}
    if None in ids.values():
        raise ImportCheckpointError(f"{directory}: the tokenizer lacks {names}")
    cfg = translation_config_from_m2m100(directory / "config.json", config, ids["unk"])
    check_special_ids(directory / "config.json", cfg, ids, "the tokenizer maps {token} to", names)
    if tokenizer.get_vocab_size(with_added_tokens=True) > cfg.vocab_size:
        log.info("%s: the tokenizer has ids past vocab_size %d (unused)", directory, cfg.vocab_size)
    state, cfg = state_from_m2m100(load_weights(directory), cfg, directory)
    model = model_from_state(directory, cfg, state)
    codes = list(languages)
    return ImportedTranslator(
        model,
        tokenizer,
        directory.resolve().name,
        hf_limits(directory, cfg),
        family="m2m_100",
        languages={
            "source": codes,
            "target": codes,
            "tokens": languages,
            **_default_pair(directory, tok_cfg, tokenizer, languages),
        },
    )


def _tokenizer(
    directory: Path, tok_cfg: dict[str, Any], names: dict[str, str], vocab_size: int
) -> tuple[Tokenizer, dict[str, str]]:
    """The directory's tokenizer and its ``{code: token}`` languages: NLLB's ``tokenizer.json``,
    else M2M100's sentencepiece model and vocabulary."""
    if not (directory / "tokenizer.json").is_file():
        if str(tok_cfg.get("tokenizer_class", "")).startswith("Nllb"):  # M2M100's vocab.json is no NLLB file
            raise ImportCheckpointError(
                f"{directory / 'tokenizer.json'}: file not found (NLLB is read from its tokenizer.json; "
                "sentencepiece.bpe.model alone is not enough)"
            )
        return m2m100_tokenizer(directory, names)
    if tok_cfg.get("legacy_behaviour"):
        raise ImportCheckpointError(
            f"{directory / 'tokenizer_config.json'}: legacy_behaviour is true (the language token after </s>); "
            "only the current layout (language token first) is supported"
        )
    try:
        tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception
        raise unreadable(directory / "tokenizer.json", "cannot be read", exc) from None
    if tokenizer.token_to_id(names["eos"]) is None:
        raise ImportCheckpointError(f"{directory / 'tokenizer.json'}: no {names['eos']!r} token")
    end_of_sentence_post_processor(tokenizer, names["eos"])
    return tokenizer, nllb_languages(tokenizer, vocab_size)


def _default_pair(
    directory: Path, tok_cfg: dict[str, Any], tokenizer: Tokenizer, languages: dict[str, str]
) -> dict[str, str | None]:
    """The default source and target the directory names: tokenizer_config.json's ``src_lang`` /
    ``tgt_lang``, else for the target the language token generation forces first (generation_config.json's
    ``forced_bos_token_id``, else config.json's, as transformers reads them)."""
    default_source = tok_cfg.get("src_lang") if tok_cfg.get("src_lang") in languages else None
    default_target = tok_cfg.get("tgt_lang") if tok_cfg.get("tgt_lang") in languages else None
    forced = generation_settings(directory).get("forced_bos_token_id")
    if default_target is None and isinstance(forced, int):
        default_target = next((c for c, t in languages.items() if tokenizer.token_to_id(t) == forced), None)
    return {"default_source": default_source, "default_target": default_target}
