"""A document's result from its sentences' results.

Results per document (what attnserve.v1's ``Translation`` and KServe's ``TRANSLATION`` carry):

- the best hypothesis is every sentence's best, joined;
- n-best (``num_hypotheses`` k > 1, beam search): the k combinations of per-sentence
  hypotheses with the highest sums of per-sentence scores, best first
  (:func:`~attnserve.server.documents.assemble.best_combinations`); a one-sentence text gets
  exactly that sentence's k hypotheses. Every hypothesis of a document reads differently: two
  token sequences can detokenize to one text (different subword splits), so a sentence's
  hypothesis whose text (spacing aside) repeats a better one's is dropped and the next takes its
  place, and a combination whose document text repeats a better one's is skipped. To leave room
  for them the engine decodes every hypothesis the beam holds (:func:`searched`: ``beam_size``,
  the most a beam search finishes with) and k are kept. Fewer than k come back only when the
  beam has fewer distinct texts (or fewer combinations exist);
- ``score`` and ``logprob`` of a document hypothesis: the sums over its sentences (each
  sentence's score is length-normalised on its own); ``token_ids``: the sentences' generated
  ids one after another (each sentence's ends with its eos); ``finish_reason``: ``length`` if
  any sentence hit ``max_new_tokens``, else ``eos``. ``max_new_tokens`` applies per sentence;
- ``source_tokens``: the sum over sentences; timing: the longest queue and decode time, the
  sum of encode times, the earliest first token.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..documents import PreparedDocument
from ..documents.alignment import WordAlignment
from ..documents.assemble import best_combinations
from ..translation import DecodeOptions, Hypothesis, TranslationResult


def searched(options: DecodeOptions) -> DecodeOptions:
    """The options the engine decodes with: with k > 1 hypotheses asked for, all ``beam_size`` the
    beam holds, so that those whose text repeats a better one's can make way (module docstring)."""
    if options.num_hypotheses <= 1 or options.num_hypotheses == options.beam_size:
        return options
    return dataclasses.replace(options, num_hypotheses=options.beam_size)


def reads(text: str) -> str:
    """What a user reads of a text: its words, whatever the spacing between them."""
    return " ".join(text.split())


def distinct(hypotheses: Sequence[Hypothesis]) -> list[int]:
    """The indices of the hypotheses (best first) whose text no better one's reads as."""
    first: dict[str, int] = {}
    for j, h in enumerate(hypotheses):
        first.setdefault(reads(h.text), j)
    return sorted(first.values())


def as_written(text: str) -> TranslationResult:
    """A text with nothing to translate: itself."""
    return TranslationResult([Hypothesis(text, [], 0.0, 0.0, "eos")], 0, 0.0, 0.0, 0.0, 0.0)


def document_result(
    prepared: PreparedDocument,
    results: Sequence[TranslationResult],
    k: int,
    alignments: Sequence[Sequence[WordAlignment]] | None = None,
) -> TranslationResult:
    """The document's result from its sentences' (see the module docstring); ``alignments``
    (per sentence, per hypothesis, where aligned) place the inline markup."""
    document = prepared.document
    if not results:
        return as_written(document.source)
    kept = [distinct(r.hypotheses) for r in results]  # per sentence: its hypotheses that read differently
    hypotheses, seen = [], set()
    for combination in best_combinations([[r.hypotheses[j].score for j in js] for r, js in zip(results, kept)], k):
        picked = [js[c] for js, c in zip(kept, combination)]  # each sentence's hypothesis index
        chosen = [r.hypotheses[j] for r, j in zip(results, picked)]
        placed = [a[j] if j < len(a) else None for a, j in zip(alignments, picked)] if alignments else None
        text = document.join([h.text.strip() for h in chosen], placed)
        if reads(text) in seen:
            continue
        seen.add(reads(text))
        hypotheses.append(
            Hypothesis(
                text=text,
                token_ids=[t for h in chosen for t in h.token_ids],
                logprob=sum(h.logprob for h in chosen),
                score=sum(h.score for h in chosen),
                finish_reason="length" if any(h.finish_reason == "length" for h in chosen) else "eos",
            )
        )
    return TranslationResult(
        hypotheses=hypotheses,
        source_tokens=sum(r.source_tokens for r in results),
        queue_ms=max(r.queue_ms for r in results),
        encode_ms=sum(r.encode_ms for r in results),
        decode_ms=max(r.decode_ms for r in results),
        first_token_ms=min(r.first_token_ms for r in results),
    )
