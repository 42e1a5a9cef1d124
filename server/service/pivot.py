"""Translation through a pivot language: ``source -> X -> target`` with two models, when no
model serves the pair directly (``routing.LanguageTable.pivot_route``; X is ``--pivot-language``).

Each leg is a whole request through the translation service: leg 1 translates the request's
texts into X with the request's format (so html markup and the document's sentences and
separators come back in place), leg 2 translates leg 1's texts with the same format into the
target. Both legs share the request's deadline (the server's time limit counts once, from the
start of leg 1). Leg 1 keeps one hypothesis (the best) and no target prefix; the alternatives,
token ids, scores and the target prefix the request asks for are leg 2's. The result names
the second model and the pivot; its source language (and the detected ones) are leg 1's.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable

from . import limits
from .requests import Event, Translated, TranslationRequest, drained
from .routing import Route


def first_leg(request: TranslationRequest, route: Route) -> TranslationRequest:
    """``source -> pivot`` with the request's texts, format and decoding, one hypothesis, no prefix.

    A request's glossary (source term -> target term) applies across the legs: leg 1 carries
    each source term through unchanged (a do-not-translate term), so that leg 2, which gets the
    glossary as sent, finds it in X and writes the target term in its place.
    """
    options = dataclasses.replace(request.options, num_hypotheses=1)
    keep = tuple((term, "") for term, _ in request.stored_glossary + request.glossary)
    return dataclasses.replace(
        request, model=route.models[0], target_language=route.pivot, target_prefix="", options=options, glossary=keep,
        stored_glossary=(),
    )  # fmt: skip


def second_leg(request: TranslationRequest, route: Route, texts: tuple[str, ...]) -> TranslationRequest:
    """``pivot -> target`` on leg 1's texts, with everything else the request asks for."""
    return dataclasses.replace(request, model=route.models[1], texts=texts, source_language=route.pivot)


def _best_texts(done: Translated) -> tuple[str, ...]:
    return tuple(result.hypotheses[0].text for result in done.results)


def _joined(leg1: Translated, leg2: Translated, route: Route) -> Translated:
    """The reply: leg 2's, with leg 1's source and detections, the pivot, and each text as good as its worse leg."""
    judged = leg2.quality
    if leg1.quality is not None and judged is not None:
        judged = [
            dataclasses.replace(b, score=min(a.score, b.score), low=a.low or b.low)
            for a, b in zip(leg1.quality, judged)
        ]
    done = dataclasses.replace(leg2, source_language=leg1.source_language, detected=leg1.detected, pivot=route.pivot)
    return dataclasses.replace(done, quality=judged)


async def events(
    service_events: Callable[[TranslationRequest, bool], AsyncIterator[Event]],
    request: TranslationRequest,
    route: Route,
    time_limit_s: float,
    tokens: bool,
) -> AsyncIterator[Event]:
    """Leg 1 whole (its events drained), then leg 2's events through ``service_events`` (the
    service's own): what streams is the target text; the finish event names the pivot, the
    reply joins both legs."""
    request = dataclasses.replace(request, deadline=limits.time_limit(request.deadline, time_limit_s))
    leg1 = await drained(service_events(first_leg(request, route), False))
    async with contextlib.aclosing(service_events(second_leg(request, route, _best_texts(leg1)), tokens)) as leg2:
        async for event in leg2:
            if isinstance(event, Translated):
                yield _joined(leg1, event, route)
            elif event.finish_reason is not None:
                yield dataclasses.replace(event, pivot_language=route.pivot)
            else:
                yield event
