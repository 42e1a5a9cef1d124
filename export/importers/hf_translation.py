"""What the Hugging Face translation families (Marian, M2M100 / NLLB: the BART-family layout)
share: how ``config.json`` spells a transformer, the layers' weight names, the limits a directory
states, and the checks every import makes of its tokenizer and weights."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from attnserve.models import TranslationConfig, TranslationTransformer

from .hf_files import ConfigReader, ImportCheckpointError, read_json, take

# config.json's ``activation_function`` -> ours. transformers' "gelu" is the exact (erf) GELU, as is ours.
ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}
LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, which transformers' Marian and M2M100 layers use


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


def config_fields(r: ConfigReader, defaults: dict[str, Any]) -> dict[str, Any]:
    """The :class:`TranslationConfig` fields every family's ``config.json`` spells alike (absent
    ones: the family's ``defaults``, by config.json key, else the defaults the families share)."""
    default = {"d_model": 1024, "encoder_layers": 12, "decoder_layers": 12, "attention_heads": 16, "ffn_dim": 4096}
    default |= {"max_position_embeddings": 1024, "dropout": 0.1, "tie_word_embeddings": True} | defaults
    heads = r.get("encoder_attention_heads", default["attention_heads"], int)
    if r.get("decoder_attention_heads", default["attention_heads"], int) != heads:
        r.fail("decoder_attention_heads", f"must equal encoder_attention_heads ({heads})")
    ffn_dim = r.get("encoder_ffn_dim", default["ffn_dim"], int)
    if r.get("decoder_ffn_dim", default["ffn_dim"], int) != ffn_dim:
        r.fail("decoder_ffn_dim", f"must equal encoder_ffn_dim ({ffn_dim})")
    activation = r.get("activation_function", default["activation_function"], str)
    if activation not in ACTIVATIONS:
        r.fail("activation_function", f"{activation!r} is not supported (one of {sorted(ACTIVATIONS)})")
    return dict(
        d_model=r.get("d_model", default["d_model"], int),
        num_heads=heads,
        encoder_layers=r.get("encoder_layers", default["encoder_layers"], int),
        decoder_layers=r.get("decoder_layers", default["decoder_layers"], int),
        ffn_dim=ffn_dim,
        activation=ACTIVATIONS[activation],
        tie_output=r.get("tie_word_embeddings", default["tie_word_embeddings"], bool),
        scale_embedding=r.get("scale_embedding", default["scale_embedding"], bool),
        max_positions=r.get("max_position_embeddings", default["max_position_embeddings"], int),
        dropout=float(r.get("dropout", default["dropout"], (int, float))),
        layer_norm_eps=LAYER_NORM_EPS,
        pad_id=r.get("pad_token_id", default["pad_token_id"], int),
        bos_id=r.get("decoder_start_token_id", default["decoder_start_token_id"], int),
        eos_id=r.get("eos_token_id", default["eos_token_id"], int),
    )


def translation_config(path: Path, fields: dict[str, Any]) -> TranslationConfig:
    """``TranslationConfig(**fields)``; a value it refuses is an import error naming ``path``."""
    try:
        return TranslationConfig(**fields)
    except ValueError as exc:
        raise ImportCheckpointError(f"{path}: {exc}") from None


def check_special_ids(
    config_path: Path, cfg: TranslationConfig, ids: dict[str, int], mapping: str, names: dict
) -> None:
    """config.json's pad and eos ids are the tokenizer's (``ids``). ``mapping`` says whose mapping
    that is, formatted with the role (``name``) and its token (``token``, from ``names``)."""
    for name, ours in (("pad", cfg.pad_id), ("eos", cfg.eos_id)):
        if ids[name] != ours:
            whose = mapping.format(name=name, token=repr(names.get(name)))
            raise ImportCheckpointError(f"{config_path}: {name}_token_id is {ours} but {whose} {ids[name]}")


def model_from_state(directory: Path, cfg: TranslationConfig, state: dict[str, torch.Tensor]) -> TranslationTransformer:
    """A :class:`TranslationTransformer` of ``cfg`` holding ``state`` (eval mode); the tied weights
    may be absent, any other missing or unexpected weight is an import error."""
    model = TranslationTransformer(cfg)
    expected = model.state_dict()
    wrong = [(k, tuple(v.shape), tuple(expected[k].shape)) for k, v in state.items() if k in expected]
    wrong = [w for w in wrong if w[1] != w[2]]
    if wrong:  # one line, where load_state_dict would list every mismatch on a line of its own
        name, found, wanted = wrong[0]
        raise ImportCheckpointError(
            f"{directory}: weights do not fit config.json: {name} is {found}, config.json's sizes make it "
            f"{wanted} ({len(wrong)} weight(s) differ)"
        )
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {"tgt_embed.weight"} if cfg.share_embeddings else set()
    tied |= {"lm_head.weight"} if cfg.tie_output else set()
    if set(missing) - tied or unexpected:
        raise ImportCheckpointError(f"{directory}: weights missing {sorted(set(missing) - tied)[:5]}")
    return model.eval()


def embedding_weights(
    state: dict[str, torch.Tensor], cfg: TranslationConfig, source: Path
) -> tuple[dict[str, torch.Tensor], TranslationConfig]:
    """The embeddings and output projection transformers runs, moved out of ``state`` (no
    ``model.`` prefix) under our names, and ``cfg`` with ``share_embeddings`` set from them.

    With ``tie_word_embeddings`` the output projection is the target embedding and, when the
    family shares its embeddings (``cfg.share_embeddings``: Marian's
    ``share_encoder_decoder_embeddings``, always for M2M100 / NLLB), both sides use ``shared``.
    Without it transformers 5 ties nothing: each side runs its own stored ``embed_tokens``
    (``shared`` where a checkpoint stores only that, as transformers 4 saved them) and
    ``lm_head`` is read. ``share_embeddings`` then holds when the two are the same tensor.
    """
    shared = state.pop("shared.weight", None)
    src = state.pop("encoder.embed_tokens.weight", None)
    tgt = state.pop("decoder.embed_tokens.weight", None)
    lm_head = state.pop("lm_head.weight", None)
    ours: dict[str, torch.Tensor] = {}
    if cfg.tie_output and cfg.share_embeddings:
        src = tgt = next((t for t in (shared, src, tgt) if t is not None), None)
    elif not cfg.tie_output:  # (tied output, separate embeddings: each side its own, as stored)
        src = src if src is not None else shared
        tgt = tgt if tgt is not None else shared
        if lm_head is None:
            raise ImportCheckpointError(f"{source}: weight 'lm_head.weight' missing (tie_word_embeddings is false)")
        ours["lm_head.weight"] = lm_head
    for name, tensor in (("encoder", src), ("decoder", tgt)):
        if tensor is None:
            raise ImportCheckpointError(f"{source}: weight 'model.shared.weight' / 'model.{name}.embed_tokens' missing")
    shared_embeddings = src is tgt or (src.shape == tgt.shape and torch.equal(src, tgt))
    ours["src_embed.weight"] = src
    if not shared_embeddings:
        ours["tgt_embed.weight"] = tgt
    return ours, dataclasses.replace(cfg, share_embeddings=shared_embeddings)


def take_layers(state: dict[str, torch.Tensor], cfg: TranslationConfig, source: Path) -> dict:
    """Every encoder and decoder layer's weights (attention, feed-forward, layer norms), moved
    out of ``state`` under our names: the BART-family layout Marian and M2M100 / NLLB share."""
    ours: dict = {}
    for i in range(cfg.encoder_layers):
        t, o = f"encoder.layers.{i}", f"encoder_layers.{i}"
        ours |= _attention_weights(state, f"{t}.self_attn", f"{o}.self_attn", source)
        pairs = weight_and_bias_pairs(f"{t}.self_attn_layer_norm", f"{o}.res1.norm")
        pairs += weight_and_bias_pairs(f"{t}.fc1", f"{o}.ffn.fc1") + weight_and_bias_pairs(f"{t}.fc2", f"{o}.ffn.fc2")
        pairs += weight_and_bias_pairs(f"{t}.final_layer_norm", f"{o}.res2.norm")
        ours |= move_weights(state, pairs, source)
    for i in range(cfg.decoder_layers):
        t, o = f"decoder.layers.{i}", f"decoder_layers.{i}"
        ours |= _attention_weights(state, f"{t}.self_attn", f"{o}.self_attn", source)
        ours |= _attention_weights(state, f"{t}.encoder_attn", f"{o}.cross_attn", source, cross=True)
        pairs = weight_and_bias_pairs(f"{t}.self_attn_layer_norm", f"{o}.res1.norm")
        pairs += weight_and_bias_pairs(f"{t}.encoder_attn_layer_norm", f"{o}.res2.norm")
        pairs += weight_and_bias_pairs(f"{t}.fc1", f"{o}.ffn.fc1") + weight_and_bias_pairs(f"{t}.fc2", f"{o}.ffn.fc2")
        pairs += weight_and_bias_pairs(f"{t}.final_layer_norm", f"{o}.res3.norm")
        ours |= move_weights(state, pairs, source)
    return ours


def _attention_weights(
    state: dict[str, torch.Tensor], prefix: str, ours: str, source: Path, cross: bool = False
) -> dict:
    """One attention module (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``) -> our packed projections."""
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


def move_weights(state: dict, pairs: list[tuple[str, str]], source: Path) -> dict:
    return {ours: take(state, theirs, source) for theirs, ours in pairs}


def weight_and_bias_pairs(theirs: str, ours: str) -> list[tuple[str, str]]:
    return [(f"{theirs}.{p}", f"{ours}.{p}") for p in ("weight", "bias")]


def hf_limits(directory: Path, cfg: TranslationConfig) -> dict[str, int]:
    """Source limit from the tokenizer's ``model_max_length``, target from generation's ``max_length``.

    Generation's settings are generation_config.json's where that file is, else config.json's
    (older opus-mt checkpoints state ``max_length`` only there): the same file transformers'
    ``from_pretrained`` takes them from, so the limit is the length transformers generates to."""
    tok_cfg = read_json(directory / "tokenizer_config.json", required=False) or {}
    source, target = tok_cfg.get("model_max_length"), generation_settings(directory).get("max_length")
    limits = {}
    if isinstance(source, int) and source >= 1:
        limits["max_source_len"] = min(source, cfg.max_positions)
    if isinstance(target, int) and target >= 2:  # max_length counts the start token; our limit does not
        limits["max_target_len"] = min(target - 1, cfg.max_positions)
    return limits


def generation_settings(directory: Path) -> dict[str, Any]:
    """generation_config.json where the directory has one, else config.json (checkpoints saved before
    the file existed keep ``max_length``, ``forced_bos_token_id`` ... there): where transformers'
    ``from_pretrained`` takes the settings ``generate`` uses."""
    found = read_json(directory / "generation_config.json", required=False)
    return found if found is not None else read_json(directory / "config.json", required=False) or {}
