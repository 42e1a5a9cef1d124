"""Glossaries: terms a translation must spell a given way, found in each sentence and handed to
the engine as constraints (``server/translation/constraints.py``).

A glossary maps a source term to its target term; a target of ``""`` (or the source itself)
keeps the term as it is (do not translate). A request's entries (every door:
``TranslateRequest.glossary`` / ``keep``, the ``glossary`` parameter, LibreTranslate's
``glossary`` field) extend the server's default glossary and override its entries for the
same source term. The default glossary is read once at start from ``--glossary-dir``: a file
``<model name>.tsv`` for a model, ``<source>-<target>.tsv`` for a language pair (the model's
codes); both apply, the pair's over the model's. A TSV line is ``source<TAB>target``; a line
with only ``source`` keeps it; blank lines and lines starting with ``#`` are skipped.

Matching (:meth:`CompiledGlossary.constraints`) is on the sentence as sent (after the
Unicode form and whitespace normalisation every sentence gets, which is applied to the terms
too): whole words, case-sensitive, the longest term first where terms overlap, every
occurrence counted. A term found ``n`` times is owed ``n`` times.

A target term is tokenised with the target side of the model's tokenizer
(``contract/target_text.py``: no lower-casing), twice: after a space (its form inside a
sentence) and alone (its form at the very start, which a byte-level BPE spells without the
space marker). A target whose tokens do not decode back to it verbatim (characters the
vocabulary lacks) is INVALID_ARGUMENT naming the term, and so is a sentence whose terms do
not fit in ``max_new_tokens``.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer

from attnserve.contract.target_text import target_side

from ..shared.config import ConfigError
from ..shared.errors import InvalidRequest, echo
from ..translation import Constraint, DecodeOptions, TermTokens
from ..translation.term_swap import separable
from ..translation.terms import constraints_cost

log = logging.getLogger(__name__)

Entries = tuple[tuple[str, str], ...]  # (source term, target term); target "" keeps the term


class GlossaryFileError(ConfigError):
    """A default glossary file that does not parse (the server refuses to start); the message
    names the file and the line."""


def parse_tsv(text: str, where: str = "glossary") -> list[tuple[str, str]]:
    """``source<TAB>target`` lines (a lone ``source`` keeps the term) -> entries. Raises
    ValueError naming ``where`` and the line."""
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) > 2 or not fields[0].strip():
            raise ValueError(f"{where}, line {number}: expected 'source<TAB>target' or 'source', got {echo(line)}")
        entries.append((fields[0].strip(), fields[1].strip() if len(fields) == 2 else ""))
    return entries


class DefaultGlossaries:
    """The server's default glossaries (module docstring), read once from ``directory``."""

    def __init__(self, directory: str | Path | None) -> None:
        self.files: dict[str, Entries] = {}
        if not directory:
            return
        folder = Path(directory)
        if not folder.is_dir():
            raise GlossaryFileError(f"--glossary-dir {folder}: not a directory")
        for path in sorted(folder.glob("*.tsv")):
            try:
                self.files[path.stem] = tuple(parse_tsv(path.read_text(encoding="utf-8-sig"), str(path)))
            except (ValueError, UnicodeDecodeError) as exc:
                raise GlossaryFileError(str(exc)) from None
        log.info("default glossaries: %s", ", ".join(f"{k} ({len(v)} terms)" for k, v in self.files.items()))

    def entries(self, model: str, source: str, target: str) -> Entries:
        """The model's file, then the pair's (which overrides it)."""
        return self.files.get(model, ()) + (self.files.get(f"{source}-{target}", ()) if source and target else ())


@dataclasses.dataclass(frozen=True)
class CompiledGlossary:
    """A request's glossary on one model: each source term's target tokens, and the pattern that
    finds them; ``surrogates``: the terms the search writes through a surrogate (``surrogates.py``)."""

    terms: Mapping[str, TermTokens]  # normalised source term -> its target
    pattern: re.Pattern[str]
    surrogates: Mapping[str, TermTokens] = dataclasses.field(default_factory=dict)

    def found(self, sentence: str) -> Counter[str]:
        """The source terms of ``sentence`` (normalised as the tokenizer saw it) and how often each occurs."""
        return Counter(m.group(0) for m in self.pattern.finditer(sentence))

    def constraints(self, sentence: str) -> tuple[Constraint, ...]:
        """The terms of ``sentence``, each with how often it occurs; written through their
        surrogates unless the surrogates' spans could overlap (``term_swap.separable``)."""
        found = self.found(sentence)
        constraints = _grouped(found, self.surrogates, self.terms)
        if self.surrogates and not separable(constraints):
            constraints = _grouped(found, {}, self.terms)
        return constraints

    def with_surrogates(self, surrogates: Mapping[str, TermTokens]) -> CompiledGlossary:
        return dataclasses.replace(self, surrogates=surrogates) if surrogates or self.surrogates else self

    def options(self, sentence: str, options: DecodeOptions, max_new_tokens: int) -> DecodeOptions:
        """``options`` with the constraints of ``sentence``; InvalidRequest when they do not fit."""
        constraints = self.constraints(sentence)
        if not constraints:
            return options
        need = constraints_cost(constraints) + len(options.prefix_ids)
        if need > max_new_tokens:
            terms = ", ".join(echo(c.term.source) for c in constraints)
            raise InvalidRequest(
                f"the glossary terms {terms} take {need} tokens in a sentence, more than max_new_tokens "
                f"({max_new_tokens}): raise max_new_tokens or shorten the sentence"
            )
        return dataclasses.replace(options, constraints=constraints)


def _grouped(
    found: Counter[str], surrogates: Mapping[str, TermTokens], terms: Mapping[str, TermTokens]
) -> tuple[Constraint, ...]:
    """One constraint per distinct term written: two source terms with one target (and one
    surrogate) owe that target for both."""
    by_term: Counter[TermTokens] = Counter()
    first: dict[tuple, TermTokens] = {}
    for source, n in found.items():
        term = surrogates.get(source) or terms[source]
        key = (term.spaced, term.initial, term.target_tokens)
        by_term[first.setdefault(key, term)] += n
    return tuple(Constraint(term, n) for term, n in by_term.items())


@lru_cache(maxsize=64)  # a server's default glossary is compiled once per model and pair
def compile_glossary(
    entries: tuple[tuple[str, str], ...], tokenizer: Tokenizer, normalize: Callable[[str], str]
) -> CompiledGlossary | None:
    """Entries (later ones override earlier ones for the same source) -> the compiled glossary,
    or None when there are none. Raises InvalidRequest naming a term the model cannot write."""
    targets: dict[str, str] = {}
    for source, target in entries:
        source = normalize(source)
        targets[source] = normalize(target) or source
    if not targets:
        return None
    terms = {source: term_tokens(tokenizer, source, target) for source, target in targets.items()}
    longest_first = sorted(terms, key=lambda s: (-len(s), s))
    pattern = re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, longest_first)) + r")(?!\w)")
    return CompiledGlossary(terms, pattern)


@lru_cache(maxsize=8192)  # (tokenizer, term) pairs: a default glossary is tokenised once per model
def term_tokens(tokenizer: Tokenizer, source: str, target: str) -> TermTokens:
    """``target``'s token ids after a space and alone (module docstring); InvalidRequest when
    they do not spell it."""
    side = target_side(tokenizer)
    spaced, initial = (tuple(e.ids) for e in side.encode_batch([" " + target, target], add_special_tokens=False))
    for ids in (spaced, initial):
        if not ids or target not in tokenizer.decode(list(ids), skip_special_tokens=True):
            raise InvalidRequest(
                f"glossary term {echo(source)}: its target {echo(target)} cannot be written by this model's "
                "tokenizer (characters its vocabulary lacks)"
            )
    spaced_cues, initial_cues = (cues(index, source, target) for index in word_starts(tokenizer))
    return TermTokens(source, target, spaced, initial, spaced_cues, initial_cues)


CUE_CHARS = 3  # leading letters a cue token shares with the source or target term


def fold(text: str) -> str:
    """Case and accents folded (NFKD without combining marks): "März" -> "marz"."""
    return "".join(ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch)).casefold()


def cues(index: dict[str, frozenset[int]], source: str, target: str) -> frozenset[int]:
    """The tokens of ``index`` spelling the first CUE_CHARS letters of the source or target term."""
    keys = {fold(term)[:CUE_CHARS] for term in (source, target) if len(fold(term)) >= CUE_CHARS}
    return frozenset().union(*(index.get(key, frozenset()) for key in keys))


@lru_cache(maxsize=16)  # one per loaded tokenizer
def word_starts(tokenizer: Tokenizer) -> tuple[dict[str, frozenset[int]], dict[str, frozenset[int]]]:
    """Folded first CUE_CHARS letters -> the tokens whose text begins with them: those with a
    space marker (byte-level BPE's ``Ġ``, SentencePiece's ``▁``: a word inside the output), and
    those without (a word at its start, where a byte-level BPE writes no marker)."""
    vocab = tokenizer.get_vocab()
    ids = [i for token, i in vocab.items() if len(token) > CUE_CHARS]
    spaced: dict[str, set[int]] = {}
    bare: dict[str, set[int]] = {}
    for i, text in zip(ids, tokenizer.decode_batch([[i] for i in ids], skip_special_tokens=True)):
        word = fold(text.strip())
        if len(word) >= CUE_CHARS and word[:CUE_CHARS].isalnum():
            marked = tokenizer.id_to_token(i)[:1] in ("Ġ", "▁")
            (spaced if marked else bare).setdefault(word[:CUE_CHARS], set()).add(i)
    return tuple({key: frozenset(value) for key, value in index.items()} for index in (spaced, bare))
