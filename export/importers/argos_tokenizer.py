"""Argos Translate's tokenization as one ``tokenizers.Tokenizer`` over a CTranslate2 vocabulary.

Argos (``argostranslate/tokenizer.py``) turns a sentence into token strings and CTranslate2
looks each up in the model's vocabulary (``<unk>`` when absent), adding the start / end
tokens its ``config.json`` asks for (``add_source_bos`` / ``add_source_eos``):

- ``sentencepiece.model``: ``encode(sentence, out_type=str)``; the output is
  ``decode_pieces(tokens)`` with ``▁`` and ``_`` both turned into spaces, the leading space
  removed. Rebuilt with :func:`.marian_tokenizer.sentencepiece_tokenizer` (a Unigram over the
  vocabulary's ids, sentencepiece's scores and normaliser) with ``_`` decoded as a space.
- ``bpe.model`` (subword-nmt codes, version 0.2): Moses punctuation normalisation and
  tokenisation, then BPE with ``@@`` marking a piece that continues; the output is
  detokenised by Moses. Rebuilt as a BPE model whose word-final pieces carry ``</w>``
  (a vocabulary entry ``ab@@`` is ``ab``, ``ab`` is ``ab</w>``), over a pre-tokeniser that
  splits words and punctuation; the decoder joins pieces and removes the space before
  closing punctuation and after opening brackets. Moses' language-specific rules (escaping
  ``& ' " < > [ ] |`` as entities, apostrophe and non-breaking-prefix rules) are not
  reproduced: see docs/importers.md.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers, processors
from tokenizers.models import BPE

from .ctranslate2_transformer import Vocabulary
from .hf_files import ImportCheckpointError
from .marian_tokenizer import sentencepiece_tokenizer
from .spm_parts import NORMAL, UNIGRAM, read_spm

log = logging.getLogger(__name__)

END_OF_WORD = "</w>"
CONTINUES = "@@"


def tokenizer_file(package: Path) -> Path:
    """The package's tokenizer model: ``sentencepiece.model``, else ``bpe.model`` (Argos's order)."""
    for name in ("sentencepiece.model", "bpe.model"):
        if (package / name).is_file():
            return package / name
    raise ImportCheckpointError(f"{package}: no sentencepiece.model or bpe.model (the package's tokenizer)")


def unknown_tokens(path: Path, source_vocab: list[str]) -> list[str]:
    """Tokens the tokenizer at ``path`` can produce that ``source_vocab`` lacks (CTranslate2: ``<unk>``)."""
    known = set(source_vocab)
    if path.name == "bpe.model":
        symbols = {s for a, b in read_bpe_codes(path) for s in (a, b, a + b)}
        return sorted({_ct2_name(s) for s in symbols} - known)
    return [p.piece for p in read_spm(path, UNIGRAM).pieces if p.type == NORMAL and p.piece not in known]


def argos_tokenizer(path: Path, vocab: Vocabulary, extra_tokens: list[str]) -> Tokenizer:
    """The tokenizer of model file ``path`` (:func:`tokenizer_file`) over the vocabulary's ids."""
    names = {k: v for k, v in vocab.tokens.items() if v in vocab.ids}
    if path.name == "bpe.model":
        tok = bpe_tokenizer(path, vocab, names, extra_tokens)
    else:
        proto = read_spm(path, UNIGRAM)
        entries = vocab.source_tokens | vocab.unknown
        tok = sentencepiece_tokenizer(
            proto, proto, vocab.ids, entries, names, extra_tokens, path, underscore_as_space=True
        )
    tok.post_processor = source_template(vocab)
    return tok


def _ct2_name(symbol: str) -> str:
    """A BPE symbol as the vocabulary spells it: ``ab</w>`` ends a word (``ab``), ``ab`` continues (``ab@@``)."""
    return symbol[: -len(END_OF_WORD)] if symbol.endswith(END_OF_WORD) else symbol + CONTINUES


def source_template(vocab: Vocabulary) -> processors.TemplateProcessing:
    """What CTranslate2 adds around the source: ``[bos] $A [eos]`` as its config.json says."""
    before = [vocab.source_bos] if vocab.source_bos else []
    after = [vocab.source_eos] if vocab.source_eos else []
    return processors.TemplateProcessing(
        single=" ".join([*before, "$A", *after]),
        pair=" ".join([*before, "$A", "$B", *after]),
        special_tokens=[(t, vocab.ids[t]) for t in dict.fromkeys(before + after)],
    )


def read_bpe_codes(path: Path) -> list[tuple[str, str]]:
    """subword-nmt codes: ``#version: 0.2`` then one ``left right`` merge per line, most frequent first."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportCheckpointError(f"{path}: cannot be read as UTF-8 text ({exc})") from None
    if not lines or not lines[0].startswith("#version:"):
        raise ImportCheckpointError(f"{path}: not subword-nmt BPE codes (the first line is not '#version: 0.2')")
    if lines[0].split(":", 1)[1].strip() != "0.2":
        raise ImportCheckpointError(f"{path}: BPE codes {lines[0]!r}, only version 0.2 is supported")
    merges = []
    for number, line in enumerate(lines[1:], start=2):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise ImportCheckpointError(f"{path}: line {number} is not a 'left right' merge: {line!r}")
        merges.append((parts[0], parts[1]))
    return merges


def bpe_tokenizer(path: Path, vocab: Vocabulary, names: dict[str, str], extra_tokens: list[str]) -> Tokenizer:
    specials = set(names.values()) | set(extra_tokens)
    internal: dict[str, int] = {}
    for token, i in vocab.ids.items():
        if token in specials:
            internal[token] = i
        elif token.endswith(CONTINUES) and len(token) > len(CONTINUES):
            internal.setdefault(token[: -len(CONTINUES)], i)
        else:
            internal.setdefault(token + END_OF_WORD, i)
    codes = read_bpe_codes(path)
    merges = [(a, b) for a, b in codes if a in internal and b in internal and a + b in internal]
    dropped = len(codes) - len(merges)
    if dropped:
        log.info("%s: %d merges make pieces the vocabulary lacks (left out)", path, dropped)
    tok = Tokenizer(BPE(vocab=internal, merges=merges, unk_token=names["unk"], end_of_word_suffix=END_OF_WORD))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(r"[^\w\s]"), behavior="isolated")]
    )
    tok.decoder = decoders.Sequence(
        [
            decoders.BPEDecoder(suffix=END_OF_WORD),
            decoders.Fuse(),
            decoders.Replace(Regex(r" +(?=[.,!?;:%)\]}])"), ""),  # Moses: no space before closing punctuation
            decoders.Replace(Regex(r"(?<=[(\[{]) +"), ""),  # nor after an opening bracket
            decoders.Replace(Regex(r"^\s+|\s+$"), ""),
        ]
    )
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in extra_tokens])
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in dict.fromkeys(names.values())])
    return tok
