"""Text Word and PowerPoint keep twice: ``mc:AlternateContent`` holds a shape for the readers that
draw it (``mc:Choice``: a DrawingML text box, SmartArt) and a copy for older ones (``mc:Fallback``:
the same text box in VML), with the same paragraphs. The copy's paragraphs are not texts of their
own: each is written with the translation of its twin in the Choice, so a text box is translated,
counted against ``--max-file-chars`` and billed (DeepL's ``billed_characters``, the monthly quota)
once, and both copies read alike, whichever a reader draws."""

from __future__ import annotations

from collections.abc import Sequence

from lxml import etree

MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"


def fallback_of(element: etree._Element) -> etree._Element | None:
    """The ``mc:Fallback`` ``element`` is inside (a copy, counted with its twin), if any."""
    return next(element.iterancestors(f"{MC}Fallback"), None)


def twins(
    elements: Sequence[etree._Element], fallbacks: Sequence[etree._Element | None], texts: Sequence[str]
) -> dict[int, int]:
    """For each paragraph ``elements[i]`` inside an ``mc:Fallback`` (``fallbacks[i]``, from
    ``fallback_of``), the index of its twin: the paragraph at the same place among its Choice's
    (same tag, same ``texts``). A copy whose Choice has other paragraphs, or other text, has none:
    it stays a text of its own."""
    where = {e: i for i, e in enumerate(elements)}
    places: dict[etree._Element, tuple[dict, list]] = {}  # a Fallback -> its paragraphs' places, the Choice's
    out: dict[int, int] = {}
    for i, (element, fallback) in enumerate(zip(elements, fallbacks, strict=True)):
        parent = fallback.getparent() if fallback is not None else None
        choice = parent.find(f"{MC}Choice") if parent is not None else None
        if choice is None:
            continue
        if fallback not in places:
            mine = {e: k for k, e in enumerate(fallback.iter(element.tag))}
            places[fallback] = (mine, list(choice.iter(element.tag)))
        mine, theirs = places[fallback]
        if len(mine) != len(theirs):
            continue
        j = where.get(theirs[mine[element]])
        if j is not None and texts[j] == texts[i]:
            out[i] = j
    return out
