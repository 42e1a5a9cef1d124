"""Glossaries in the service: the terms found in a sentence (whole words, case-sensitive, the
longest first, every occurrence), their targets as tokens, the TSV files and their errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from attnserve.server.service.glossary import (
    DefaultGlossaries,
    GlossaryFileError,
    compile_glossary,
    parse_tsv,
)
from attnserve.server.service.limits import check_glossary
from attnserve.server.service.stored_glossaries import parse_entries
from attnserve.server.shared.config import Settings
from attnserve.server.shared.errors import InvalidRequest, LimitExceeded
from attnserve.server.translation import DecodeOptions

BUNDLED = Path(__file__).resolve().parents[3] / "models" / "repo" / "translator-en-de" / "tokenizer.json"


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(BUNDLED))


def found(glossary, sentence: str) -> dict[str, int]:
    return {c.term.source: c.count for c in glossary.constraints(sentence)}


def test_whole_words_case_sensitive_longest_first_every_occurrence(tokenizer):
    g = compile_glossary((("New", "Neu"), ("New York", ""), ("Monday", "Montag")), tokenizer, str.strip)
    assert found(g, "New York on Monday, and New things on Monday") == {"New York": 1, "Monday": 2, "New": 1}
    assert found(g, "Mondays in new york, Newton") == {}  # not whole words, other case


def test_targets_are_spelled_verbatim_with_and_without_a_space(tokenizer):
    g = compile_glossary((("March", "MÄRZ"), ("Weblate", "")), tokenizer, str.strip)
    march, keep = (c.term for c in g.constraints("March with Weblate"))
    assert tokenizer.decode(list(march.spaced)) == " MÄRZ" and tokenizer.decode(list(march.initial)) == "MÄRZ"
    assert keep.target == "Weblate"  # an empty target keeps the term, in its case (no lower-casing)


def test_later_entries_override_earlier_ones(tokenizer):
    g = compile_glossary((("March", "März"), ("March", "MÄRZ")), tokenizer, str.strip)
    (c,) = g.constraints("March 3")
    assert c.term.target == "MÄRZ"


def test_a_target_the_tokenizer_cannot_write_is_refused_naming_the_term():
    word_level = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    with pytest.raises(InvalidRequest, match="'Paris'.*cannot be written"):
        compile_glossary((("Paris", "Parigi"),), word_level, str.strip)


def test_terms_that_do_not_fit_max_new_tokens_are_refused(tokenizer):
    g = compile_glossary((("Monday", "Montag, der erste Tag der Woche"),), tokenizer, str.strip)
    assert g.options("Monday", DecodeOptions(), 64).constraints
    with pytest.raises(InvalidRequest, match="'Monday'.*max_new_tokens"):
        g.options("Monday and Monday", DecodeOptions(), 12)


def test_request_limits():
    settings = Settings(max_glossary_terms=3, max_glossary_term_chars=10)
    check_glossary(settings, (("a", "b"),) * 3)
    with pytest.raises(LimitExceeded, match="at most 2"):
        check_glossary(Settings(max_glossary_terms=2, max_glossary_term_chars=10), (("a", "b"),) * 3)
    with pytest.raises(LimitExceeded, match="target is 11"):
        check_glossary(settings, (("a", "b" * 11),))
    with pytest.raises(InvalidRequest, match="empty"):
        check_glossary(settings, (("  ", "b"),))


def test_tsv_files(tmp_path):
    assert parse_tsv("# comment\n\nMarch\tMÄRZ\nWeblate\n") == [("March", "MÄRZ"), ("Weblate", "")]
    with pytest.raises(ValueError, match="line 2"):
        parse_tsv("a\tb\na\tb\tc\n", "terms.tsv")
    (tmp_path / "m.tsv").write_text("June\tJuni\n", encoding="utf-8")
    (tmp_path / "en-de.tsv").write_text("June\tJUNI\n", encoding="utf-8-sig")  # saved with a byte-order mark
    defaults = DefaultGlossaries(tmp_path)
    assert defaults.entries("m", "en", "de") == (("June", "Juni"), ("June", "JUNI"))
    assert defaults.entries("other", "", "") == ()
    (tmp_path / "bad.tsv").write_text("a\tb\tc\n", encoding="utf-8")
    with pytest.raises(GlossaryFileError, match="bad.tsv, line 1"):
        DefaultGlossaries(tmp_path)
    with pytest.raises(GlossaryFileError, match="not a directory"):
        DefaultGlossaries(tmp_path / "missing")


@pytest.mark.parametrize("fmt, text", [("tsv", "\ufeffMonday\tWochenbeginn\nMarch\tMÄRZ\n"),
                                       ("csv", "\ufeffMonday,Wochenbeginn\r\nMarch,MÄRZ\r\n")])  # fmt: skip
def test_stored_entries_as_a_spreadsheet_saves_them_lose_the_byte_order_mark(fmt, text):
    # the mark stayed in the first source term, which then never matched
    assert parse_entries(text, fmt) == [("Monday", "Wochenbeginn"), ("March", "MÄRZ")]


@pytest.mark.parametrize("entry", [("May", "Mai\tx"), ("May", "\x00"), ("May\n", "Mai"), ("May", "Mai\u2028")])
def test_a_request_glossary_term_with_a_control_character_is_refused(entry):
    with pytest.raises(InvalidRequest, match="control character"):
        check_glossary(Settings(), (entry,))
