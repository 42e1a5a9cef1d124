"""Tiny Hugging Face translation checkpoints in the hub's real file layouts, trained in the test.

Each directory holds exactly the files its family ships on the hub, with the same
special-id layout, and a model trained for a few hundred steps on a task whose output
depends on every source token and its position (a random model's greedy output is one
token repeated, which would hide wrong positions or attention):

- ``opus-mt``: MarianMTModel, ``source.spm`` / ``target.spm`` / one shared ``vocab.json``
  with ``</s>`` 0, ``<unk>`` 1 and ``<pad>`` LAST (the start token); task: reverse the pieces.
- ``opus-mt-multi``: the same with ``>>fra<<`` / ``>>deu<<`` target tokens at the start of
  the source; task: reverse for ``>>fra<<``, copy for ``>>deu<<``.
- ``opus-mt-separate``: newer tc-big layout, ``share_encoder_decoder_embeddings: false`` with
  ``vocab.json`` (source) and ``target_vocab.json`` (target) holding the same pieces in
  different orders, so a piece's source id is not its target id; task: reverse.
- ``m2m100``: M2M100ForConditionalGeneration, ``sentencepiece.bpe.model`` (BPE) + ``vocab.json``
  in fairseq's order (``<s> <pad> </s> <unk>``, then pieces in an order of their own), the
  100 ``__xx__`` language tokens after the vocabulary; source ``__en__ ... </s>``, output
  ``</s>`` then the target language token forced first; task: reverse for ``fr``, copy for ``de``.
- ``nllb``: the same model class with NLLB's ``tokenizer.json`` (``eng_Latn`` codes as added
  special tokens after the pieces, ``<mask>`` last); same tasks for ``fra_Latn`` / ``deu_Latn``.

Built once per test session under pytest's temporary directory (:func:`build`), a few
seconds each on one CPU thread.
"""

from __future__ import annotations

import io
import json
import random
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm
import torch
import transformers
from sentencepiece import sentencepiece_model_pb2
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

transformers.logging.set_verbosity_error()

KINDS = ("opus-mt", "opus-mt-multi", "opus-mt-separate", "m2m100", "nllb")
SYLLABLES = ["ka", "to", "ri", "men", "sa", "lo", "pe", "dun", "vi", "ar", "el", "os", "qu", "bé", "zo"]
TRAIN_STEPS = (
    400  # 250 left M2M100 degenerate on one CPU (15 of 24 outputs distinct, one thread, an Intel Xeon); 400: 24
)
SMALL = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4)
SMALL |= dict(encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64, dropout=0.0)
# Two target languages per multilingual model, two tasks: the language token must steer the output.
TASKS = {"reverse": lambda ids: ids[::-1], "copy": lambda ids: list(ids)}


def sentences(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 2))) for _ in range(rng.randint(1, 4))]
        out.append(" ".join(words))
    return out


def test_texts() -> list[str]:
    """24 held-out texts (the comparisons run on these)."""
    return sentences(12345, 24)


@dataclass
class Checkpoint:
    kind: str
    path: Path
    model: transformers.PreTrainedModel  # eval mode
    tokenizer: object  # the family's transformers tokenizer
    targets: dict[str, str]  # target language code -> task name ({"": "reverse"} for one fixed pair)
    source_language: str = ""

    def generate(self, texts: list[str], target: str = "", num_beams: int = 1, max_new_tokens: int = 24):
        """transformers' generate under our decoding rules -> generated ids per text (no start token,
        ``</s>`` last when generated). Beam search is transformers' default (``early_stopping=False``:
        attnserve's rule too, docs/importers.md)."""
        cfg = self.model.config
        batch = self.encode(texts, target)
        kwargs = dict(num_beams=num_beams, do_sample=False, max_new_tokens=max_new_tokens, early_stopping=False)
        kwargs |= dict(bad_words_ids=[[cfg.pad_token_id]], forced_eos_token_id=None, length_penalty=1.0)
        if self.kind in ("m2m100", "nllb"):
            kwargs["forced_bos_token_id"] = self.tokenizer.convert_tokens_to_ids(self.language_token(target))
        with torch.no_grad():
            out = self.model.generate(**batch, **kwargs)
        rows = []
        for row in out.tolist():
            row = row[1:]
            row = row[: row.index(cfg.eos_token_id) + 1] if cfg.eos_token_id in row else row
            rows.append(row)
        return rows

    def language_token(self, target: str) -> str:
        return {"m2m100": f"__{target}__", "nllb": target}.get(self.kind, f">>{target}<<")

    def encode(self, texts: list[str], target: str = ""):
        if self.kind == "opus-mt-multi":
            texts = [f">>{target}<< {t}" for t in texts]
        return self.tokenizer(texts, return_tensors="pt", padding=True)

    def source_token(self, i: int) -> str:
        """The source token of id ``i`` (separate vocabularies: vocab.json's, not the target's)."""
        if self.kind == "opus-mt-separate":
            return {v: k for k, v in self.tokenizer.encoder.items()}[i]
        return self.tokenizer.convert_ids_to_tokens(i)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def _train_spm(texts: list[str], model_type: str, vocab_size: int) -> bytes:
    blob = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=blob,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
    )
    return blob.getvalue()


def _pieces(blob: bytes) -> list[str]:
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(blob)
    return [p.piece for p in proto.pieces if p.type == p.NORMAL]


def _train(ckpt: Checkpoint, texts: list[str], examples) -> None:
    """Teacher forcing on ``examples(text, target) -> (source ids, label ids)`` for every target language."""
    model, cfg = ckpt.model, ckpt.model.config
    torch.manual_seed(0)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = [examples(t, target) for t in texts for target in ckpt.targets]
    rng = random.Random(0)
    for _ in range(TRAIN_STEPS):
        batch = rng.sample(data, 32)
        L, T = max(len(s) for s, _ in batch), max(len(y) for _, y in batch)
        src = torch.tensor([s + [cfg.pad_token_id] * (L - len(s)) for s, _ in batch])  # (B, L)
        labels = torch.tensor([y + [-100] * (T - len(y)) for _, y in batch])  # (B, T)
        loss = model(input_ids=src, attention_mask=(src != cfg.pad_token_id).long(), labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def _pieces_of(tokenizer, text: str) -> list[int]:
    """The text's ids without any special or language token."""
    return tokenizer(text, add_special_tokens=False).input_ids


def _opus_mt(path: Path, multi: bool) -> Checkpoint:
    texts = sentences(1, 600)
    source = _train_spm(texts, "unigram", 60)
    target = _train_spm(texts[::-1], "unigram", 60)
    vocab = {"</s>": 0, "<unk>": 1}
    targets = {"fra": "reverse", "deu": "copy"} if multi else {"": "reverse"}
    if multi:  # opus-mt multilingual models list their target tokens in vocab.json
        vocab |= {f">>{code}<<": len(vocab) + i for i, code in enumerate(targets)}
    for piece in _pieces(source) + _pieces(target):
        vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)  # pad last, and the decoder start token
    path.mkdir(parents=True)
    (path / "source.spm").write_bytes(source)
    (path / "target.spm").write_bytes(target)
    (path / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    V = len(vocab)
    config = transformers.MarianConfig(
        vocab_size=V, decoder_vocab_size=V, activation_function="swish", scale_embedding=True,
        pad_token_id=V - 1, decoder_start_token_id=V - 1, eos_token_id=0, forced_eos_token_id=None, **SMALL,
    )  # fmt: skip
    torch.manual_seed(0)
    files = (str(path / f) for f in ("source.spm", "target.spm", "vocab.json"))
    # opus-mt's tokenizer_config.json names the pair (multilingual: a group code, the >>xx<< tokens choose)
    tokenizer = transformers.MarianTokenizer(*files, source_lang="en", target_lang="mul" if multi else "de")
    kind = "opus-mt-multi" if multi else "opus-mt"
    ckpt = Checkpoint(kind, path, transformers.MarianMTModel(config), tokenizer, targets)

    def example(text: str, target: str) -> tuple[list[int], list[int]]:
        ids = _pieces_of(tokenizer, text)
        code = [vocab[f">>{target}<<"]] if multi else []
        return code + ids + [0], TASKS[targets[target]](ids) + [0]

    _train(ckpt, texts, example)
    ckpt.model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=V - 1, eos_token_id=0, pad_token_id=V - 1, bad_words_ids=[[V - 1]], max_length=40
    )
    ckpt.model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return ckpt


def _opus_mt_separate(path: Path) -> Checkpoint:
    texts = sentences(5, 600)
    blob = _train_spm(texts, "unigram", 60)
    pieces = _pieces(blob)
    shuffled = pieces[:]
    random.Random(6).shuffle(shuffled)
    source_vocab = {"</s>": 0, "<unk>": 1} | {p: 2 + i for i, p in enumerate(pieces)}
    target_vocab = {"</s>": 0, "<unk>": 1} | {p: 2 + i for i, p in enumerate(shuffled)}
    source_vocab["<pad>"] = target_vocab["<pad>"] = len(source_vocab)  # pad last in both
    path.mkdir(parents=True)
    for name, blob_ in (("source.spm", blob), ("target.spm", blob)):
        (path / name).write_bytes(blob_)
    (path / "vocab.json").write_text(json.dumps(source_vocab, ensure_ascii=False))
    (path / "target_vocab.json").write_text(json.dumps(target_vocab, ensure_ascii=False))
    V, pad = len(source_vocab), len(source_vocab) - 1
    config = transformers.MarianConfig(
        vocab_size=V, decoder_vocab_size=len(target_vocab), share_encoder_decoder_embeddings=False,
        tie_word_embeddings=True, activation_function="swish", scale_embedding=True, pad_token_id=pad,
        decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=None, **SMALL,
    )  # fmt: skip
    files = (str(path / f) for f in ("source.spm", "target.spm", "vocab.json"))
    tokenizer = transformers.MarianTokenizer(
        *files, target_vocab_file=str(path / "target_vocab.json"), separate_vocabs=True, source_lang="en",
        target_lang="de",
    )  # fmt: skip
    torch.manual_seed(0)
    ckpt = Checkpoint("opus-mt-separate", path, transformers.MarianMTModel(config), tokenizer, {"": "reverse"})

    def example(text: str, target: str) -> tuple[list[int], list[int]]:
        pieces = tokenizer.spm_source.encode(text, out_type=str)
        ids = [source_vocab.get(p, 1) for p in pieces]
        return ids + [0], [target_vocab.get(p, 1) for p in reversed(pieces)] + [0]

    _train(ckpt, texts, example)
    ckpt.model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=pad, eos_token_id=0, pad_token_id=pad, bad_words_ids=[[pad]], max_length=40
    )
    ckpt.model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return ckpt


def _m2m100(path: Path) -> Checkpoint:
    texts = sentences(2, 600)
    blob = _train_spm(texts, "bpe", 80)
    pieces = _pieces(blob)
    random.Random(3).shuffle(pieces)  # fairseq's dictionary order is not sentencepiece's
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3} | {p: 4 + i for i, p in enumerate(pieces)}
    path.mkdir(parents=True)
    (path / "sentencepiece.bpe.model").write_bytes(blob)
    (path / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    tokenizer = transformers.M2M100Tokenizer(
        str(path / "vocab.json"), str(path / "sentencepiece.bpe.model"), src_lang="en", tgt_lang="fr"
    )
    V = len(vocab) + 100 + 8  # the vocabulary, 100 language tokens, 8 "madeupword"s (as m2m100_418M)
    config = transformers.M2M100Config(
        vocab_size=V, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, scale_embedding=True,
        activation_function="relu", **SMALL,
    )  # fmt: skip
    torch.manual_seed(0)
    targets = {"fr": "reverse", "de": "copy"}
    ckpt = Checkpoint("m2m100", path, transformers.M2M100ForConditionalGeneration(config), tokenizer, targets, "en")

    def example(text: str, target: str) -> tuple[list[int], list[int]]:
        ids = _pieces_of(tokenizer, text)
        lang = tokenizer.get_lang_id
        return [lang("en")] + ids + [2], [lang(target)] + TASKS[targets[target]](ids) + [2]

    _train(ckpt, texts, example)
    ckpt.model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / "tokenizer.json").unlink(missing_ok=True)  # the hub's M2M100 ships sentencepiece + vocab.json only
    return ckpt


NLLB_CODES = ["eng_Latn", "fra_Latn", "deu_Latn"]


def _nllb(path: Path) -> Checkpoint:
    texts = sentences(4, 600)
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=90, special_tokens=["<s>", "<pad>", "</s>", "<unk>"]))
    tok.add_special_tokens([AddedToken(c, normalized=False, special=True) for c in NLLB_CODES + ["<mask>"]])
    tok.post_processor = processors.TemplateProcessing(
        single="eng_Latn $A </s>", special_tokens=[("eng_Latn", tok.token_to_id("eng_Latn")), ("</s>", 2)]
    )
    path.mkdir(parents=True)
    tok.save(str(path / "tokenizer.json"))
    special = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "NllbTokenizer",
                "src_lang": "eng_Latn",
                "tgt_lang": "fra_Latn",
                "additional_special_tokens": NLLB_CODES,
                "legacy_behaviour": False,
                "model_max_length": 64,
            }
            | special
        )  # fmt: skip
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(path, src_lang="eng_Latn")
    V = tok.get_vocab_size(with_added_tokens=True)
    config = transformers.M2M100Config(
        vocab_size=V, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, scale_embedding=True,
        activation_function="relu", **SMALL,
    )  # fmt: skip
    torch.manual_seed(0)
    targets = {"fra_Latn": "reverse", "deu_Latn": "copy"}
    model = transformers.M2M100ForConditionalGeneration(config)
    ckpt = Checkpoint("nllb", path, model, tokenizer, targets, "eng_Latn")

    def example(text: str, target: str) -> tuple[list[int], list[int]]:
        ids = _pieces_of(tokenizer, text)
        code = tokenizer.convert_tokens_to_ids
        return [code("eng_Latn")] + ids + [2], [code(target)] + TASKS[targets[target]](ids) + [2]

    _train(ckpt, texts, example)
    ckpt.model.save_pretrained(path)
    return ckpt


BUILDERS = {
    "opus-mt": lambda p: _opus_mt(p, multi=False),
    "opus-mt-multi": lambda p: _opus_mt(p, multi=True),
    "opus-mt-separate": _opus_mt_separate,
    "m2m100": _m2m100,
    "nllb": _nllb,
}
_BUILT: dict[str, Checkpoint] = {}
_EXPORTED: dict[tuple[str, str], Path] = {}


def build(kind: str, root: Path) -> Checkpoint:
    """The ``kind`` checkpoint, built (and trained) once per session under ``root``."""
    if kind not in _BUILT:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            _BUILT[kind] = BUILDERS[kind](root / kind)
        finally:
            torch.set_num_threads(threads)
    return _BUILT[kind]


def export(kind: str, root: Path, name: str | None = None) -> tuple[Checkpoint, Path]:
    """The ``kind`` checkpoint exported (once per session) by the real CLI, verification on, to
    ``root/exported/<name>``; the old ``--from-marian`` flag for opus-mt, ``--from-hf`` otherwise."""
    from attnserve.export import cli

    ckpt = build(kind, root)
    name = name or kind
    if (kind, name) not in _EXPORTED:
        out = root / "exported" / name
        flag = "--from-marian" if kind == "opus-mt" else "--from-hf"
        code = cli.main(["translation", flag, str(ckpt.path), "--out", str(out), "--name", name, "--threads", "1"])
        assert code == 0, f"attnserve-export translation {flag} {ckpt.path} failed"
        _EXPORTED[kind, name] = out
    return ckpt, _EXPORTED[kind, name]
