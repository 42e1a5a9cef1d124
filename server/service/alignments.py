"""Word alignments of a request's translations, for every door alike.

After a request's sentences are decoded, the subword attention of each translation becomes
word links (:mod:`attnserve.server.documents.alignment`), on the work pool. The attention is
the one the engine kept from the decoder's steps (``Hypothesis.attention``: the decoder's
``step_attention`` output), or, for a model whose decoder goes without it, the model's aligner
graph's (:mod:`attnserve.server.translation.aligner`, one teacher-forced pass of the decoder over
the encoder output the engine kept from decoding it; onnxruntime runs without the GIL). Source
words are those of the sentence as sent (html: its text, markup left out), target words those
of its translation; character spans are offsets into those two strings.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from concurrent.futures import Executor
from difflib import SequenceMatcher

import numpy as np
from tokenizers import Tokenizer

from ..documents import PreparedDocument
from ..documents.alignment import WordAlignment, align_words, word_of_offsets, word_of_prefixes, word_spans
from ..runtime.registry import LoadedModel
from ..shared.errors import InvalidRequest
from ..translation import TranslationResult
from ..translation.aligner import Aligner
from .requests import ValidTranslation


class AlignmentsUnavailable(InvalidRequest):
    """Alignments asked of a model directory exported without ``aligner.onnx`` and ``step_attention``."""


def require_alignments(model: LoadedModel) -> Aligner | None:
    """The model's aligner graph, None where its decoder's steps' attention is all alignments
    need; raises where it has neither (a directory exported before either)."""
    if not model.aligns:
        raise AlignmentsUnavailable(
            f"model {model.name!r} cannot return alignments: its directory has no aligner graph "
            "(aligner.onnx) and its decoder does not return its steps' attention (step_attention), "
            "as attnserve-export writes them; re-export the model"
        )
    return model.aligner


def source_words(tokenizer: Tokenizer, sentence: str, normalised: str, ids: Sequence[int]) -> list[int | None]:
    """The word of ``sentence`` (as sent) each source id stands for. The ids were made from the
    normalised text, whose words are the sentence's (normalising folds case and whitespace);
    special and language tokens get None."""
    encoding = tokenizer.encode(normalised, add_special_tokens=False)
    words = word_of_offsets(normalised, encoding.offsets)
    if len(word_spans(normalised)) != len(word_spans(sentence)):  # a normaliser that splits words: none match
        words = [None] * len(words)
    found = _find(list(ids), encoding.ids)
    out: list[int | None] = [None] * len(ids)
    if found is not None:
        out[found : found + len(words)] = words
    return out


def _find(ids: list[int], part: list[int]) -> int | None:
    for at in range(len(ids) - len(part) + 1):
        if ids[at : at + len(part)] == part:
            return at
    return None


def target_words(tokenizer: Tokenizer, token_ids: Sequence[int]) -> list[int | None]:
    """The word of the translation each generated id belongs to (``word_of_prefixes``)."""
    prefixes = [list(token_ids[: k + 1]) for k in range(len(token_ids))]
    pieces = [text.strip() for text in tokenizer.decode_batch(prefixes, skip_special_tokens=True)] if prefixes else []
    return word_of_prefixes(pieces)


def written_words(words: Sequence[int | None], written: Sequence[int], token_ids: Sequence[int]) -> list[int | None]:
    """The word of the translation each written (fed) id became, from ``words``, those of
    ``token_ids``: the output is the written ids with some spans (glossary surrogates) swapped
    for others (their targets), whose ids take the word of the first id put in their place."""
    out: list[int | None] = [None] * len(written)
    for op, i1, i2, j1, j2 in SequenceMatcher(None, written, token_ids, autojunk=False).get_opcodes():
        for i in range(i1, i2):
            if op == "equal":
                out[i] = words[j1 + i - i1]
            elif j1 < j2:  # replaced: the word of the first id put in its place (deleted: none)
                out[i] = words[j1]
    return out


def _align(
    aligner: Aligner | None, tokenizer: Tokenizer, prefixes: tuple[Sequence[int], Sequence[int]],
    sentences: list[tuple[str, str, Sequence[int]]], outputs: list[tuple[str, Sequence[int], Sequence[int]]],
    memories: Sequence[np.ndarray | None], attentions: Sequence[np.ndarray | None],
) -> list[WordAlignment]:  # fmt: skip
    """Runs on the work pool: the aligner over the sentences without kept attention (none where
    the decoder returns it), then the word links. ``prefixes``:
    the source prefix (a source-language token) and the hidden target prefix the engine put
    around every sentence. ``outputs``: (translation, its ids, the ids the decoder was fed where
    glossary surrogates were swapped out of them, else empty): the aligner reads what the decoder
    was fed, the model's own words, whose attention is the model's (a target it never writes,
    teacher-forced, attends anywhere). ``memories``: each sentence's encoder output, kept from
    decoding it, or None (encoded again); ``attentions``: its attention, kept from the decoder's
    steps (``TranslationResult.attention``, what the aligner would return), or None (the aligner
    runs)."""
    source_prefix, hidden = prefixes
    fed = [written or out_ids for _, out_ids, written in outputs]
    sources = [[*source_prefix, *ids] for _, _, ids in sentences]  # the ids the engine encoded
    attention = list(attentions)
    todo = [i for i, kept in enumerate(attention) if kept is None or kept.shape[1] != len(sources[i])]
    if todo:
        if aligner is None:  # a model without it returns its steps' attention, which the engine keeps when asked
            raise RuntimeError("sentences to align without their steps' attention, and no aligner graph")
        pairs = [(sources[i], aligner.decoder_inputs(hidden, fed[i]), memories[i]) for i in todo]
        for i, weights in zip(todo, aligner.attention(pairs)):
            attention[i] = weights  # (T, S)
    result = []
    for (sentence, normalised, _), src, (translation, out_ids, written), f, weights in zip(
        sentences, sources, outputs, fed, attention
    ):
        rows = weights[len(hidden) : len(hidden) + len(f)] if len(f) else np.zeros((0, len(src)))
        words = target_words(tokenizer, out_ids)
        if written:
            words = written_words(words, written, out_ids)
        links = source_words(tokenizer, sentence, normalised, src)
        result.append(align_words(sentence, translation, rows, links, words))
    return result


def _prefixes(valid: ValidTranslation) -> tuple[Sequence[int], Sequence[int]]:
    options = valid.options
    return options.source_prefix_ids, options.prefix_ids[: options.hide_prefix]


async def align(
    valid: ValidTranslation,
    prepared: list[PreparedDocument],
    sentences: Sequence[TranslationResult],
    pool: Executor,
    every_hypothesis: bool = False,
) -> list[list[list[WordAlignment]]]:
    """Per document, per sentence, per hypothesis: its alignment (``sentences``: the results of
    every document's sentences, one after another). The best hypothesis of every sentence is
    aligned; with ``every_hypothesis`` the others of sentences with inline markup to place too."""
    aligner, tokenizer = require_alignments(valid.model), valid.model.engine.tokenizer
    work, outputs, memories, attentions, counts = [], [], [], [], []
    segments = [(segment, normalised, ids) for p in prepared for segment, normalised, ids in zip(
        p.document.segments, p.sources, p.ids)]  # fmt: skip
    for (segment, normalised, ids), result in zip(segments, sentences):
        chosen = result.hypotheses if every_hypothesis and segment.inline else result.hypotheses[:1]
        counts.append(len(chosen))
        for hypothesis in chosen:
            work.append((segment.text, normalised, ids))
            outputs.append((hypothesis.text.strip(), hypothesis.token_ids, hypothesis.written_ids))
            memories.append(result.memory)
            attentions.append(hypothesis.attention)
    loop = asyncio.get_running_loop()
    run = functools.partial(_align, aligner, tokenizer, _prefixes(valid), work, outputs, memories, attentions)
    flat = await loop.run_in_executor(pool, run) if work else []
    per_sentence, at = [], 0
    for count in counts:
        per_sentence.append(flat[at : at + count])
        at += count
    out, at = [], 0
    for p in prepared:
        out.append(per_sentence[at : at + p.segments])
        at += p.segments
    return out


def best_only(aligned: list[list[list[WordAlignment]]]) -> list[list[WordAlignment]]:
    """Per document, per sentence: the best hypothesis's alignment (what a request gets back)."""
    return [[hypotheses[0] for hypotheses in document] for document in aligned]


async def align_sentence(
    valid: ValidTranslation,
    prepared: PreparedDocument,
    pool: Executor,
    index: int,
    token_ids: Sequence[int],
    written_ids: Sequence[int] = (),
    memory: np.ndarray | None = None,
    attention: np.ndarray | None = None,
) -> WordAlignment:
    """The alignment of sentence ``index`` of a streamed document, from its generated ids (and
    those the decoder was fed, where glossary surrogates were swapped out of them), and its
    steps' attention or else its encoder output where the engine kept them (else the aligner
    runs, encoding the source again)."""
    aligner, tokenizer = require_alignments(valid.model), valid.model.engine.tokenizer
    segment = prepared.document.segments[index]
    work = [(segment.text, prepared.sources[index], prepared.ids[index])]
    outputs = [(tokenizer.decode(list(token_ids), skip_special_tokens=True).strip(), token_ids, written_ids)]
    loop = asyncio.get_running_loop()
    run = functools.partial(_align, aligner, tokenizer, _prefixes(valid), work, outputs, [memory], [attention])
    (alignment,) = await loop.run_in_executor(pool, run)
    return alignment
