"""Request parameters every protocol shares, checked once: decoding options from name -> value.

attnserve.v1 maps its ``DecodingOptions`` message to these names, KServe v2 takes them as
request parameters (gRPC ``InferParameter`` or REST JSON), the next HTTP routes as JSON
fields. Types and the consistency of ``mode`` are checked here; every value's range is the
translation service's (``service/limits.py``, the one place of limits and their wording).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from attnserve.contract.deadline import Deadline, timeout_parameter

from ..service.vocabulary import TEXT, DecodeOptions
from ..shared.errors import InvalidRequest, echo

MODES = ("greedy", "beam_search", "sampling")
INT, FLOAT, BOOL, STR = "an integer", "a number", "a boolean", "a string"
# name -> kind. New engine options (languages, text format) are added here once.
DECODING_PARAMETERS = {
    "mode": STR,
    "beam_size": INT,
    "num_hypotheses": INT,
    "length_penalty": FLOAT,
    "max_new_tokens": INT,
    "temperature": FLOAT,
    "top_k": INT,
    "top_p": FLOAT,
    "seed": INT,
    "return_scores": BOOL,
}
# Beside the decoding options: how a text is read, "text" (default) or "html".
FORMAT = "format"
# and the request's languages: codes of the model's own or ISO 639-1, a forced prefix.
LANGUAGE_PARAMETERS = ("source_language", "target_language", "target_prefix")
# and word alignments of every sentence's best translation: a boolean.
ALIGNMENTS = "return_alignments"
# and a quality score per text (service/quality.py): a boolean.
QUALITY = "return_quality"


# A glossary: source term -> target term ("" keeps the term), as a JSON object, or a
# string holding one (KServe's parameters are strings, numbers and booleans only).
GLOSSARY = "glossary"


def glossary(values: Mapping[str, Any], where: str = "") -> tuple[tuple[str, str], ...]:
    """The ``glossary`` parameter as (source, target) pairs (none when absent)."""
    value = values.get(GLOSSARY)
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise InvalidRequest(f"{where}{GLOSSARY}: not valid JSON ({exc.msg} at {exc.pos})") from None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InvalidRequest(
            f'{where}{GLOSSARY}: expected a JSON object of term -> target term strings ("" keeps the term), '
            f"got {echo(value)}"
        )
    return tuple(value.items())


# A stored glossary of the caller's key, by id (service/stored_glossaries.py): a string.
GLOSSARY_ID = "glossary_id"


def glossary_id(values: Mapping[str, Any], where: str = "") -> str:
    value = values.get(GLOSSARY_ID)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidRequest(f"{where}{GLOSSARY_ID}: expected a glossary's id (a string), got {echo(value)}")
    return value


def languages(values: Mapping[str, Any], where: str = "") -> dict[str, str]:
    """The ``source_language`` / ``target_language`` / ``target_prefix`` parameters, as the
    translation request's fields of those names ("" when absent)."""
    return {name: _typed(name, values.get(name, ""), STR, where) for name in LANGUAGE_PARAMETERS}


def text_format(values: Mapping[str, Any], where: str = "") -> str:
    """The ``format`` parameter of a request, a string ("text" when absent; the service checks its value)."""
    return _typed(FORMAT, values.get(FORMAT, TEXT), STR, where)


def alignments(values: Mapping[str, Any], where: str = "") -> bool:
    """The ``return_alignments`` parameter (false when absent)."""
    return _typed(ALIGNMENTS, values.get(ALIGNMENTS, False), BOOL, where)


def quality(values: Mapping[str, Any], where: str = "") -> bool:
    """The ``return_quality`` parameter (false when absent)."""
    return _typed(QUALITY, values.get(QUALITY, False), BOOL, where)


def _typed(name: str, value: Any, kind: str, where: str) -> Any:
    """``value`` as ``kind``; an integral float is an integer, an integer is a number; nothing else converts."""
    ok = False
    if kind == BOOL:
        ok = isinstance(value, bool)
    elif kind == STR:
        ok = isinstance(value, str)
    elif kind == INT and not isinstance(value, bool):
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        ok = isinstance(value, int)
    elif kind == FLOAT and not isinstance(value, bool):
        ok = isinstance(value, (int, float)) and math.isfinite(value)
        value = float(value) if ok else value
    if not ok:
        raise InvalidRequest(f"{where}{name}: expected {kind}, got {echo(value)}")
    return value


def decode_options(values: Mapping[str, Any], where: str = "") -> DecodeOptions:
    """Name -> value (absent names take their defaults) -> the engine's ``DecodeOptions``.

    ``mode`` is inferred when absent (beam search when beam_size > 1, sampling when
    temperature > 0, else greedy); a given mode must agree with the other options.
    ``where`` prefixes the names in error messages (``"options."``, ``"parameters."``).
    """
    v = {name: _typed(name, values[name], kind, where) for name, kind in DECODING_PARAMETERS.items() if name in values}
    mode = v.get("mode", "")
    if mode and mode not in MODES:
        raise InvalidRequest(f"{where}mode: unknown value {echo(mode)} (one of {', '.join(MODES)})")
    beam_size = v.get("beam_size") or 1
    temperature = v.get("temperature", 0.0)
    if mode == "greedy" and (beam_size > 1 or temperature > 0):
        raise InvalidRequest(f"{where}mode greedy with beam_size {beam_size} / temperature {temperature}")
    if mode == "beam_search" and temperature > 0:
        raise InvalidRequest(f"{where}mode beam_search does not sample: leave temperature at 0")
    if mode == "sampling":
        if beam_size > 1:
            raise InvalidRequest(f"{where}mode sampling needs beam_size 1, got {beam_size}")
        temperature = temperature or 1.0
    seed = v.get("seed")
    return DecodeOptions(
        beam_size=beam_size,
        num_hypotheses=v.get("num_hypotheses") or 1,
        length_penalty=v.get("length_penalty", 1.0),
        max_new_tokens=v.get("max_new_tokens", 0),
        temperature=temperature,
        top_k=v.get("top_k", 0),
        top_p=v.get("top_p", 1.0),
        seed=seed,
        return_scores=v.get("return_scores", False),  # greedy/sampling skip the log-softmax without it
    )


# KServe's request parameters, read by its doors and by Triton's generate extension.
TIMEOUT = "timeout"
EMPTY_FINAL = "triton_enable_empty_final_response"
# Request parameters Triton's clients may send that mean nothing here: accepted and ignored.
IGNORED = {"priority", "sequence_id", "sequence_start", "sequence_end", "binary_data_output", "headers"}


def request_deadline(parameters: Mapping[str, Any]) -> Deadline | None:
    """Triton's ``timeout`` parameter (microseconds) as the request's deadline."""
    if TIMEOUT not in parameters:
        return None
    value = parameters[TIMEOUT]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidRequest(f"parameters.{TIMEOUT}: expected microseconds > 0, got {echo(value)}")
    return Deadline.from_timeout(value / 1e6, timeout_parameter(value / 1e6))


def check_parameters(parameters: Mapping[str, Any], known: set[str]) -> None:
    unknown = sorted(set(parameters) - known - IGNORED - {TIMEOUT, EMPTY_FINAL})
    if unknown:
        names = ", ".join(sorted(known)) or "none"
        raise InvalidRequest(f"unknown request parameter(s) {', '.join(unknown)} (this model takes: {names})")
