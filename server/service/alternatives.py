"""n distinct alternatives of every text (``TranslationRequest.distinct_alternatives``; LibreTranslate's
``alternatives`` n), the same whichever door asks.

The texts are decoded with a beam of n + 1 (the request's options' ``beam_size`` and
``num_hypotheses``), every hypothesis kept. Two token sequences of a beam can read as one text
("Freitag"), so the beam of n + 1 may hold fewer than n others: those texts are decoded again with
a beam twice as wide, up to the server's widest (``--max-beam-size``, within
``--max-active-sequences``), until they have n. The translation stays the beam of n + 1's best
(what a request for that beam gets from any door), and texts with n cost nothing more: no decode,
no characters (the wider decodes are ``billed=False``: the request's texts count once), and the
call's items and queue time stay the request's. Where even the widest beam holds fewer than n + 1
distinct texts, fewer come back.

Each result's hypotheses are its translation, then at most n alternatives, none reading as the
translation or as an earlier alternative (spacing aside, as ``document_results`` tells an n-best
list's texts apart), the beam of n + 1's first, then the wider beams'.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable

from ..shared.config import Settings
from ..translation import Hypothesis, TranslationResult
from . import limits
from .document_results import reads
from .requests import Event, Translated, TranslationRequest, drained

Events = Callable[[TranslationRequest], AsyncIterator[Event]]  # the service's events of a request


def beam(request: TranslationRequest, width: int) -> TranslationRequest:
    """``request`` decoded with a beam of ``width``, every hypothesis returned."""
    options = dataclasses.replace(request.options, beam_size=width, num_hypotheses=width)
    return dataclasses.replace(request, options=options)


def distinct(hypotheses: list[Hypothesis], alternatives: int) -> list[Hypothesis]:
    """The best hypothesis, then the first ``alternatives`` others that read differently from it and
    from each other."""
    best, kept = hypotheses[0], [hypotheses[0]]
    seen = {reads(best.text)}
    for h in hypotheses[1:]:
        if len(kept) > alternatives:
            break
        if (read := reads(h.text)) not in seen:
            seen.add(read)
            kept.append(h)
    return kept


def _short(result: TranslationResult, alternatives: int) -> bool:
    """Whether a text the model decoded (a blank one it did not) has fewer than ``alternatives``."""
    return bool(result.hypotheses[0].token_ids) and len(distinct(result.hypotheses, alternatives)) <= alternatives


def _with_wider(done: Translated, short: list[int], wider: Translated) -> Translated:
    """``done`` with the hypotheses of a wider beam after those of the texts at ``short``."""
    results = list(done.results)
    for i, result in zip(short, wider.results, strict=True):
        results[i] = dataclasses.replace(results[i], hypotheses=[*results[i].hypotheses, *result.hypotheses])
    return dataclasses.replace(done, results=results)


async def translate(events: Events, request: TranslationRequest, settings: Settings) -> Translated:
    """``request``'s reply, drained from ``events`` (the service's), with
    ``request.distinct_alternatives`` n distinct alternatives per text (module docstring)."""
    alternatives, call = request.distinct_alternatives, request.caller
    limits.check_alternatives(alternatives)
    if not alternatives:
        return await drained(events(request))
    widest = min(settings.max_beam_size, settings.max_active_sequences)
    request = dataclasses.replace(request, distinct_alternatives=0)
    width = alternatives + 1
    done = await drained(events(beam(request, width)))
    counted = call.items, call.queue_s  # the request's texts, not a wider decode's
    while width < widest:
        short = [i for i, r in enumerate(done.results) if _short(r, alternatives)]
        if not short:
            break
        width = min(widest, 2 * width)
        texts = tuple(request.texts[i] for i in short)
        # the same texts again: their characters count once, as the request's (billed=False)
        again = dataclasses.replace(request, texts=texts, alignments=False, quality=False, billed=False)
        done = _with_wider(done, short, await drained(events(beam(again, width))))
    call.items, call.queue_s = counted
    results = [dataclasses.replace(r, hypotheses=distinct(r.hypotheses, alternatives)) for r in done.results]
    return dataclasses.replace(done, results=results)
