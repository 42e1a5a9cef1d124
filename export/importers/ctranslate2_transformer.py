"""A CTranslate2 ``TransformerSpec`` (read by :mod:`.ctranslate2_bin`) -> :class:`TranslationTransformer`.

What CTranslate2's C++ layers compute (``src/layers/transformer.cc``, ``attention.cc``,
``common.cc``) and how :class:`TranslationConfig` expresses it:

- ``pre_norm`` (encoder and decoder alike) -> ``norm_first``; a pre-norm stack's final
  ``layer_norm`` may be absent (``no_final_norm``) -> ``final_norm=False``. Each sublayer's
  ``layer_norm`` is applied before it (pre-norm) or after the residual sum (post-norm): our
  ``Residual`` does the same. Epsilon: ``config.json``'s ``layer_norm_epsilon``, else 1e-5.
- self-attention ``linear_0`` is the fused q, k, v projection (our ``qkv``, same order),
  ``linear_1`` the output; cross-attention ``linear_0`` is q, ``linear_1`` the fused k, v
  (our ``kv``), ``linear_2`` the output. A stored ``queries_scale`` (CTranslate2's default
  is 1/sqrt(head_dim)) is folded into the query projection. Missing biases are zeros.
- activation ids 0 relu, 1 tanh-approximated GELU, 2 swish, 3 GELU.
- embeddings scaled by sqrt(d_model) unless ``scale_embeddings`` says otherwise; positions:
  a stored ``position_encodings/encodings`` table (a known sinusoid layout when it is one, else
  a learned table), or none stored: CTranslate2's generated sinusoid, sines then cosines with
  frequencies 10000^(-i/(d/2 - 1)) and the first token at position 1 (our ``fairseq`` layout,
  offset 1).
- ``decoder/projection`` (with its bias: our logits bias) is tied when it is the decoder
  embedding (an alias in ``model.bin``) or equal to it.
- vocabularies: one id space for both sides (as for Marian's separate vocabularies): the
  target's ids as they are, then source tokens the target lacks; the source embedding is
  re-indexed to it and ids past the target vocabulary are never generated (logits bias
  :data:`BANNED_LOGIT`). When the vocabulary has no pad token (``<blank>`` / ``<pad>``) or the
  decoder starts from a zero embedding (``start_from_zero_embedding``: CTranslate2's Marian),
  one more id with a zero embedding is added and serves as pad and, then, as start token.
  Tokens the package's tokenizer can produce but the source vocabulary lacks (``unknown``:
  CTranslate2 reads them as ``<unk>``) get ids of their own after those, with the source
  embedding of ``<unk>``, so the tokenizer can segment exactly as the original one.

Anything else ``model.bin`` holds (relative positions, multi-query, GLU, RMS norm, ALiBi,
rotary, layernorm_embedding, source features, ...) is refused, named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from attnserve.models import TranslationConfig, TranslationTransformer, sinusoidal_table

from .ctranslate2_bin import CT2Model, describe_unsupported
from .hf_files import ImportCheckpointError
from .marian import BANNED_LOGIT

SPECS = {"TransformerSpec": None, "TransformerBase": 8, "TransformerBig": 16, "": 8}  # name -> num_heads if implied
ACTIVATIONS = {0: "relu", 1: "gelu_tanh", 2: "swish", 3: "gelu"}
ACTIVATION_NAMES = {4: "GELUSigmoid", 5: "Tanh", 6: "Sigmoid"}
PAD_TOKENS = ("<blank>", "<pad>")  # OpenNMT's, then the usual one
ZERO_TOKEN = "<pad>"  # the added zero-embedding id's name (when the vocabulary has none of PAD_TOKENS)
DEFAULT_MAX_POSITIONS = 1024  # generated sinusoids have no limit; this bounds the exported table
LAYER_NORM_EPS = 1e-5  # CTranslate2's LayerNorm default (with a beta)
# Attributes read and known to change nothing here (alignment heads are what CTranslate2 returns
# as attention; the server aligns with all of them).
IGNORED = ("decoder/alignment_layer", "decoder/alignment_heads", "alignment_layer", "alignment_heads")
# Flags this model cannot honour when they are set.
UNSUPPORTED_FLAGS = {
    "decoder/alibi": "ALiBi attention biases",
    "decoder/alibi_use_positive_positions": "ALiBi attention biases",
    "decoder/scale_alibi": "ALiBi attention biases",
    "encoder/multi_query_attention": "multi-query attention",
    "decoder/multi_query_attention": "multi-query attention",
    "multi_query_attention": "multi-query attention",
}


@dataclass
class Vocabulary:
    """The unified id space: token -> id, which tokens the source side knows, and the special ids."""

    ids: dict[str, int]
    source_tokens: set[str]  # what CTranslate2's source vocabulary holds (others are <unk> there)
    unknown: set[str]  # tokens with ids of their own that the source side reads as <unk>
    size: int  # ids.values() are 0..size-1
    pad_id: int
    bos_id: int  # decoder start
    eos_id: int
    unk_id: int
    source_bos: str | None  # config add_source_bos: this token opens every source
    source_eos: str | None  # config add_source_eos: this token ends every source
    tokens: dict[str, str]  # role -> token (unk, eos, pad, bos)


class _Mapper:
    def __init__(self, m: CT2Model, source_vocab: list[str], target_vocab: list[str], unknown: list[str]) -> None:
        self.m, self.where = m, m.path / "model.bin"
        self.source_vocab, self.target_vocab, self.unknown = source_vocab, target_vocab, unknown

    def fail(self, message: str) -> None:
        raise ImportCheckpointError(f"{self.where}: {message}")

    def flag(self, *names: str, default: bool = False) -> bool:
        for name in names:
            if self.m.has(name):
                return bool(self.m.attribute(name))
        return default

    def first(self, *names: str) -> str | None:
        return next((n for n in names if self.m.has(n)), None)

    # --- the config -------------------------------------------------------------------------

    def heads(self) -> int:
        implied = SPECS[self.m.spec]
        enc = self.m.attribute("encoder/num_heads", None)
        dec = self.m.attribute("decoder/num_heads", None)
        top = self.m.attribute("num_heads", None)
        enc, dec = enc or top or implied, dec or top or implied
        if enc is None:
            self.fail("no num_heads attribute")
        if enc != dec:
            self.fail(f"encoder/num_heads {enc} differs from decoder/num_heads {dec}, which is not supported")
        return int(enc)

    def norm_first(self) -> bool:
        enc = self.flag("encoder/pre_norm", "pre_norm", default=True)
        dec = self.flag("decoder/pre_norm", "pre_norm", default=True)
        if enc != dec:
            self.fail(f"encoder pre_norm={enc} but decoder pre_norm={dec}: one norm placement for both is supported")
        return enc

    def activation(self) -> str:
        ids = {self.m.attribute(n, None) for n in ("encoder/activation", "decoder/activation", "activation")} - {None}
        if len(ids) > 1:
            self.fail(f"encoder and decoder activations differ ({sorted(ids)}), which is not supported")
        act = int(ids.pop()) if ids else 0
        if act not in ACTIVATIONS:
            name = ACTIVATION_NAMES.get(act, f"id {act}")
            self.fail(f"activation {name} is not supported (relu, gelu, gelu_tanh, swish)")
        return ACTIVATIONS[act]

    def embedding_scale(self, d_model: int) -> bool:
        values = []
        for side in ("encoder", "decoder"):
            name = self.first(f"{side}/scale_embeddings", f"{side}/embeddings/multiply_by_sqrt_depth")
            name = name or self.first(f"{side}/embeddings_0/multiply_by_sqrt_depth")
            if name is None:
                values.append(math.sqrt(d_model))
                continue
            raw = self.m.variables[name]
            value = self.m.attribute(name)
            if raw.dtype == np.int8:
                values.append(math.sqrt(d_model) if value else 1.0)
            else:
                values.append(float(value))
        for v in values:
            if not (math.isclose(v, math.sqrt(d_model), rel_tol=1e-4) or math.isclose(v, 1.0, rel_tol=1e-6)):
                self.fail(f"embedding scale {v} is neither sqrt(d_model) nor 1, which is not supported")
        if not math.isclose(values[0], values[1], rel_tol=1e-4):
            self.fail(f"encoder embedding scale {values[0]} differs from the decoder's {values[1]}")
        return not math.isclose(values[0], 1.0, rel_tol=1e-6) or d_model == 1

    def positions(self, d_model: int) -> tuple[str, int, int, np.ndarray | None]:
        """(layout, offset, max_positions, learned table or None)."""
        names = [f"{side}/position_encodings/encodings" for side in ("encoder", "decoder")]
        tables = [self.m.weight(n) for n in names if self.m.has(n)]
        if not tables:
            return "fairseq", 1, DEFAULT_MAX_POSITIONS, None
        if len(tables) != 2 or tables[0].shape != tables[1].shape or not np.allclose(tables[0], tables[1], atol=1e-6):
            self.fail("the encoder and decoder position encodings differ (or one is missing), which is not supported")
        table = tables[0]
        if table.ndim != 2 or table.shape[1] != d_model:
            self.fail(f"position encodings have shape {table.shape}, expected (N, {d_model})")
        for layout in ("split", "interleaved", "fairseq"):
            for offset in (0, 1, 2):
                known = sinusoidal_table(table.shape[0], d_model, layout, offset).numpy()
                if np.abs(known - table).max() < 2e-3:
                    return layout, offset, table.shape[0], None
        return "learned", 0, table.shape[0], table

    # --- the vocabulary ---------------------------------------------------------------------

    def vocabulary(self, start_from_zero: bool) -> Vocabulary:
        cfg = self.m.config
        ids = {t: i for i, t in enumerate(self.target_vocab)}
        if len(ids) != len(self.target_vocab):
            self.fail("the target vocabulary lists a token twice")
        for token in self.source_vocab:
            ids.setdefault(token, len(ids))
        pad = next((t for t in PAD_TOKENS if t in ids), None)
        if pad is None or start_from_zero:
            zero = ZERO_TOKEN if ZERO_TOKEN not in ids else "<attnserve-start>"
            ids[zero] = len(ids)
            pad = pad or zero
        unknown = [t for t in dict.fromkeys(self.unknown) if t not in ids]
        for token in unknown:
            ids[token] = len(ids)
        names = {k: cfg.get(f"{k}_token", d) for k, d in (("unk", "<unk>"), ("bos", "<s>"), ("eos", "</s>"))}
        start = cfg.get("decoder_start_token", "<s>")
        if start is None:
            self.fail("config.json decoder_start_token is null (the start token comes from the caller), not supported")
        for role, token in (("eos", names["eos"]), ("decoder_start", start)):
            if token not in self.target_vocab and not (role == "decoder_start" and start_from_zero):
                self.fail(f"the {role} token {token!r} (config.json) is not in the target vocabulary")
        unk = names["unk"] if names["unk"] in ids else None
        if unk is None:
            self.fail(f"the unknown token {names['unk']!r} (config.json unk_token) is in no vocabulary")
        bos_id = ids[zero] if start_from_zero else ids[start]
        for flag, token in (("add_source_bos", names["bos"]), ("add_source_eos", names["eos"])):
            if cfg.get(flag) and token not in self.source_vocab:
                self.fail(f"config.json {flag} is set but {token!r} is not in the source vocabulary")
        return Vocabulary(
            ids=ids,
            source_tokens=set(self.source_vocab),
            unknown=set(unknown),
            size=len(ids),
            pad_id=ids[pad],
            bos_id=bos_id,
            eos_id=ids[names["eos"]],
            unk_id=ids[unk],
            source_bos=names["bos"] if cfg.get("add_source_bos") else None,
            source_eos=names["eos"] if cfg.get("add_source_eos") else None,
            tokens={"unk": unk, "eos": names["eos"], "pad": pad, "bos": names["bos"]},
        )

    # --- the weights ------------------------------------------------------------------------

    def linear(self, scope: str, out_features: int, in_features: int) -> tuple[np.ndarray, np.ndarray]:
        weight = self.m.weight(f"{scope}/weight", (out_features, in_features))
        has_bias = self.m.has(f"{scope}/bias")
        bias = self.m.weight(f"{scope}/bias", (out_features,)) if has_bias else np.zeros(out_features, np.float32)
        return weight, bias

    def norm(self, scope: str, d: int) -> dict[str, np.ndarray]:
        if not self.m.has(f"{scope}/beta") and self.m.has(f"{scope}/gamma"):
            self.fail(f"{scope} is an RMS norm (gamma without beta), which is not supported")
        return {"weight": self.m.weight(f"{scope}/gamma", (d,)), "bias": self.m.weight(f"{scope}/beta", (d,))}

    def attention(self, scope: str, ours: str, d: int, heads: int, cross: bool) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        scale = self.m.attribute(f"{scope}/queries_scale", None)
        fold = 1.0 if scale is None else float(scale) * math.sqrt(d // heads)  # ours divides by sqrt(head_dim)
        if cross:
            q_w, q_b = self.linear(f"{scope}/linear_0", d, d)
            out[f"{ours}.q.weight"], out[f"{ours}.q.bias"] = q_w * fold, q_b * fold
            out[f"{ours}.kv.weight"], out[f"{ours}.kv.bias"] = self.linear(f"{scope}/linear_1", 2 * d, d)
            out[f"{ours}.proj.weight"], out[f"{ours}.proj.bias"] = self.linear(f"{scope}/linear_2", d, d)
        else:
            w, b = self.linear(f"{scope}/linear_0", 3 * d, d)
            w, b = w.copy(), b.copy()
            w[:d] *= fold
            b[:d] *= fold
            out[f"{ours}.qkv.weight"], out[f"{ours}.qkv.bias"] = w, b
            out[f"{ours}.proj.weight"], out[f"{ours}.proj.bias"] = self.linear(f"{scope}/linear_1", d, d)
        return out

    def layer(self, side: str, i: int, d: int, heads: int, ffn: int) -> dict[str, np.ndarray]:
        t, o = f"{side}/layer_{i}", f"{side}_layers.{i}"
        out = self.attention(f"{t}/self_attention", f"{o}.self_attn", d, heads, cross=False)
        norms = [(f"{t}/self_attention/layer_norm", f"{o}.res1.norm")]
        if side == "decoder":
            out |= self.attention(f"{t}/attention", f"{o}.cross_attn", d, heads, cross=True)
            norms.append((f"{t}/attention/layer_norm", f"{o}.res2.norm"))
        norms.append((f"{t}/ffn/layer_norm", f"{o}.res{len(norms) + 1}.norm"))
        for theirs, ours in norms:
            out |= {f"{ours}.{k}": v for k, v in self.norm(theirs, d).items()}
        out[f"{o}.ffn.fc1.weight"], out[f"{o}.ffn.fc1.bias"] = self.linear(f"{t}/ffn/linear_0", ffn, d)
        out[f"{o}.ffn.fc2.weight"], out[f"{o}.ffn.fc2.bias"] = self.linear(f"{t}/ffn/linear_1", d, ffn)
        return out

    def count_layers(self, side: str) -> int:
        n = 0
        while self.m.has(f"{side}/layer_{n}/ffn/linear_0/weight"):
            n += 1
        if n == 0:
            self.fail(f"no {side} layers ({side}/layer_0/ffn/linear_0/weight missing)")
        return n


def transformer_from_ct2(
    m: CT2Model, source_vocab: list[str], target_vocab: list[str], unknown: list[str] | tuple[str, ...] = ()
) -> tuple[TranslationTransformer, Vocabulary]:
    """The model (eval mode) and its unified vocabulary; raises ImportCheckpointError naming what is
    unsupported. ``unknown``: tokens the tokenizer produces that the source vocabulary lacks."""
    mp = _Mapper(m, source_vocab, target_vocab, list(unknown))
    _check_features(mp)
    src_name = mp.first("encoder/embeddings_0/weight", "encoder/embeddings/weight")
    if src_name is None:
        mp.fail("variable 'encoder/embeddings_0/weight' missing")
    src = m.weight(src_name)
    if src.ndim != 2 or src.shape[0] != len(source_vocab):
        mp.fail(f"{src_name} has shape {src.shape}, but the source vocabulary has {len(source_vocab)} tokens")
    d, Vt = src.shape[1], len(target_vocab)
    tgt = m.weight("decoder/embeddings/weight", (Vt, d))
    projection = m.weight("decoder/projection/weight", (Vt, d))
    bias = m.weight("decoder/projection/bias", (Vt,)) if m.has("decoder/projection/bias") else None
    vocab = mp.vocabulary(mp.flag("decoder/start_from_zero_embedding"))
    cfg, learned = _config(mp, vocab, d, shared=source_vocab == target_vocab and np.array_equal(src, tgt),
                           tied=np.array_equal(projection, tgt), has_bias=bias is not None)  # fmt: skip
    V = vocab.size
    state: dict[str, np.ndarray] = {"src_embed.weight": _source_embedding(src, source_vocab, vocab)}
    if not cfg.share_embeddings:
        state["tgt_embed.weight"] = np.concatenate([tgt, np.zeros((V - Vt, d), np.float32)])
    if not cfg.tie_output:
        state["lm_head.weight"] = np.concatenate([projection, np.zeros((V - Vt, d), np.float32)])
    if cfg.final_logits_bias:
        bias = bias if bias is not None else np.zeros(Vt, np.float32)
        state["logits_bias"] = np.concatenate([bias, np.full(V - Vt, BANNED_LOGIT, np.float32)])
    if learned is not None:
        state["positions.table"] = learned
    for side, count in (("encoder", cfg.encoder_layers), ("decoder", cfg.decoder_layers)):
        for i in range(count):
            state |= mp.layer(side, i, d, cfg.num_heads, cfg.ffn_dim)
        if cfg.norm_first and cfg.final_norm:
            state |= {f"{side}_norm.{k}": v for k, v in mp.norm(f"{side}/layer_norm", d).items()}
    _refuse_leftovers(m)
    return _load(cfg, state), vocab


def _check_features(mp: _Mapper) -> None:
    """The spec, its revision and the flags this model cannot honour."""
    m = mp.m
    if m.spec not in SPECS:
        mp.fail(f"spec {m.spec!r} is not supported (only TransformerSpec: encoder-decoder translation models)")
    if m.revision > 7:
        mp.fail(f"TransformerSpec revision {m.revision}, written by a newer CTranslate2, is not supported (2..7)")
    if m.revision < 2:
        mp.fail(f"TransformerSpec revision {m.revision} is not supported (2..7)")
    for name, feature in UNSUPPORTED_FLAGS.items():
        if mp.flag(name):
            mp.fail(f"{feature} ({name}) is not supported")
    if m.has("encoder/embeddings_1/weight"):
        mp.fail("several source embeddings (source features) are not supported")
    for name in ("encoder/embeddings_merge", "embeddings_merge", *IGNORED):
        m.attribute(name, None)


def _config(
    mp: _Mapper, vocab: Vocabulary, d: int, *, shared: bool, tied: bool, has_bias: bool
) -> tuple[TranslationConfig, np.ndarray | None]:
    """Our config (and a learned position table, if any) for the model.bin of ``mp``."""
    m = mp.m
    norm_first = mp.norm_first()
    layout, offset, max_positions, learned = mp.positions(d)
    finals = [m.has(f"{side}/layer_norm/gamma") for side in ("encoder", "decoder")]
    if finals[0] != finals[1] or (finals[0] and not norm_first):
        mp.fail(f"final layer norms encoder={finals[0]} decoder={finals[1]} with pre_norm={norm_first}: not supported")
    eps = m.config.get("layer_norm_epsilon")
    try:
        cfg = TranslationConfig(
            vocab_size=vocab.size, d_model=d, num_heads=mp.heads(), encoder_layers=mp.count_layers("encoder"),
            decoder_layers=mp.count_layers("decoder"), ffn_dim=m.weight("encoder/layer_0/ffn/linear_0/weight").shape[0],
            activation=mp.activation(), norm_first=norm_first, final_norm=finals[0] or not norm_first,
            share_embeddings=shared, tie_output=tied, scale_embedding=mp.embedding_scale(d),
            final_logits_bias=has_bias or vocab.size > len(mp.target_vocab), position_layout=layout,
            position_offset=offset, max_positions=max_positions, dropout=0.0,
            layer_norm_eps=LAYER_NORM_EPS if eps is None else float(eps),
            pad_id=vocab.pad_id, bos_id=vocab.bos_id, eos_id=vocab.eos_id, unk_id=vocab.unk_id,
        )  # fmt: skip
    except ValueError as exc:
        raise ImportCheckpointError(f"{mp.where}: {exc}") from None
    return cfg, learned


def _source_embedding(src: np.ndarray, source_vocab: list[str], vocab: Vocabulary) -> np.ndarray:
    """The source embedding re-indexed to the unified ids: (V, C); tokens CTranslate2 reads as <unk>
    get its row, ids the source side lacks zeros."""
    unified = np.zeros((vocab.size, src.shape[1]), np.float32)
    index = {t: i for i, t in enumerate(source_vocab)}
    unk = index.get(vocab.tokens["unk"])
    for token, i in vocab.ids.items():
        if token in index:
            unified[i] = src[index[token]]
        elif token in vocab.unknown and unk is not None:
            unified[i] = src[unk]
    return unified


def _load(cfg: TranslationConfig, state: dict[str, np.ndarray]) -> TranslationTransformer:
    model = TranslationTransformer(cfg)
    tensors = {k: torch.tensor(np.asarray(v, dtype=np.float32)) for k, v in state.items()}
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    tied = {"tgt_embed.weight"} if cfg.share_embeddings else set()
    tied |= {"lm_head.weight"} if cfg.tie_output else set()
    if set(missing) - tied or unexpected:  # an internal invariant: the name tables disagree
        left = sorted(set(missing) - tied)[:5]
        raise RuntimeError(f"CTranslate2 weights not mapped: missing {left}, unexpected {unexpected[:5]}")
    return model.eval()


def _refuse_leftovers(m: CT2Model) -> None:
    """Every variable the mapping did not read is a feature this model lacks: name them."""
    aliases = {id(v) for k, v in m.variables.items() if k in m.used}
    left = sorted(k for k, v in m.variables.items() if k not in m.used and id(v) not in aliases)
    if left:
        where = m.path / "model.bin"
        raise ImportCheckpointError(f"{where}: holds what this importer does not support: {describe_unsupported(left)}")
