"""The fields of DeepL's requests as this server reads them: a choice among DeepL's values, a
language code, the tag handling options, the glossary, a document's ``output_format``; a bad one
is a 400 in DeepL's words (``Value for 'X' not supported``)."""

from __future__ import annotations

from multidict import MultiDict

from ...service.stored_glossaries import language
from ...service.vocabulary import MarkupRules
from ...shared.errors import InvalidRequest, echo

TAG_LISTS = ("ignore_tags", "splitting_tags", "non_splitting_tags")
SPLIT_SENTENCES = ("0", "1", "nonewlines")
FLAGS = ("0", "1", "false", "true")


def choice(fields: MultiDict, name: str, allowed: tuple[str, ...], default: str) -> str:
    value = fields.get(name, default)
    value = str(value).lower() if isinstance(value, (str, bool, int)) else value
    if value not in allowed:
        raise InvalidRequest(f"Value for '{name}' not supported: {echo(value)}; expected one of {', '.join(allowed)}")
    return value


def text_field(fields: MultiDict, name: str) -> str | None:
    """A field DeepL takes as text; a JSON body's number, list or object there is refused."""
    value = fields.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidRequest(f"Value for '{name}' not supported: {echo(value)} is not a string")
    return value


def lang(fields: MultiDict, name: str) -> str:
    """A language code as sent, variant and all (``PT-BR``, ``ZH-HANT``, ``EN-US``): routing finds the
    model of that variant, else the language's plain one (``service.routing``)."""
    value = text_field(fields, name)
    if not value or not value.strip():
        raise InvalidRequest(f"Parameter '{name}' not specified.")
    try:
        language(value, name.split("_")[0])
    except InvalidRequest:
        raise InvalidRequest(f"Value for '{name}' not supported: {echo(value)}") from None
    return value.strip()


def tag_names(fields: MultiDict, name: str) -> frozenset[str]:
    """A list of tags: comma-separated (a form, DeepL's older clients), repeated or a JSON list
    of such strings (its newer ones); blanks between commas are dropped."""
    names: set[str] = set()
    for value in fields.getall(name, []):
        if not isinstance(value, str):
            raise InvalidRequest(f"Value for '{name}' not supported: {echo(value)} is not a string")
        names.update(part.strip() for part in value.split(",") if part.strip())
    return frozenset(names)


def markup_rules(fields: MultiDict, tags: str) -> MarkupRules:
    """DeepL's tag handling options as the request's markup rules (the service checks the names);
    ``outline_detection`` means something for xml only, as DeepL documents it. ``split_sentences``
    too: in a text a newline ends a sentence only with ``1`` (html's never do)."""
    outline = choice(fields, "outline_detection", FLAGS, "1") in ("1", "true")
    lists = {name: tag_names(fields, name) for name in TAG_LISTS}
    split = choice(fields, "split_sentences", SPLIT_SENTENCES, "1")  # "0": nowhere; "nonewlines": not at lines
    return MarkupRules(
        xml=tags == "xml", outline_detection=outline, lines=split == "1", sentences=split != "0", **lists
    )


def glossary_id(fields: MultiDict) -> str:
    """The request's glossary: ``glossary_id``, or ``glossary_ids`` (DeepL's newer clients send a
    list, or one comma-separated field) naming one; several distinct glossaries in one request
    are refused rather than applied in part."""
    ids = []
    for name in ("glossary_id", "glossary_ids"):
        for value in fields.getall(name, []):
            if not isinstance(value, str):
                raise InvalidRequest(f"Parameter '{name}' must be a string")
            ids += [part.strip() for part in value.split(",") if part.strip()]
    if len(set(ids)) > 1:
        raise InvalidRequest(
            f"Value for 'glossary_ids' not supported: {len(set(ids))} glossaries; this server applies one "
            "glossary a request (a v3 glossary holds one dictionary per language pair)"
        )
    return ids[0] if ids else ""


# extensions of one format, as DeepL lists them ("htm / html", "xlf / xliff")
SAME_FORMAT = {"htm": "html", "xlf": "xliff"}


def check_output_format(fields: MultiDict, name: str) -> None:
    """``output_format`` names the translated file's extension; a document comes back in its own
    format here, so any other is refused (DeepL refuses the conversions it lacks) rather than
    answered with a file of another type than the client asked for."""
    wanted = str(fields.get("output_format") or "").strip().lower().lstrip(".")
    own = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if wanted and SAME_FORMAT.get(wanted, wanted) != SAME_FORMAT.get(own, own):
        raise InvalidRequest(
            f"Value for 'output_format' not supported: {echo(wanted)}; this server returns a document in its "
            f"own format ({'.' + own if own else 'the uploaded one'})"
        )


FORMALITY = ("default", "more", "less", "prefer_more", "prefer_less")
MODEL_TYPES = ("quality_optimized", "prefer_quality_optimized", "latency_optimized")


def check_formality(fields: MultiDict) -> None:
    """No served target has formality (``/v2/languages``: ``supports_formality`` false), so
    ``more`` and ``less`` are refused as DeepL refuses them for such a target, rather than
    answered in a register the caller did not ask for; its ``prefer_`` values fall back to the
    default, as DeepL's do."""
    if choice(fields, "formality", FORMALITY, "default") in ("more", "less"):
        raise InvalidRequest("'formality' is not supported for given 'target_lang'.")


def check_model_type(fields: MultiDict) -> None:
    """``model_type``: a pair has one model here, which answers whichever DeepL names; a value
    DeepL does not know is its 400, not a typo passed over."""
    choice(fields, "model_type", MODEL_TYPES, MODEL_TYPES[0])
