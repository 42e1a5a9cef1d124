"""M2M100 / NLLB tokenizers as one ``tokenizers.Tokenizer`` with ``$A </s>`` ids and the language table.

- NLLB (and any M2M100 directory that ships one): the directory's ``tokenizer.json`` is
  used as it is, except its post-processor: Hugging Face writes ``<src_lang> $A </s>`` with
  the language it was saved with; ours is ``$A </s>`` and the serving side prepends the
  requested source language's token (``languages.tokens`` of ``model.json``).
- M2M100 (``sentencepiece.bpe.model`` + ``vocab.json``): transformers' ``M2M100Tokenizer``
  segments with sentencepiece and looks each piece up in ``vocab.json`` (fairseq's
  dictionary order, not sentencepiece's). Rebuilt here as a BPE over ``vocab.json``'s ids
  whose merges come from the sentencepiece model (a piece's score is its merge rank), the
  model's precompiled normaliser and a Metaspace pre-tokeniser / decoder. The language
  tokens ``__en__`` ... follow the vocabulary, in ``FAIRSEQ_LANGUAGE_CODES`` order, as
  ``M2M100Tokenizer`` numbers them.

Known difference (docs/importers.md): a sentencepiece piece that ``vocab.json`` lacks is
``<unk>`` for M2M100Tokenizer; here its merge is left out, so the text is split into
smaller pieces that are in the vocabulary.
"""

from __future__ import annotations

import re
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

from .hf_files import ImportCheckpointError, read_json, require_module, special_tokens
from .spm_parts import BPE as BPE_TYPE
from .spm_parts import NORMAL, end_of_sentence_post_processor, normalizer_steps, read_spm, read_vocab

MISSING_SPM = "file not found (M2M100 needs tokenizer.json, or this and vocab.json)"
NLLB_CODE = re.compile(r"^[a-z]{3}_[A-Z][a-z]{3}$")  # eng_Latn, zho_Hans, ...


def nllb_languages(tok: Tokenizer, vocab_size: int) -> dict[str, str]:
    """code -> token for the language tokens of an NLLB ``tokenizer.json`` (``eng_Latn`` is both)."""
    added = tok.get_added_tokens_decoder()
    return {t.content: t.content for i, t in sorted(added.items()) if NLLB_CODE.match(t.content) and i < vocab_size}


def m2m100_tokenizer(directory: Path, special: dict[str, str]) -> tuple[Tokenizer, dict[str, str]]:
    """The tokenizer of an M2M100 directory without ``tokenizer.json`` and its ``{code: token}`` table."""
    tok_cfg = read_json(directory / "tokenizer_config.json", required=False) or {}
    vocab = read_vocab(directory / "vocab.json")
    missing = sorted(t for t in special.values() if t not in vocab)
    if missing:
        raise ImportCheckpointError(f"{directory / 'vocab.json'}: special tokens {missing} missing")
    spm_name = tok_cfg.get("spm_file") if isinstance(tok_cfg.get("spm_file"), str) else "sentencepiece.bpe.model"
    proto = read_spm(directory / Path(spm_name).name, BPE_TYPE, MISSING_SPM)
    codes_name = tok_cfg.get("language_codes", "m2m100")
    m2m = require_module("transformers.models.m2m_100.tokenization_m2m_100", "reading M2M100 tokenizers")
    if codes_name not in m2m.FAIRSEQ_LANGUAGE_CODES:
        raise ImportCheckpointError(
            f"{directory / 'tokenizer_config.json'}: language_codes {codes_name!r} is not one of "
            f"{sorted(m2m.FAIRSEQ_LANGUAGE_CODES)}"
        )
    languages = {code: f"__{code}__" for code in m2m.FAIRSEQ_LANGUAGE_CODES[codes_name]}

    pieces = [p.piece for p in proto.pieces if p.type == NORMAL]
    rank = {p: i for i, p in enumerate(pieces)}  # sentencepiece BPE: a lower id merges earlier
    merges = []
    for piece in pieces:
        splits = [(piece[:i], piece[i:]) for i in range(1, len(piece))]
        splits = [(a, b) for a, b in splits if a in rank and b in rank and a in vocab and b in vocab]
        if piece in vocab:
            merges += sorted(splits, key=lambda ab: (rank[ab[0]], rank[ab[1]]))
    tok = Tokenizer(BPE(vocab=dict(vocab), merges=merges, unk_token=special["unk"], fuse_unk=True))
    spec = proto.normalizer_spec
    tok.normalizer = normalizers.Sequence(normalizer_steps(spec))
    prepend = "always" if spec.add_dummy_prefix else "never"
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=prepend)
    tok.decoder = decoders.Sequence(  # sentencepiece's decode, then M2M100Tokenizer's str.strip()
        [decoders.Replace("▁", " "), decoders.Fuse(), decoders.Replace(Regex(r"^\s+|\s+$"), "")]
    )
    # the start token too (M2M100Tokenizer's bos_token, id 0): a special token, skipped when
    # decoding and kept whole when typed, though no text ever starts with it
    bos = special_tokens(tok_cfg, {"bos": "<s>"})["bos"]
    starts = [bos] if bos in vocab and bos not in special.values() else []
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in [*special.values(), *starts]])
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in languages.values()])
    # add_special_tokens numbers new tokens after the vocabulary, in order: the languages come out
    # at len(vocab) + i, as M2M100Tokenizer numbers them.
    first = tok.token_to_id(next(iter(languages.values())))
    if first != len(vocab):
        raise ImportCheckpointError(f"{directory / 'vocab.json'}: language tokens would start at {first}")
    end_of_sentence_post_processor(tok, special["eos"])
    return tok, languages
