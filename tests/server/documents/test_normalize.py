"""Normalisation before tokenisation follows the model's tokenizer; separators are never touched."""

from __future__ import annotations

from tokenizers import Tokenizer, normalizers
from tokenizers.models import WordLevel

from attnserve.server.documents import DocumentSplitter, Normalizer, TokenBudget, unicode_form


def test_the_unicode_form_is_read_from_the_tokenizers_own_normalizer(tokenizer):
    assert Normalizer.for_tokenizer(tokenizer).form == "NFC"  # the bundled translator: NFC + space replacements
    assert unicode_form({"type": "Sequence", "normalizers": [{"type": "Replace"}, {"type": "NFKC"}]}) == "NFKC"
    assert unicode_form({"type": "Precompiled", "precompiled_charsmap": "..."}) == "NFKC"  # SentencePiece nmt_nfkc
    assert unicode_form({"type": "Lowercase"}) is None
    assert unicode_form(None) is None


def _word_level(normalizer) -> Tokenizer:
    tok = Tokenizer(WordLevel({"[UNK]": 0, "x": 1}, unk_token="[UNK]"))
    if normalizer is not None:
        tok.normalizer = normalizer
    return tok


def test_nfkc_only_for_a_tokenizer_that_expects_it():
    text = "ﬁve ½ km"  # compatibility characters: the ligature "fi", a vulgar fraction
    nfkc = DocumentSplitter(TokenBudget(_word_level(normalizers.NFKC()), 64)).split(text)
    assert nfkc.sources == ("five 1⁄2 km",)
    plain = DocumentSplitter(TokenBudget(_word_level(None), 64)).split(text)
    assert plain.sources == (text,)


def test_runs_of_whitespace_become_one_space_but_a_lone_no_break_space_stays():
    normalize = Normalizer("NFC")
    assert normalize("at  3:45\tPM \u00a0 today") == "at 3:45 PM today"
    assert normalize("1,500\u00a0miles") == "1,500\u00a0miles"


def test_invisible_format_characters_are_dropped_but_joiners_stay():
    # pasted in from word processors and web pages: "\ufeffMonday" translated as another word
    normalize = Normalizer("NFC")
    assert normalize("\ufeffMonday") == normalize("\u202eMonday\u202c") == "Monday"
    assert normalize("Mon\u00adday,\u200b March\u2060 3") == "Monday, March 3"
    assert normalize("\u200f\u200e") == ""
    assert normalize("می\u200cخواهم") == "می\u200cخواهم"  # Persian needs its zero-width non-joiner
    assert normalize("👩\u200d💻") == "👩\u200d💻"  # an emoji sequence its joiner
