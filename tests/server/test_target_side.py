"""A request's ``target_prefix`` is target-language text: the tokenizer.json normaliser is the
source side's, and a lower-casing one (the bundled translator's) must not touch the prefix."""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

from attnserve.contract.target_text import target_side


def _tokenizer(normalizer) -> Tokenizer:
    vocab = {c: i for i, c in enumerate(["<unk>", "M", "m", "o", "n", "t", "a", "g", ",", " ", "ä"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    tok.normalizer = normalizer
    return tok


def test_lower_case_trim_and_whitespace_folding_are_dropped_unicode_steps_kept():
    source = _tokenizer(
        normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase(), normalizers.Replace(Regex(r"\s+"), " "),
                              normalizers.Strip()])
    )  # fmt: skip
    target = target_side(source)
    assert source.encode("Montag,  ").tokens == ["m", "o", "n", "t", "a", "g", ","]
    assert target.encode("Montag,  ").tokens == ["M", "o", "n", "t", "a", "g", ",", " ", " "]
    assert target.encode("a\u0308").tokens == ["ä"]  # NFC still composes
    assert target_side(source) is target  # built once per tokenizer


def test_a_tokenizer_without_source_only_steps_is_used_as_it_is():
    folded = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace("ä", "a")])
    for normalizer in (None, normalizers.NFC(), folded):
        tok = _tokenizer(normalizer)
        assert target_side(tok) is tok
