"""Tiny Argos Translate packages made by CTranslate2's own converters and spec classes, from
models trained in the test (a random model's greedy output is degenerate and hides errors):

- ``marian``: the ``opus-mt`` checkpoint of :mod:`tests.support.hf_checkpoints` (post-norm,
  swish, Marian's stored sinusoids, zero start embedding) through CTranslate2's
  ``TransformersConverter``; its ``source.spm`` is the package's ``sentencepiece.model``.
- ``onmt``: an OpenNMT-py shape written with ``TransformerSpec.from_config``: pre-norm with final
  norms, ReLU, CTranslate2's generated sinusoids (none stored), one shared vocabulary
  ``<unk> <blank> <s> </s>`` first, no source end token, and ``target_prefix`` ``__de__``
  forced first in every output. Trained here (our TranslationTransformer) to reverse the pieces.
- ``bpe``: ``bpe.model`` (subword-nmt codes learned here) with separate source and target
  vocabularies in different orders, an untied output projection with a bias, learned position
  encodings, GELU; trained to reverse the words' pieces.

Each kind exists as ``float32`` and ``int8`` (CTranslate2's own quantization). :func:`argos_translate`
is what Argos Translate does with a package (tokenize, ``translate_batch``, detokenize), with
greedy search: the tests' oracle.
"""

from __future__ import annotations

import json
import random
import shutil
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import ctranslate2
import numpy as np
import sentencepiece as spm
import torch
import torch.nn.functional as F
from ctranslate2.specs import common_spec, transformer_spec

from attnserve.models import TranslationConfig, TranslationTransformer
from tests.support import hf_checkpoints

KINDS = ("marian", "onmt", "bpe")
QUANTIZATIONS = ("float32", "int8")
TRAIN_STEPS = 400
SMALL = dict(d_model=64, num_heads=4, encoder_layers=2, decoder_layers=2, ffn_dim=128, dropout=0.0)
ONMT_SPECIALS = ["<unk>", "<blank>", "<s>", "</s>"]


@dataclass
class Package:
    kind: str
    path: Path  # the unpacked package directory
    meta: dict

    @property
    def model_dir(self) -> Path:
        return self.path / "model"

    def zip(self, dest: Path) -> Path:
        """The package as a ``.argosmodel`` (a zip of its one directory, as Argos ships them)."""
        with zipfile.ZipFile(dest, "w") as archive:
            for file in sorted(self.path.rglob("*")):
                archive.write(file, Path(self.path.name) / file.relative_to(self.path))
        return dest


# --- Argos Translate's side: the oracle -----------------------------------------------------------


def bpe_segment(word: str, ranks: dict[tuple[str, str], int]) -> list[str]:
    """subword-nmt's ``encode`` (codes version 0.2) of one word, ``@@`` on every piece but the last."""
    symbols = [*word[:-1], word[-1] + "</w>"]
    while len(symbols) > 1:
        rank, i = min((ranks.get(pair, 1 << 30), i) for i, pair in enumerate(zip(symbols, symbols[1:])))
        if rank == 1 << 30:
            break
        a, b = symbols[i], symbols[i + 1]
        merged, j = [], 0
        while j < len(symbols):  # every occurrence of the pair, left to right
            if j + 1 < len(symbols) and symbols[j] == a and symbols[j + 1] == b:
                merged.append(a + b)
                j += 2
            else:
                merged.append(symbols[j])
                j += 1
        symbols = merged
    symbols[-1] = symbols[-1].removesuffix("</w>")
    return [s + "@@" for s in symbols[:-1]] + [symbols[-1]]


def argos_tokenize(package: Package, text: str) -> list[str]:
    if (package.path / "sentencepiece.model").is_file():
        sp = spm.SentencePieceProcessor(model_file=str(package.path / "sentencepiece.model"))
        return sp.encode(text, out_type=str)
    ranks = {pair: i for i, pair in enumerate(read_codes(package.path / "bpe.model"))}
    return [piece for word in text.split() for piece in bpe_segment(word, ranks)]  # no punctuation in the texts


def argos_detokenize(package: Package, tokens: list[str]) -> str:
    if (package.path / "sentencepiece.model").is_file():
        sp = spm.SentencePieceProcessor(model_file=str(package.path / "sentencepiece.model"))
        return sp.decode_pieces(tokens).replace("▁", " ").replace("_", " ")
    return " ".join(tokens).replace("@@ ", "")


def argos_translate(package: Package, texts: list[str], compute_type: str = "default") -> list[str]:
    """Argos Translate's ``apply_packaged_translation`` with greedy search, each text one sentence,
    under attnserve's decoding rule that the end token may come first (``min_decoding_length=0``;
    Argos leaves CTranslate2's default of 1, which never ends before a first token: where a model's
    best first token is the end, Argos gives its second best, docs/importers.md)."""
    translator = ctranslate2.Translator(str(package.model_dir), compute_type=compute_type, intra_threads=1)
    prefix = package.meta.get("target_prefix", "")
    tokens = [argos_tokenize(package, t) for t in texts]
    results = translator.translate_batch(
        tokens,
        target_prefix=[[prefix]] * len(texts) if prefix else None,
        beam_size=1,
        max_decoding_length=40,
        min_decoding_length=0,
    )
    # Argos removes the prefix from the text after decoding, which misses it once its "_" became
    # spaces ("__de__" -> "  de  "); the prefix token is dropped here instead, as was meant.
    hypotheses = [r.hypotheses[0][1:] if prefix else r.hypotheses[0] for r in results]
    return [argos_detokenize(package, h).strip() for h in hypotheses]  # Argos strips one leading space


def read_codes(path: Path) -> list[tuple[str, str]]:
    return [tuple(line.split()) for line in path.read_text().splitlines()[1:] if line.strip()]


# --- building the packages -------------------------------------------------------------------------


def build(kind: str, quantization: str, root: Path) -> Package:
    """The ``kind`` package in ``quantization`` (float32 | int8), built (both) once per session under ``root``."""
    path = root / f"{kind}-{quantization}"
    if not (path / "metadata.json").is_file():
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            BUILDERS[kind](root, kind)
        finally:
            torch.set_num_threads(threads)
    return Package(kind, path, json.loads((path / "metadata.json").read_text()))


def _write(root: Path, kind: str, spec_of, files: dict[str, bytes], **meta) -> None:
    """Both quantizations of a package: ``spec_of()`` a fresh TransformerSpec with vocabularies."""
    for quantization in QUANTIZATIONS:
        path = root / f"{kind}-{quantization}"
        path.mkdir(parents=True)
        for name, data in files.items():
            (path / name).write_bytes(data)
        _save(spec_of(), path / "model", quantization)
        _metadata(path, **meta)


def _metadata(path: Path, **extra) -> None:
    meta = {"package_version": "1.0", "argos_version": "1.9", "from_code": "en", "from_name": "English"}
    meta |= {"to_code": "de", "to_name": "German", "type": "translate"} | extra
    (path / "metadata.json").write_text(json.dumps(meta))
    (path / "README.md").write_text("A test package.\n")


def _marian(root: Path, kind: str) -> None:
    ckpt = hf_checkpoints.build("opus-mt", root / "hf")
    converter = ctranslate2.converters.TransformersConverter(str(ckpt.path))
    for quantization in QUANTIZATIONS:
        path = root / f"{kind}-{quantization}"
        path.mkdir(parents=True)
        converter.convert(str(path / "model"), quantization=quantization)
        shutil.copy(ckpt.path / "source.spm", path / "sentencepiece.model")
        _metadata(path)


def _onmt(root: Path, kind: str) -> None:
    texts = hf_checkpoints.sentences(21, 600)
    blob = hf_checkpoints._train_spm(texts, "unigram", 60)
    vocab = [*ONMT_SPECIALS, "__de__", *hf_checkpoints._pieces(blob)]
    ids = {t: i for i, t in enumerate(vocab)}
    sp = spm.SentencePieceProcessor(model_proto=blob)
    cfg = TranslationConfig(
        vocab_size=len(vocab), **SMALL, activation="relu", norm_first=True, position_layout="fairseq",
        position_offset=1, max_positions=64, pad_id=1, bos_id=2, eos_id=3, unk_id=0,
    )  # fmt: skip

    def example(text: str) -> tuple[list[int], list[int]]:
        src = [ids.get(p, 0) for p in sp.encode(text, out_type=str)]
        return src, [ids["__de__"], *src[::-1], 3]

    model = _train(cfg, [example(t) for t in texts])
    TRAINED["onmt"] = (model, vocab)

    def spec_of():
        spec = _spec(model, pre_norm=True, activation=common_spec.Activation.RELU, positions=False)
        spec.register_source_vocabulary(vocab)
        spec.register_target_vocabulary(vocab)
        return spec

    _write(root, kind, spec_of, {"sentencepiece.model": blob}, target_prefix="__de__")


def learn_codes(texts: list[str], merges: int) -> list[tuple[str, str]]:
    """subword-nmt's ``learn_bpe`` (version 0.2, most frequent pair first; ties by the pair)."""
    words = Counter(tuple([*w[:-1], w[-1] + "</w>"]) for t in texts for w in t.split())
    codes = []
    for _ in range(merges):
        pairs = Counter()
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += n
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], p))
        codes.append(best)
        merged = Counter()
        for word, n in words.items():
            out, j = [], 0
            while j < len(word):
                if j + 1 < len(word) and (word[j], word[j + 1]) == best:
                    out.append(word[j] + word[j + 1])
                    j += 2
                else:
                    out.append(word[j])
                    j += 1
            merged[tuple(out)] += n
        words = merged
    return codes


def _bpe(root: Path, kind: str) -> None:
    texts = hf_checkpoints.sentences(31, 600)
    codes = learn_codes(texts, 40)
    ranks = {pair: i for i, pair in enumerate(codes)}
    pieces = sorted({p for t in texts for w in t.split() for p in bpe_segment(w, ranks)})
    source_vocab = [*ONMT_SPECIALS, *pieces]
    target_vocab = [*ONMT_SPECIALS, *random.Random(32).sample(pieces, len(pieces))]  # another order
    ids = {t: i for i, t in enumerate(source_vocab)}  # training's one id space: the source's
    cfg = TranslationConfig(
        vocab_size=len(source_vocab), **SMALL, activation="gelu", norm_first=True, share_embeddings=False,
        tie_output=False, final_logits_bias=True, position_layout="learned", max_positions=64, pad_id=1,
        bos_id=2, eos_id=3, unk_id=0,
    )  # fmt: skip

    def example(text: str) -> tuple[list[int], list[int]]:
        words = [[ids[p] for p in bpe_segment(w, ranks)] for w in text.split()]
        return [i for w in words for i in w], [i for w in words[::-1] for i in w] + [3]

    torch.manual_seed(0)
    model = TranslationTransformer(cfg)
    torch.nn.init.normal_(model.positions.table, std=0.1)
    model = _train(cfg, [example(t) for t in texts], model)
    order = torch.tensor([ids[t] for t in target_vocab])  # target id -> training id

    def spec_of():
        activation = common_spec.Activation.GELU
        spec = _spec(model, pre_norm=True, activation=activation, positions=True, target_order=order)
        spec.register_source_vocabulary(source_vocab)
        spec.register_target_vocabulary(target_vocab)
        return spec

    codes_text = "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in codes)
    _write(root, kind, spec_of, {"bpe.model": codes_text.encode()})


def _train(cfg: TranslationConfig, data, model: TranslationTransformer | None = None) -> TranslationTransformer:
    """Teacher forcing for TRAIN_STEPS steps on (source ids, target ids ending with </s>) pairs."""
    torch.manual_seed(0)
    model = model or TranslationTransformer(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = random.Random(0)
    for _ in range(TRAIN_STEPS):
        batch = rng.sample(data, 32)
        L, T = max(len(s) for s, _ in batch), max(len(y) for _, y in batch)
        src = torch.tensor([s + [cfg.pad_id] * (L - len(s)) for s, _ in batch])  # (B, L)
        tgt = torch.tensor([[cfg.bos_id] + y[:-1] + [cfg.pad_id] * (T - len(y)) for _, y in batch])  # (B, T)
        labels = torch.tensor([y + [-100] * (T - len(y)) for _, y in batch])  # (B, T)
        logits = model(src, tgt)  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().numpy().copy()


def _spec(
    model: TranslationTransformer,
    *,
    pre_norm: bool,
    activation: common_spec.Activation,
    positions: bool,
    target_order: torch.Tensor | None = None,
    **options,
) -> transformer_spec.TransformerSpec:
    """Our weights in CTranslate2's TransformerSpec (its converters' layout: fused qkv and kv);
    ``options``: more of ``TransformerSpec.from_config``'s (their weights are the caller's to set)."""
    cfg = model.cfg
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.encoder_layers, cfg.decoder_layers), cfg.num_heads, pre_norm=pre_norm, activation=activation, **options
    )
    sd = model.state_dict()
    enc, dec = spec.encoder, spec.decoder
    enc.embeddings[0].weight = _np(model.src_embed.weight)
    tgt_rows = model.tgt_embed.weight if target_order is None else model.tgt_embed.weight[target_order]
    dec.embeddings.weight = _np(tgt_rows)
    head = model.lm_head.weight if target_order is None else model.lm_head.weight[target_order]
    dec.projection.weight = _np(head)
    if cfg.final_logits_bias:
        bias = model.logits_bias if target_order is None else model.logits_bias[target_order]
        dec.projection.bias = _np(bias)
    if positions:
        enc.position_encodings.encodings = dec.position_encodings.encodings = _np(model.positions.table)

    def linear(layer, ours: str) -> None:
        layer.weight, layer.bias = _np(sd[f"{ours}.weight"]), _np(sd[f"{ours}.bias"])

    def norm(layer, ours: str) -> None:
        layer.gamma, layer.beta = _np(sd[f"{ours}.weight"]), _np(sd[f"{ours}.bias"])

    for side, layers in (("encoder", enc.layer), ("decoder", dec.layer)):
        for i, layer in enumerate(layers):
            o = f"{side}_layers.{i}"
            linear(layer.self_attention.linear[0], f"{o}.self_attn.qkv")
            linear(layer.self_attention.linear[1], f"{o}.self_attn.proj")
            norm(layer.self_attention.layer_norm, f"{o}.res1.norm")
            if side == "decoder":
                linear(layer.attention.linear[0], f"{o}.cross_attn.q")
                linear(layer.attention.linear[1], f"{o}.cross_attn.kv")
                linear(layer.attention.linear[2], f"{o}.cross_attn.proj")
                norm(layer.attention.layer_norm, f"{o}.res2.norm")
            norm(layer.ffn.layer_norm, f"{o}.res{3 if side == 'decoder' else 2}.norm")
            linear(layer.ffn.linear_0, f"{o}.ffn.fc1")
            linear(layer.ffn.linear_1, f"{o}.ffn.fc2")
    norm(enc.layer_norm, "encoder_norm")
    norm(dec.layer_norm, "decoder_norm")
    return spec


def _save(spec, out: Path, quantization: str) -> None:
    spec.validate()
    spec.optimize(quantization=quantization)
    out.mkdir(parents=True)
    spec.save(str(out))


def onmt_variant(root: Path, name: str, edit=None, **options) -> Package:
    """The ``onmt`` package (float32) built with more ``from_config`` ``options`` and ``edit(spec)``
    applied before saving: packages holding what the importer must refuse."""
    base = build("onmt", "float32", root)
    model, vocab = TRAINED["onmt"]
    spec = _spec(model, pre_norm=True, activation=common_spec.Activation.RELU, positions=False, **options)
    if edit is not None:
        edit(spec)
    spec.register_source_vocabulary(vocab)
    spec.register_target_vocabulary(vocab)
    path = root / name
    shutil.copytree(base.path, path, ignore=shutil.ignore_patterns("model"))
    _save(spec, path / "model", "float32")
    return Package("onmt", path, base.meta)


BUILDERS = {"marian": _marian, "onmt": _onmt, "bpe": _bpe}
TRAINED: dict[str, tuple[TranslationTransformer, list[str]]] = {}
