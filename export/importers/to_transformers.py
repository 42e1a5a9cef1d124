"""The reverse of the importers: our :class:`TranslationTransformer` as a ``transformers`` model
(``MarianMTModel`` or ``M2M100ForConditionalGeneration``) with the same weights, whose generation
config follows attnserve's decoding rules; the benchmarks and the importers' round-trip tests run
our weights through transformers with it."""

from __future__ import annotations

from typing import Any

import torch

from attnserve.models import TranslationConfig, TranslationTransformer

from .hf_files import require_module
from .hf_translation import LAYER_NORM_EPS

MARIAN_ACTIVATION = {"swish": "swish", "relu": "relu", "gelu": "gelu"}


def marian_config_kwargs(cfg: TranslationConfig) -> dict[str, Any]:
    """MarianConfig arguments for ``cfg``; ValueError naming the option Marian cannot express."""
    if cfg.norm_first:
        raise ValueError("norm_first=True cannot be expressed in Marian (post-norm only)")
    if cfg.position_layout != "split":
        raise ValueError(f"position_layout={cfg.position_layout!r} cannot be expressed in Marian (split only)")
    if cfg.layer_norm_eps != LAYER_NORM_EPS:
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
