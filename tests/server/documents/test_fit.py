"""Sentences over the model's source limit are cut at clauses, then words, then tokens; nothing is lost."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

from attnserve.server.documents import DocumentSplitter, TokenBudget
from attnserve.server.shared.errors import InvalidRequest
from tests.support.bounded import within

TOKENIZER = Path(__file__).resolve().parents[3] / "models" / "zoo" / "translator-en-de" / "tokenizer.json"


def _check(prepared, text, limit):
    """Every piece fits, pieces + separators are the input, and each piece's ids are what the
    model's tokenizer makes of its source (the engine decodes them without tokenising again)."""
    assert all(len(ids) <= limit for ids in prepared.ids)
    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    assert [list(ids) for ids in prepared.ids] == [e.ids for e in tokenizer.encode_batch(list(prepared.sources))]
    assert prepared.document.join([s.text for s in prepared.document.segments]) == text
    assert "".join(prepared.document.separators).strip() == ""  # only whitespace between the pieces


def test_a_long_sentence_is_cut_at_clause_punctuation(splitter, tokenizer):
    clause = "more than 1,500 miles at 3:45 PM on Monday, March 3, 2025"
    text = "; ".join([clause] * 6) + "."
    assert len(tokenizer.encode(text).ids) > 64  # once refused with INVALID_ARGUMENT
    prepared = splitter.split(text)
    _check(prepared, text, 64)
    assert prepared.segments > 1
    for segment in prepared.document.segments[:-1]:
        assert segment.text.endswith((";", ",")), segment.text  # cut after a clause, not inside one


def test_a_sentence_without_punctuation_is_cut_between_words(tight):
    text = "at three forty five in the afternoon of the first day of the month of March in the year two thousand"
    prepared = tight.split(text)
    _check(prepared, text, 12)
    words = text.split()
    assert " ".join(s.text for s in prepared.document.segments).split() == words  # whole words, in order


def test_a_word_longer_than_the_limit_is_cut_at_token_boundaries(tight):
    word = "https://example.org/" + "abcdefghij0123456789" * 20
    text = f"See {word} now."
    prepared = tight.split(text)
    _check(prepared, text, 12)
    assert "".join(s.text for s in prepared.document.segments if "See" not in s.text and "now" not in s.text)
    assert "".join(prepared.document.join([s.text for s in prepared.document.segments]).split()) == "".join(
        text.split()
    )


def test_limit_counts_the_special_tokens(tokenizer):
    budget = TokenBudget(tokenizer, 12)
    assert budget.overhead == 1  # the bundled tokenizer appends </s>
    with pytest.raises(ValueError, match="no room"):
        TokenBudget(tokenizer, 1)


def test_a_character_that_alone_is_over_the_limit_is_refused(tokenizer):
    # Two tokens of room: the character is three byte-level tokens and cannot be cut.
    splitter = DocumentSplitter(TokenBudget(tokenizer, 3))
    with pytest.raises(InvalidRequest, match="alone is over"):
        splitter.split("漢")


def test_a_long_sentence_with_a_run_of_40000_spaces_is_cut_in_linear_time(splitter):
    # the clause pattern's \s+(?=[–—]\s) retried every start inside a run of spaces: quadratic,
    # ~40 s for this text under --max-text-chars; asked of a child limited to 10 CPU seconds
    text = "word " * 80 + " " * 40_000 + "end of it."

    def segments() -> list[str]:
        return [s.text for s in splitter.split(text).document.segments]

    kind, pieces = within(segments, cpu_seconds=10)
    assert kind == "ok" and " ".join(pieces).split() == text.split()


def test_a_50000_character_word_is_cut_in_one_pass(splitter):
    # each cut took one piece off and tokenized the rest again: quadratic, ~20 s for this text
    # (under --max-text-chars), on a pool no disconnect or deadline stops; asked of a child
    # limited to 10 CPU seconds
    text = "p" * 50_000

    def segments() -> list[str]:
        return [s.text for s in splitter.split(text).document.segments]

    kind, pieces = within(segments, cpu_seconds=10)
    assert kind == "ok" and "".join(pieces) == text and len(pieces) > 1
