"""Byte-level BPE shared by source and target, trained with Hugging Face ``tokenizers``.

The server uses the file as is: ``encode(text).ids`` for a source (the post-processor
appends ``</s>``, which the model saw in training) and ``decode(ids,
skip_special_tokens=True)`` for the output. Byte-level pre-tokenizer + decoder round-trip
every string exactly (ä, ö, ü, ß included); digits are split one by one so numbers are
copied digit by digit rather than through arbitrary multi-digit merges.

The file's normaliser is the *source* side's: NFC, CLDR's special spaces as plain spaces,
**lower case** and runs of whitespace as one space, trimmed. Case and spacing say nothing
about a date or an amount, so `MONDAY,  March 3` and `monday, march 3` reach the model as
the same ids (people type all three cases). German targets keep their case: they
are encoded for training with ``attnserve.contract.target_text.target_side``, the same
vocabulary without the lower case and whitespace steps (the server does the same for a
request's ``target_prefix``), and decoding never normalises.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")  # ids 0..3 = TranslationConfig's pad, bos, eos, unk


def _unicode_steps() -> list:
    # NFC only composes ("a" + U+0308 -> "ä"); the spaces CLDR prints (narrow no-break,
    # thin, no-break) become plain spaces, as in the training data.
    return [normalizers.NFC(), normalizers.Replace("\u202f", " "), normalizers.Replace("\u00a0", " "),
            normalizers.Replace("\u2009", " ")]  # fmt: skip


def source_normalizer() -> normalizers.Normalizer:
    """What the source side normalises: Unicode form, lower case, one space per run, trimmed."""
    return normalizers.Sequence(
        [*_unicode_steps(), normalizers.Lowercase(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()]
    )


def normalize_source(text: str) -> str:
    """``text`` as the source side's normaliser leaves it (what the model reads)."""
    return source_normalizer().normalize_str(text)


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2000) -> Tokenizer:
    """A BPE tokenizer of at most ``vocab_size`` ids over ``texts`` (sources already normalised by
    :func:`normalize_source`, and targets); saved with the source normaliser."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence(_unicode_steps())  # the merges learn German's case too
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
    tok.normalizer = source_normalizer()
    eos = tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", eos)])
    for i, name in enumerate(SPECIALS):
        assert tok.token_to_id(name) == i, (name, tok.token_to_id(name))
    return tok
