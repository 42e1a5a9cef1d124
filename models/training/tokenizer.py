"""Byte-level BPE shared by source and target, trained with Hugging Face ``tokenizers``.

The server uses the file as is: ``encode(text).ids`` for a source (the post-processor
appends ``</s>``, which the model saw in training) and ``decode(ids,
skip_special_tokens=True)`` for the output. Byte-level pre-tokenizer + decoder round-trip
every string exactly (ä, ö, ü, ß included); digits are split one by one so numbers are
copied digit by digit rather than through arbitrary multi-digit merges.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")  # ids 0..3 = TranslationConfig's pad, bos, eos, unk


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2000) -> Tokenizer:
    """A BPE tokenizer of at most ``vocab_size`` ids over ``texts`` (source and target sentences)."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    # NFC only composes ("a" + U+0308 -> "ä"); the spaces CLDR prints (narrow no-break,
    # thin, no-break) become plain spaces, as in the training data.
    tok.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace("\u202f", " "), normalizers.Replace("\u00a0", " "),
         normalizers.Replace("\u2009", " ")]
    )  # fmt: skip
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    eos = tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", eos)])
    for i, name in enumerate(SPECIALS):
        assert tok.token_to_id(name) == i, (name, tok.token_to_id(name))
    return tok
