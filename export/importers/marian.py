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

import dataclasses
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from attnserve.models import TranslationConfig, TranslationTransformer, sinusoidal_table

from .hf_files import (
    ConfigReader,
    ImportCheckpointError,
    load_weights,
    model_dir,
    read_config,
    read_json,
    require_module,
    take,
)
from .marian_tokenizer import marian_tokenizer

log = logging.getLogger(__name__)

# Marian's ``activation_function`` -> ours. transformers' "gelu" is the exact (erf) GELU, as is ours.
ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}
MARIAN_ACTIVATION = {"swish": "swish", "relu": "relu", "gelu": "gelu"}
MARIAN_LAYER_NORM_EPS = 1e-5  # transformers' MarianMTModel uses nn.LayerNorm's default


@dataclass
class ImportedTranslator:
    model: TranslationTransformer  # eval mode
    tokenizer: Tokenizer  # encode(text).ids = Marian's source ids with </s>; decode(ids, skip_special_tokens=True)
    name: str
    limits: dict[str, int]  # {"max_source_len": ..., "max_target_len": ...} where the directory says, else {}
    family: str = "marian"  # model.json's family: config.json's model_type
    languages: dict[str, Any] | None = None  # model.json's languages (contract.manifest.Languages fields)
    details: dict[str, Any] = dataclasses.field(default_factory=dict)  # what the source says of itself (-> extra)
    checks: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # import checks: name, passed, detail


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
    heads = r.get("encoder_attention_heads", 16, int)
    if r.get("decoder_attention_heads", 16, int) != heads:
        r.fail("decoder_attention_heads", f"must equal encoder_attention_heads ({heads})")
    ffn_dim = r.get("encoder_ffn_dim", 4096, int)
    if r.get("decoder_ffn_dim", 4096, int) != ffn_dim:
        r.fail("decoder_ffn_dim", f"must equal encoder_ffn_dim ({ffn_dim})")
    activation = r.get("activation_function", "gelu", str)
    if activation not in ACTIVATIONS:
        r.fail("activation_function", f"{activation!r} is not supported (one of {sorted(ACTIVATIONS)})")
    pad_id = r.get("pad_token_id", 58100, int)
    try:
        return TranslationConfig(
            vocab_size=vocab_size,
            d_model=r.get("d_model", 1024, int),
            num_heads=heads,
            encoder_layers=r.get("encoder_layers", 12, int),
            decoder_layers=r.get("decoder_layers", 12, int),
            ffn_dim=ffn_dim,
            activation=ACTIVATIONS[activation],
            norm_first=False,
            share_embeddings=r.get("share_encoder_decoder_embeddings", True, bool),
            tie_output=r.get("tie_word_embeddings", True, bool),
            scale_embedding=r.get("scale_embedding", False, bool),
            final_logits_bias=True,
            position_layout="split",
            max_positions=r.get("max_position_embeddings", 1024, int),
            dropout=float(r.get("dropout", 0.1, (int, float))),
            layer_norm_eps=MARIAN_LAYER_NORM_EPS,
            pad_id=pad_id,
            bos_id=r.get("decoder_start_token_id", 58100, int),
            eos_id=r.get("eos_token_id", 0, int),
            unk_id=unk_id,
        )
    except ValueError as exc:
        raise ImportCheckpointError(f"{path}: {exc}") from None


def take_layers(state: dict[str, torch.Tensor], cfg: TranslationConfig, source: Path) -> dict:
    """Every encoder and decoder layer's weights (attention, feed-forward, layer norms), moved
    out of ``state`` under our names: the BART-family layout Marian and M2M100 / NLLB share."""
    ours: dict = {}
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
    return ours


def _layer_weights(state: dict[str, torch.Tensor], prefix: str, ours: str, source: Path, cross: bool = False) -> dict:
    """One Marian attention module -> our packed projections."""
    q, k, v, o = (f"{prefix}.{n}_proj" for n in ("q", "k", "v", "out"))
    w = {n: take(state, f"{p}.weight", source) for n, p in (("q", q), ("k", k), ("v", v), ("o", o))}
    b = {n: take(state, f"{p}.bias", source) for n, p in (("q", q), ("k", k), ("v", v), ("o", o))}
    out = {f"{ours}.proj.weight": w["o"], f"{ours}.proj.bias": b["o"]}
    if cross:
        out |= {f"{ours}.q.weight": w["q"], f"{ours}.q.bias": b["q"]}
        out |= {f"{ours}.kv.weight": torch.cat([w["k"], w["v"]]), f"{ours}.kv.bias": torch.cat([b["k"], b["v"]])}
    else:
        out |= {f"{ours}.qkv.weight": torch.cat([w["q"], w["k"], w["v"]])}
        out |= {f"{ours}.qkv.bias": torch.cat([b["q"], b["k"], b["v"]])}
    return out


def _move(state: dict, pairs: list[tuple[str, str]], source: Path) -> dict:
    return {ours: take(state, theirs, source) for theirs, ours in pairs}


def _linear_and_norm_pairs(theirs: str, ours: str) -> list[tuple[str, str]]:
    return [(f"{theirs}.{p}", f"{ours}.{p}") for p in ("weight", "bias")]


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

    Embeddings follow what transformers runs: with ``tie_word_embeddings`` the output
    projection is the target embedding and, when ``share_encoder_decoder_embeddings``,
    both sides use ``shared``; without it (transformers 5 then ties nothing) each side
    uses its own stored ``embed_tokens`` and ``lm_head`` is read. ``share_embeddings``
    is set from whether the two embeddings are the same tensor.
    """
    state = {k.removeprefix("model."): v for k, v in state.items()}
    ours: dict[str, torch.Tensor] = {}
    for side in ("encoder", "decoder"):
        stored = state.pop(f"{side}.embed_positions.weight", None)
        if stored is not None:  # older checkpoints store the (fixed) table: it must be the one we compute
            table = sinusoidal_table(cfg.max_positions, cfg.d_model, "split")
            if stored.shape != table.shape or (stored - table).abs().max() > 1e-5:
                raise ImportCheckpointError(
                    f"{source}: weight 'model.{side}.embed_positions.weight' is not Marian's sinusoidal table"
                )
    shared = state.pop("shared.weight", None)
    src = state.pop("encoder.embed_tokens.weight", None)
    tgt = state.pop("decoder.embed_tokens.weight", None)
    lm_head = state.pop("lm_head.weight", None)
    if cfg.tie_output and cfg.share_embeddings:
        src = tgt = shared if shared is not None else src
    elif cfg.tie_output:
        pass  # separate embeddings, the output tied to the target one
    else:
        src = src if src is not None else shared
        tgt = tgt if tgt is not None else shared
        if lm_head is None:
            raise ImportCheckpointError(f"{source}: weight 'lm_head.weight' missing (tie_word_embeddings is false)")
        ours["lm_head.weight"] = lm_head
    for name, tensor in (("encoder", src), ("decoder", tgt)):
        if tensor is None:
            raise ImportCheckpointError(f"{source}: weight 'model.shared.weight' / 'model.{name}.embed_tokens' missing")
    shared_embeddings = src is tgt or (src.shape == tgt.shape and torch.equal(src, tgt))
    cfg = dataclasses.replace(cfg, share_embeddings=shared_embeddings)
    ours["src_embed.weight"] = src
    if not shared_embeddings:
        ours["tgt_embed.weight"] = tgt
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
    for name, ours in (("pad", cfg.pad_id), ("eos", cfg.eos_id)):
        if special_ids[name] != ours:
            raise ImportCheckpointError(
                f"{directory / 'config.json'}: {name}_token_id is {ours} but vocab.json maps the {name} token to "
                f"{special_ids[name]}"
            )
    if tokenizer.get_vocab_size(with_added_tokens=True) > cfg.vocab_size:
        raise ImportCheckpointError(
            f"{directory / 'vocab.json'}: {tokenizer.get_vocab_size(with_added_tokens=True)} tokens, more than "
            f"config.json vocab_size {cfg.vocab_size}"
        )
    weights = load_weights(directory)
    if source_index is not None:
        unify_vocabularies(weights, source_index, directory)
    state, cfg = state_from_marian(weights, cfg, directory)
    model = TranslationTransformer(cfg)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shape mismatches
        raise ImportCheckpointError(f"{directory}: weights do not fit config.json ({exc})") from None
    tied = {"tgt_embed.weight"} if cfg.share_embeddings else set()
    tied |= {"lm_head.weight"} if cfg.tie_output else set()
    if set(missing) - tied or unexpected:
        raise ImportCheckpointError(f"{directory}: weights missing {sorted(set(missing) - tied)[:5]}")
    return ImportedTranslator(
        model.eval(),
        tokenizer,
        directory.resolve().name,
        _limits(directory, cfg),
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


def _limits(directory: Path, cfg: TranslationConfig) -> dict[str, int]:
    """Source limit from the tokenizer's ``model_max_length``, target from generation's ``max_length``."""
    tok_cfg = read_json(directory / "tokenizer_config.json", required=False) or {}
    gen_cfg = read_json(directory / "generation_config.json", required=False) or {}
    source, target = tok_cfg.get("model_max_length"), gen_cfg.get("max_length")
    limits = {}
    if isinstance(source, int) and source >= 1:
        limits["max_source_len"] = min(source, cfg.max_positions)
    if isinstance(target, int) and target >= 2:  # max_length counts the start token; our limit does not
        limits["max_target_len"] = min(target - 1, cfg.max_positions)
    return limits


# --- the reverse: our model -> transformers.MarianMTModel -------------------------------------------


def marian_config_kwargs(cfg: TranslationConfig) -> dict[str, Any]:
    """MarianConfig arguments for ``cfg``; ValueError naming the option Marian cannot express."""
    if cfg.norm_first:
        raise ValueError("norm_first=True cannot be expressed in Marian (post-norm only)")
    if cfg.position_layout != "split":
        raise ValueError(f"position_layout={cfg.position_layout!r} cannot be expressed in Marian (split only)")
    if cfg.layer_norm_eps != MARIAN_LAYER_NORM_EPS:
        raise ValueError(f"layer_norm_eps={cfg.layer_norm_eps} cannot be expressed in Marian (fixed at 1e-5)")
    if cfg.activation not in MARIAN_ACTIVATION:
        raise ValueError(f"activation={cfg.activation!r} cannot be expressed in Marian")
    return dict(
        vocab_size=cfg.vocab_size,
        decoder_vocab_size=cfg.vocab_size,
        d_model=cfg.d_model,
        encoder_layers=cfg.encoder_layers,
        decoder_layers=cfg.decoder_layers,
        encoder_attention_heads=cfg.num_heads,
        decoder_attention_heads=cfg.num_heads,
        encoder_ffn_dim=cfg.ffn_dim,
        decoder_ffn_dim=cfg.ffn_dim,
        activation_function=MARIAN_ACTIVATION[cfg.activation],
        max_position_embeddings=cfg.max_positions,
        scale_embedding=cfg.scale_embedding,
        share_encoder_decoder_embeddings=cfg.share_embeddings,
        tie_word_embeddings=cfg.tie_output,
        dropout=cfg.dropout,
        pad_token_id=cfg.pad_id,
        eos_token_id=cfg.eos_id,
        decoder_start_token_id=cfg.bos_id,
        forced_eos_token_id=None,
    )


def state_to_marian(model: TranslationTransformer) -> dict[str, torch.Tensor]:
    """Our weights under MarianMTModel's parameter names (positions excluded: Marian builds them)."""
    cfg = model.cfg
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    C = cfg.d_model
    out: dict[str, torch.Tensor] = {}
    src, tgt = sd["src_embed.weight"], sd["tgt_embed.weight"]
    if cfg.share_embeddings:
        out["model.shared.weight"] = src
    out["model.encoder.embed_tokens.weight"], out["model.decoder.embed_tokens.weight"] = src, tgt
    out["lm_head.weight"] = sd["lm_head.weight"]
    bias = sd.get("logits_bias")
    out["final_logits_bias"] = (bias if bias is not None else torch.zeros(cfg.vocab_size))[None]  # (1, V)

    def attention(ours: str, theirs: str, cross: bool) -> None:
        if cross:
            q_w, q_b = sd[f"{ours}.q.weight"], sd[f"{ours}.q.bias"]
            (k_w, v_w), (k_b, v_b) = sd[f"{ours}.kv.weight"].split(C), sd[f"{ours}.kv.bias"].split(C)
        else:
            q_w, k_w, v_w = sd[f"{ours}.qkv.weight"].split(C)
            q_b, k_b, v_b = sd[f"{ours}.qkv.bias"].split(C)
        for name, w, b in (("q", q_w, q_b), ("k", k_w, k_b), ("v", v_w, v_b)):
            out[f"{theirs}.{name}_proj.weight"], out[f"{theirs}.{name}_proj.bias"] = w.contiguous(), b.contiguous()
        out[f"{theirs}.out_proj.weight"], out[f"{theirs}.out_proj.bias"] = (
            sd[f"{ours}.proj.weight"],
            sd[f"{ours}.proj.bias"],
        )

    def copy(pairs: list[tuple[str, str]]) -> None:
        for ours, theirs in pairs:
            for p in ("weight", "bias"):
                out[f"{theirs}.{p}"] = sd[f"{ours}.{p}"]

    for i in range(cfg.encoder_layers):
        o, t = f"encoder_layers.{i}", f"model.encoder.layers.{i}"
        attention(f"{o}.self_attn", f"{t}.self_attn", cross=False)
        copy([(f"{o}.res1.norm", f"{t}.self_attn_layer_norm"), (f"{o}.ffn.fc1", f"{t}.fc1")])
        copy([(f"{o}.ffn.fc2", f"{t}.fc2"), (f"{o}.res2.norm", f"{t}.final_layer_norm")])
    for i in range(cfg.decoder_layers):
        o, t = f"decoder_layers.{i}", f"model.decoder.layers.{i}"
        attention(f"{o}.self_attn", f"{t}.self_attn", cross=False)
        attention(f"{o}.cross_attn", f"{t}.encoder_attn", cross=True)
        copy([(f"{o}.res1.norm", f"{t}.self_attn_layer_norm"), (f"{o}.res2.norm", f"{t}.encoder_attn_layer_norm")])
        copy([(f"{o}.ffn.fc1", f"{t}.fc1"), (f"{o}.ffn.fc2", f"{t}.fc2"), (f"{o}.res3.norm", f"{t}.final_layer_norm")])
    return out


def to_marian(model: TranslationTransformer):
    """A ``transformers.MarianMTModel`` (eval mode) with ``model``'s config and weights.

    Its generation config follows our decoding rules: greedy by default, pad and start
    tokens never generated (``bad_words_ids``), no forced end token, so
    ``generate(input_ids, attention_mask=..., max_new_tokens=N)`` gives the tokens of
    :func:`attnserve.models.greedy_decode`. Raises ValueError naming an option Marian
    cannot express.
    """
    if not isinstance(model, TranslationTransformer):
        raise TypeError(f"to_marian takes a TranslationTransformer, got {type(model).__name__}")
    kwargs = marian_config_kwargs(model.cfg)
    transformers = require_module("transformers", "to_marian")
    marian = transformers.MarianMTModel(transformers.MarianConfig(**kwargs))
    missing, unexpected = marian.load_state_dict(state_to_marian(model), strict=False)
    missing = [k for k in missing if not k.endswith("embed_positions.weight")]
    if missing or unexpected:  # an internal invariant: the two name tables disagree
        raise RuntimeError(f"MarianMTModel weights not mapped: missing {missing[:5]}, unexpected {unexpected[:5]}")
    cfg = model.cfg
    banned = sorted({cfg.pad_id, cfg.bos_id})
    marian.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=cfg.bos_id,
        eos_token_id=cfg.eos_id,
        pad_token_id=cfg.pad_id,
        bad_words_ids=[[i] for i in banned],
        forced_eos_token_id=None,
        num_beams=1,
        do_sample=False,
        max_length=cfg.max_positions,
    )
    return marian.eval()
