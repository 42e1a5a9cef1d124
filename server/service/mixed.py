"""Texts whose source language is detected (``source_language: auto``): each text its own language.

A batch may mix languages (LibreTranslate's ``q`` list with ``source: auto``: a chat, a list of
product names). Each text's language is detected on its own (``SourceDetection.each``);
the texts of one language go as one request through the service, with that source language,
so each reaches the model (and language token) of its pair, pivoting where the pair needs it;
the groups run concurrently, within the request's deadline, and their results are put back in
the request's order. The result names every text's detection; its source language is the
texts' one language, or "" for a mixed batch; its model the models that answered, comma-separated.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from ..shared.errors import InvalidRequest
from . import limits
from .quality import LowQuality
from .requests import Detection, Event, Translated, TranslationRequest, drained

T = TypeVar("T")
TEXT_NAMED = re.compile(r"text (\d+)\b")  # how an error names a text of its request, at its start


def by_language(detected: list[Detection]) -> dict[str, list[int]]:
    """The texts' indices per detected language, languages in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for i, found in enumerate(detected):
        groups.setdefault(found.language, []).append(i)
    return groups


async def all_or_none(coroutines: list[Coroutine[Any, Any, T]]) -> list[T]:
    """Every coroutine's result, in order; the first failure cancels the rest and is raised."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()  # a no-op on finished tasks; frees the decoder rows of unfinished ones


async def translate(
    service_translate: Callable[[TranslationRequest], Awaitable[Translated]],
    request: TranslationRequest,
    detected: list[Detection],
    time_limit_s: float,
) -> Translated:
    """:func:`events` drained, each language's request answered whole by ``service_translate``."""

    async def whole(part: TranslationRequest, tokens: bool) -> AsyncIterator[Event]:
        yield await service_translate(part)

    return await drained(events(whole, request, detected, time_limit_s, False))


async def events(
    service_events: Callable[[TranslationRequest, bool], AsyncIterator[Event]],
    request: TranslationRequest,
    detected: list[Detection],
    time_limit_s: float,
    tokens: bool,
) -> AsyncIterator[Event]:
    """One request per detected language through ``service_events`` (the service's own), the
    reply's results in the request's order. Texts of one language (a stream's one text): that
    request's events passed on; several: their replies drained concurrently."""
    request = dataclasses.replace(request, deadline=limits.time_limit(request.deadline, time_limit_s))
    groups = by_language(detected)
    parts = [
        dataclasses.replace(request, texts=tuple(request.texts[i] for i in indices), source_language=language)
        for language, indices in groups.items()
    ]
    if len(parts) == 1:
        async with contextlib.aclosing(service_events(parts[0], tokens)) as only:
            async for event in only:
                yield _joined(request, detected, groups, [event]) if isinstance(event, Translated) else event
        return
    replies = await all_or_none(
        [_renumbered(drained(service_events(part, False)), indices) for part, indices in zip(parts, groups.values())]
    )
    yield _joined(request, detected, groups, replies)


async def _renumbered(reply: Awaitable[T], indices: list[int]) -> T:
    """A group's reply; an error naming its ``text k`` names the batch's text instead (the group
    numbers its own texts from 0)."""
    try:
        return await reply
    except InvalidRequest as err:
        message = str(err)
        named = TEXT_NAMED.match(message)
        if named and int(named[1]) < len(indices):
            err.args = (f"text {indices[int(named[1])]}{message[named.end() :]}", *err.args[1:])
            if isinstance(err, LowQuality):
                err.text = indices[err.text]
        raise


def _joined(
    request: TranslationRequest, detected: list[Detection], groups: dict[str, list[int]], parts: list[Translated]
) -> Translated:
    """The groups' replies as one, in the request's order."""
    n = len(request.texts)
    results: list[Any] = [None] * n
    alignments: list[Any] | None = [None] * n if any(p.alignments is not None for p in parts) else None
    quality: list[Any] | None = [None] * n if any(p.quality is not None for p in parts) else None
    for indices, part in zip(groups.values(), parts, strict=True):
        for j, i in enumerate(indices):
            results[i] = part.results[j]
            if alignments is not None and part.alignments is not None:
                alignments[i] = part.alignments[j]
            if quality is not None and part.quality is not None:
                quality[i] = part.quality[j]
    request.caller.items = n  # each group booked its own texts
    pivots = {p.pivot for p in parts}
    return Translated(
        model=",".join(dict.fromkeys(p.model for p in parts)),
        results=results,
        source_language=parts[0].source_language if len(parts) == 1 else "",
        target_language=parts[0].target_language,
        detected=tuple(detected),
        alignments=alignments,
        pivot=pivots.pop() if len(pivots) == 1 else "",
        quality=quality,
    )
