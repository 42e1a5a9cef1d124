"""Marian's preprocessing (``source.spm`` + ``vocab.json`` + ``</s>``) as one ``tokenizers.Tokenizer``.

The server has only Hugging Face ``tokenizers``, so transformers' ``MarianTokenizer``
(sentencepiece pieces looked up in ``vocab.json``) is rebuilt from its parts:

- model: a Unigram over the ids of ``vocab.json``. A piece of ``source.spm`` keeps its
  sentencepiece score, so Viterbi segmentation is sentencepiece's. Target-only and
  control entries are stored behind :data:`UNREACHABLE`, a Unicode noncharacter, so
  the lattice never chooses them (``source.spm`` never produces them); their ids
  still decode.
- unknown characters: sentencepiece emits a maximal run of characters it has no piece
  for as one piece, and Marian looks that run up in ``vocab.json`` (``<unk>`` if it is
  not there). A normaliser regex replaces every such run that is not a vocabulary
  entry by :data:`UNKNOWN_RUN` (one ``<unk>``); runs that are entries are matched whole.
- normaliser: the model's precompiled charsmap (nmt_nfkc) and sentencepiece's
  whitespace rules first; pre-tokeniser: Metaspace (``▁`` dummy prefix, split on spaces).
- post-processor: ``$A </s>``; ``</s>``, ``<unk>``, ``<pad>`` are special tokens, and
  ``>>xx<<`` language codes of ``vocab.json`` are added tokens.
- decoder: Marian decodes target ids with ``target.spm``'s ``decode_pieces``, replaces
  ``▁`` with spaces and strips the ends; for pieces that is the concatenation of their
  text with ``▁`` as space (pieces unknown to ``target.spm`` come back verbatim, its
  control pieces as nothing), stripped.

Known differences from MarianTokenizer (see docs/importers.md): Marian takes a
``>>xx<<`` prefix as a language code only at the start of the text (or right after a
special token), and one that is not in ``vocab.json`` becomes ``<unk>``; here a
vocabulary's codes are recognised anywhere and other ``>>xx<<`` text is segmented
like any text. Pieces of ``source.spm`` missing from ``vocab.json`` (Marian: ``<unk>``)
cannot be represented and are left out of the lattice (a warning counts them).
"""

from __future__ import annotations

import logging
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import Unigram

from .hf_files import SPECIALS, ImportCheckpointError, read_json, special_tokens
from .spm_parts import (
    CONTROL,
    NORMAL,
    UNIGRAM,
    USER_DEFINED,
    end_of_sentence_post_processor,
    normalizer_steps,
    read_spm,
    read_vocab,
)

log = logging.getLogger(__name__)

UNREACHABLE = "\ufdd0"  # prefix of vocabulary entries the source segmentation never produces
UNKNOWN_RUN = "\ufdd1"  # stands for a run of unknown characters that is not in vocab.json: one <unk>


def marian_tokenizer(directory: Path) -> tuple[Tokenizer, dict[str, int], list[int] | None]:
    """The tokenizer of a Marian directory, its special ids ``{"unk", "eos", "pad"}``, and for
    separate vocabularies the source id of every tokenizer id (-1: not a source entry).

    Separate vocabularies (``separate_vocabs``: ``vocab.json`` for the source,
    ``target_vocab.json`` for the target) become one id space: the target's ids as they are
    (the decoder's output ids need no mapping), then the source entries the target lacks.
    The importer re-indexes the source embedding to it with the returned list.
    """
    tok_cfg = read_json(directory / "tokenizer_config.json", required=False) or {}
    names = special_tokens(tok_cfg, SPECIALS)
    vocab = read_vocab(directory / "vocab.json")
    source_index = None
    if tok_cfg.get("separate_vocabs"):
        source_vocab, target_vocab = vocab, read_vocab(directory / "target_vocab.json")
        for name, token in names.items():
            if source_vocab.get(token) != target_vocab.get(token):
                raise ImportCheckpointError(
                    f"{directory / 'target_vocab.json'}: the {name} token {token!r} has id {target_vocab.get(token)}, "
                    f"vocab.json {source_vocab.get(token)}; they must be the same"
                )
        vocab = dict(target_vocab)
        for piece in source_vocab:
            vocab.setdefault(piece, len(vocab))
        source_index = [source_vocab.get(piece, -1) for piece, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    missing = {k: v for k, v in names.items() if v not in vocab}
    if missing:
        raise ImportCheckpointError(f"{directory / 'vocab.json'}: special tokens {sorted(missing.values())} missing")
    source = read_spm(directory / "source.spm", UNIGRAM)
    target = read_spm(directory / "target.spm", UNIGRAM)

    source_entries = vocab if source_index is None else source_vocab  # what Marian looks source pieces up in
    language_codes = [p for p in vocab if p.startswith(">>") and p.endswith("<<")]
    tok = sentencepiece_tokenizer(source, target, vocab, source_entries, names, language_codes, directory)
    end_of_sentence_post_processor(tok, names["eos"])
    return tok, {k: vocab[v] for k, v in names.items()}, source_index


def sentencepiece_tokenizer(
    source,
    target,
    vocab: dict[str, int],
    source_entries,
    names: dict[str, str],
    extra_tokens: list[str],
    where: Path,
    *,
    underscore_as_space: bool = False,
) -> Tokenizer:
    """A Unigram ``Tokenizer`` segmenting like the sentencepiece model ``source`` and looking the
    pieces up in ``vocab`` (ids; ``source_entries``: the tokens the source side knows), decoding
    like ``target``'s ``decode_pieces`` then ``strip``. ``names``: role -> special token (all
    special; ``unk`` required), ``extra_tokens``: tokens matched whole in the text (language codes).
    ``underscore_as_space``: "_" decodes to a space too (Argos Translate's decoding). No
    post-processor: the caller adds its own."""
    entries, known, unknown_runs, reachable, user_defined, extra_tokens = _lattice(
        source, vocab, source_entries, names, extra_tokens
    )
    lost = [p.piece for p in source.pieces if p.type == NORMAL and p.piece not in source_entries]
    if lost:
        log.warning(
            "%s: %d pieces of the sentencepiece model are not in the vocabulary (e.g. %s); they map to %s "
            "there, this tokenizer segments around them",
            where,
            len(lost),
            lost[:3],
            names["unk"],
        )

    tok = Tokenizer(Unigram(entries, unk_id=vocab[names["unk"]], byte_fallback=False))
    spec = source.normalizer_spec
    steps = normalizer_steps(spec)
    steps.append(normalizers.Replace(Regex(_unknown_run_pattern(known, unknown_runs)), UNKNOWN_RUN))
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="▁",
        prepend_scheme="always" if spec.add_dummy_prefix else "never",
        split=source.trainer_spec.split_by_whitespace,
    )
    tok.decoder = _decoder(target, vocab, reachable, underscore_as_space)
    tok.add_tokens([AddedToken(p, normalized=False, special=False) for p in user_defined + extra_tokens])
    specials = [t for t in dict.fromkeys(names.values()) if t in vocab]
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials])
    return tok


def _lattice(source, vocab: dict[str, int], source_entries, names: dict[str, str], extra_tokens: list[str]):
    """The Unigram's ``(piece, score)`` per id of ``vocab``, and what the normaliser and the added
    tokens need: the characters ``source`` can segment, the entries matched as whole unknown runs,
    the entries matched as added tokens, the user-defined pieces and the remaining extra tokens."""
    scores = {p.piece: p.score for p in source.pieces if p.type == NORMAL and p.piece in source_entries}
    known = {p for p in scores if len(p) == 1} | {"▁"}  # characters source.spm can segment
    user_defined = [p.piece for p in source.pieces if p.type == USER_DEFINED and p.piece in vocab]
    extra_tokens = [t for t in extra_tokens if t not in user_defined]
    reachable = set(names.values()) | set(user_defined) | set(extra_tokens)  # matched as added tokens
    # Entries made only of characters source.spm does not know: Marian looks a whole unknown run up in
    # vocab.json, so these must match whole runs (score -1: one piece beats any split of the run).
    unknown_runs = sorted(p for p in vocab if p not in reachable and not set(p) & known)
    entries: list[tuple[str, float]] = [("", 0.0)] * len(vocab)
    for piece, i in vocab.items():
        if piece in scores:
            entries[i] = (piece, scores[piece])
        elif piece in reachable:
            entries[i] = (piece, 0.0)
        elif piece in unknown_runs:
            entries[i] = (piece, -1.0)
        else:
            entries[i] = (UNREACHABLE + piece, 0.0)
    return entries, known, unknown_runs, reachable, user_defined, extra_tokens


def _decoder(target, vocab: dict[str, int], reachable: set[str], underscore_as_space: bool) -> decoders.Decoder:
    """``target``'s ``decode_pieces`` then ``strip``: its control pieces decode to nothing, the
    unreachable mark is dropped, ``▁`` (and with ``underscore_as_space`` ``_``) is a space."""
    invisible = [p.piece for p in target.pieces if p.type == CONTROL and p.piece in vocab and p.piece not in reachable]
    steps = [decoders.Replace(Regex("^(?:" + "|".join(UNREACHABLE + _escape(p) for p in invisible) + ")$"), "")]
    return decoders.Sequence(
        (steps if invisible else [])
        + [decoders.Replace(UNREACHABLE, ""), decoders.Replace("▁", " ")]
        + ([decoders.Replace("_", " ")] if underscore_as_space else [])
        + [decoders.Fuse(), decoders.Replace(Regex(r"^\s+|\s+$"), "")]  # the final str.strip()
    )


def _escape(text: str) -> str:
    """Every character of ``text`` as an Oniguruma code point escape (safe in and out of classes)."""
    return "".join(f"\\x{{{ord(c):X}}}" for c in text)


def _unknown_run_pattern(known: set[str], keep: list[str]) -> str:
    """A maximal run of characters outside ``known`` that is not exactly one of ``keep``.

    sentencepiece emits such a run as one piece, which Marian then looks up in vocab.json:
    runs in ``keep`` are vocabulary entries (the lattice matches them whole), every other
    run becomes :data:`UNKNOWN_RUN`, which no entry contains, so the Unigram makes it one
    ``<unk>``. Noncharacters in the input are unknown, so they never reach an entry either.
    """
    cls = "[^" + _escape("".join(sorted(c.replace("▁", " ") for c in known))) + "]"
    exact = f"(?!(?:{'|'.join(_escape(p) for p in keep)})(?!{cls}))" if keep else ""
    return f"(?<!{cls}){exact}{cls}+"
