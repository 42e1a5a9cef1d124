"""LibreTranslate's API on the HTTP server, for the tools that speak it (Weblate, crow-translate,
LibreTranslate's own clients).

- ``POST /translate``: ``q`` (a text or a list), ``source`` (a code or ``auto``), ``target``,
  ``format`` (``text`` / ``html`` / ``markdown``), ``alternatives`` n, ``api_key``, and the
  extension fields ``glossary`` (an object, term -> target term, ``""`` keeps the term; in a
  form, that object as JSON), ``alignments`` (true: per text, one ``"i-j ..."`` string per
  sentence) and ``attention`` (true: the alignments, and per text, per sentence, its words, its
  translation's words and the word-level cross-attention, as the web page draws it) and
  ``quality`` (true, or always on a server with ``--min-quality``: ``"quality": 0.93``, the text's
  score 0..1, and ``"lowQuality"``, true below the threshold; lists for a list ``q``); JSON or
  a form -> ``{"translatedText", "alternatives", "detectedLanguage"}``, and ``"pivot": "en"``
  when no model serves the pair directly and the texts went through that language (two models);
- ``POST /detect``: ``q`` -> ``[{"confidence", "language"}]`` (0..100) among the served
  languages, best first (403 when language detection is off);
- ``GET /languages``: ``[{"code", "name", "targets"}]`` of the served translation models (targets
  reached directly and through the pivot language);
- ``GET /frontend/settings``: the limits and the default pair, as LibreTranslate's page reads them,
  and the file formats ``/translate_file`` (``file_routes``) takes;
- ``GET /health``: ``{"status": "ok"}`` while the server takes work, which LibreTranslate's image's
  health check (``scripts/healthcheck.py``) and uptime monitors probe; 503 ``{"error"}`` while it starts or
  drains, so that a balancer stops sending to it;
- ``POST /suggest``: 403 "Suggestions are disabled on this server.", upstream's answer where
  suggestions are off (``/frontend/settings`` says ``suggestions: false``): nothing stores them here.

Replies are LibreTranslate's: ``translatedText`` is a string for a string ``q`` and a list for
a list; ``detectedLanguage`` only with ``source: auto`` (a list: each text's own, the texts of
each language translated by the model of its pair), ``alternatives`` only when asked for
(a list per text for a list ``q``). Errors are ``{"error": ...}``: 400 for a missing or bad
field, an unsupported language or format, an empty text or a limit, or no ``api_key`` where
the server needs one (upstream's "Please contact the server operator to get an API key"); 403
for a wrong ``api_key``; 429 when the translation queue is full. The service's typed errors
(a language or pair not served, a limit, a format) are worded as upstream words them. The
language pair picks the model (``service.routing``: the policy of every door; ``auto``: the
service detects the source); ``alternatives`` n is the service's ``distinct_alternatives``: a beam
of n + 1, the other distinct hypotheses, a text short of n decoded again with a wider beam
(``service.alternatives``). ``api_key``
is one of the server's bearer tokens, also accepted as the ``Authorization: Bearer`` header;
``/languages``, ``/frontend/settings`` and ``/health`` are open, as in LibreTranslate.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from aiohttp import web

from ...service.requests import Translated, TranslationRequest
from ...service.routing import language_name
from ...service.vocabulary import FILE_EXTENSIONS, FORMATS, TEXT, WordAlignment
from ...shared.calls import Call
from ...shared.errors import InvalidRequest, ServingError
from .. import params
from .messages import json_object, json_response, multipart_pairs, read_body, text_body_limit, url_encoded_pairs
from .table import RouteTable
from .upstream import ApiKeys, slowdown, upstream_words

FRONTEND_TIMEOUT_MS = 500  # LibreTranslate's default: how long its web page waits after a keystroke


class NotConfigured(ServingError):
    """A feature this server has switched off: LibreTranslate answers 403 ("... disabled on this server")."""

    status = "FAILED_PRECONDITION"
    http_status = 403


def _missing(name: str) -> InvalidRequest:
    return InvalidRequest(f"Invalid request: missing {name} parameter")


FIELDS = web.RequestKey("attnserve_libretranslate_fields", dict)


async def read_fields(request: web.Request, limit: int) -> dict[str, Any]:
    """The request's fields: a JSON object, or a form (url-encoded or multipart) together with the
    URL's query, query first, as upstream reads a form (Flask's ``request.values``): tools that
    POST ``/translate?q=...&source=en&target=de`` keep working. The first value of a repeated
    field counts, as aiohttp's. Parsed once: its ``api_key`` is read for the request rates
    before the handler reads the fields."""
    if (known := request.get(FIELDS)) is not None:
        return known
    if request.content_type == "application/json":
        body = await read_body(request, limit)
        fields = json_object(body, "Invalid JSON format", "Invalid JSON format: send a JSON object of fields")
    elif request.content_type == "application/x-www-form-urlencoded":
        fields = _first(list(request.query.items()) + url_encoded_pairs(await read_body(request, limit)))
    else:
        fields = _first(list(request.query.items()) + await multipart_pairs(request, limit))
    request[FIELDS] = fields
    return fields


def _first(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for key, value in pairs:
        fields.setdefault(key, value)
    return fields


def _string(fields: dict[str, Any], name: str, default: str = "") -> str:
    value = fields.get(name)
    if value is None or value == "":
        return default
    if not isinstance(value, str):
        raise InvalidRequest(f"Invalid request: {name} parameter must be a string, got {type(value).__name__}")
    return value


def _texts(fields: dict[str, Any]) -> tuple[list[str], bool]:
    """(texts, batch): ``q`` as a list of texts, and whether it was sent as a list."""
    q = fields.get("q")
    if not q:
        raise _missing("q")
    if isinstance(q, str):
        return [q], False
    if isinstance(q, list) and all(isinstance(t, str) for t in q):
        return q, True
    raise InvalidRequest("Invalid request: q parameter must be a string or a list of strings")


def _alternatives(fields: dict[str, Any]) -> int:
    value = fields.get("alternatives", 0)
    if value in (None, ""):
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InvalidRequest("Invalid request: alternatives parameter is not a number")
    try:
        number = float(value)
    except ValueError:
        raise InvalidRequest("Invalid request: alternatives parameter is not a number") from None
    if not math.isfinite(number) or number != int(number):
        raise InvalidRequest("Invalid request: alternatives parameter is not a number")
    return max(0, int(number))


def _flag(fields: dict[str, Any], name: str) -> bool:
    """An extension field that is on or off: JSON true / false, or a form's "true" / "false"."""
    value = fields.get(name, False)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("", "true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    raise InvalidRequest(f"Invalid request: {name} parameter must be true or false")


def _attention(a: WordAlignment) -> dict[str, Any]:
    """One sentence's word-level cross-attention: its words, its translation's words, and a row
    of weights over the source words for every target word (rows sum to 1)."""
    return {
        "source": [a.source[s:e] for s, e in a.source_spans],
        "target": [a.target[s:e] for s, e in a.target_spans],
        "weights": np.round(a.attention.astype(np.float64), 4).tolist(),
    }


def _reply(done: Translated, batch: bool, alternatives: int, attention: bool = False) -> dict[str, Any]:
    best = [r.hypotheses[0].text for r in done.results]
    reply: dict[str, Any] = {"translatedText": best if batch else best[0]}
    if done.detected:  # source auto: each text's own language
        detected = [{"confidence": d.confidence, "language": d.language} for d in done.detected]
        reply["detectedLanguage"] = detected if batch else detected[0]
    if alternatives:  # the service's: each text's distinct alternatives after its translation
        others = [[h.text for h in r.hypotheses[1:]] for r in done.results]
        reply["alternatives"] = others if batch else others[0]
    if done.pivot:
        reply["pivot"] = done.pivot
    if done.alignments is not None:  # an extension: per text, one "i-j ..." string per sentence
        aligned = [[a.pharaoh() for a in sentences] for sentences in done.alignments]
        reply["alignments"] = aligned if batch else aligned[0]
        if attention:  # an extension for the web page's attention map: per text, one map per sentence
            maps = [[_attention(a) for a in sentences] for sentences in done.alignments]
            reply["attention"] = maps if batch else maps[0]
    if done.quality is not None:  # an extension: per text, its quality score and whether it is below the threshold
        scores, low = [q.score for q in done.quality], [q.low for q in done.quality]
        reply |= {"quality": scores, "lowQuality": low} if batch else {"quality": scores[0], "lowQuality": low[0]}
    return reply


class LibreTranslateRoutes:
    """The routes' handlers; every one a codec of the translation service."""

    def __init__(self, table: RouteTable) -> None:
        self.doors = table.doors
        self.keys = ApiKeys(table.doors.auth)
        self.service = table.doors.translation
        self.settings = table.doors.settings

    async def translate(self, request: web.Request, call: Call) -> web.Response:
        fields = await read_fields(request, self.settings.max_message_bytes)
        self.keys.check_key(request, fields, call.method, call)
        texts, batch = _texts(fields)
        source, target = _string(fields, "source"), _string(fields, "target")
        if not source:
            raise _missing("source")
        if not target:
            raise _missing("target")
        alternatives = _alternatives(fields)
        attention = _flag(fields, "attention")
        wanted = TranslationRequest(
            call,
            tuple(texts),
            format=_string(fields, "format", TEXT),
            source_language=source,
            target_language=target,
            options=params.decode_options({}),
            distinct_alternatives=alternatives,
            glossary=params.glossary(fields),
            glossary_id=params.glossary_id(fields),
            alignments=_flag(fields, "alignments") or attention,
            quality=_flag(fields, "quality"),
        )
        with upstream_words():
            done = await self.service.translate(wanted)
        return json_response(_reply(done, batch, alternatives, attention), ensure_ascii=False)

    async def detect(self, request: web.Request, call: Call) -> web.Response:
        fields = await read_fields(request, self.settings.max_message_bytes)
        self.keys.check_key(request, fields, call.method)
        q = fields.get("q")
        if not q:
            raise _missing("q")
        if not isinstance(q, str):
            raise InvalidRequest("Invalid request: q parameter must be a string")
        if self.service.detector is None:
            raise NotConfigured("Language detection is disabled on this server (language_detection off)")
        with upstream_words():
            self.service.check_texts([q])
        found = await self.service.detect(q, self.service.languages.table.codes)
        return json_response([{"confidence": d.confidence, "language": d.language} for d in found], ensure_ascii=False)

    async def languages(self, request: web.Request, call: Call) -> web.Response:
        table = self.service.languages.table
        targets: dict[str, list[str]] = {c: [] for c in table.codes}
        for route in self.service.routes():  # direct and through the pivot language
            targets[route.source].append(route.target)
        return json_response([{"code": c, "name": language_name(c), "targets": targets[c]} for c in table.codes])

    async def health(self, request: web.Request, call: Call) -> web.Response:
        if self.doors.models.ready:
            return json_response({"status": "ok"})
        return json_response({"error": "the server is not taking work (starting or shutting down)"}, 503)

    async def suggest(self, request: web.Request, call: Call) -> web.Response:
        raise NotConfigured("Suggestions are disabled on this server.")

    async def frontend_settings(self, request: web.Request, call: Call) -> web.Response:
        table = self.service.languages.table
        source = table.sources[0] if table.sources else ""
        target = (table.targets_of(source) or [""])[0]
        keys = self.doors.auth.keys_on
        return json_response(
            {
                "charLimit": self.settings.max_text_chars,
                "frontendTimeout": FRONTEND_TIMEOUT_MS,
                "apiKeys": keys,
                "keyRequired": keys,
                "suggestions": False,
                "filesTranslation": True,
                "supportedFilesFormat": list(FILE_EXTENSIONS),
                # attnserve's own, for its web page: the text formats and whether "auto" detects
                "formats": list(FORMATS),
                "languageDetection": self.service.detector is not None,
                "language": {
                    "source": {"code": source, "name": language_name(source)},
                    "target": {"code": target, "name": language_name(target)},
                },
            }
        )


def add_routes(table: RouteTable) -> LibreTranslateRoutes:
    routes = LibreTranslateRoutes(table)
    # browser pages of any origin, as upstream
    route = functools.partial(table.route, open=True, cors=True, slowdown=slowdown)
    limit = table.doors.settings.max_message_bytes
    keyed = functools.partial(
        route,
        body_limit=text_body_limit(table.doors.settings),
        token=routes.keys.token(functools.partial(read_fields, limit=limit)),
    )
    translate, detect = "libretranslate.translate", "libretranslate.detect"
    keyed(
        "POST",
        "/translate",
        routes.translate,
        label=translate,
        inference=True,
        authenticate=routes.keys.header(translate),
    )
    keyed("POST", "/detect", routes.detect, label=detect, authenticate=routes.keys.header(detect))
    route("GET", "/languages", routes.languages, label="libretranslate.languages", metered=False)
    route(
        "GET",
        "/frontend/settings",
        routes.frontend_settings,
        label="libretranslate.frontend_settings",
        metered=False,
    )
    # a probe, as upstream's limiter exempts it: no token, no metrics, answered while draining
    route("GET", "/health", routes.health, label="libretranslate.health", tracked=False)
    route("POST", "/suggest", routes.suggest, label="libretranslate.suggest", metered=False)
    return routes
