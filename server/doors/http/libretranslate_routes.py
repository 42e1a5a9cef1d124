"""LibreTranslate's API on the HTTP server, for the tools that speak it (Weblate, crow-translate,
LibreTranslate's own clients).

- ``POST /translate``: ``q`` (a text or a list), ``source`` (a code or ``auto``), ``target``,
  ``format`` (``text`` / ``html``), ``alternatives`` n, ``api_key``; JSON or a form ->
  ``{"translatedText", "alternatives", "detectedLanguage"}``;
- ``POST /detect``: ``q`` -> ``[{"confidence", "language"}]``, best first (403 when language
  detection is off);
- ``GET /languages``: ``[{"code", "name", "targets"}]`` of the served translation models;
- ``GET /frontend/settings``: the limits and the default pair, as LibreTranslate's page reads them.

Replies are LibreTranslate's: ``translatedText`` is a string for a string ``q`` and a list for
a list; ``detectedLanguage`` only with ``source: auto``, ``alternatives`` only when asked for
(a list per text for a list ``q``). Errors are ``{"error": ...}``: 400 for a missing or bad
field, an unsupported language or format, an empty text or a limit, or no ``api_key`` where
the server needs one (upstream's "Please contact the server operator to get an API key"); 403
for a wrong ``api_key``; 429 when the translation queue is full. The language pair picks the model
(:mod:`.languages`); ``alternatives`` n decodes with a beam of n + 1 and returns the other
distinct hypotheses. ``api_key`` is one of the server's bearer tokens, also accepted as the
``Authorization: Bearer`` header; ``/languages`` and ``/frontend/settings`` are open, as in
LibreTranslate.
"""

from __future__ import annotations

import asyncio
import functools
import math
from typing import Any

from aiohttp import web

from attnserve.contract.kinds import TRANSLATION

from ... import engine_api, params
from ...calls import Call
from ...documents import FORMATS, TEXT
from ...errors import InvalidRequest, ServingError
from ...languages import LanguageRequest
from ...languages import apply as apply_languages
from .languages import ServedLanguages, language_name, make_detector
from .server import HttpServer, PayloadTooLarge, json_object, json_response, read_body

DETECT_CHARS = 2000  # enough for lingua to be sure; a 50,000-character text would take 0.1 s
FRONTEND_TIMEOUT_MS = 500  # LibreTranslate's default: how long its web page waits after a keystroke


class Forbidden(ServingError):
    """A bad api_key: LibreTranslate answers 403."""

    status = "PERMISSION_DENIED"
    http_status = 403


class KeyMissing(ServingError):
    """No api_key where the server needs one: LibreTranslate answers 400, naming whom to ask."""

    status = "UNAUTHENTICATED"
    http_status = 400


class NotConfigured(ServingError):
    """A feature this server has switched off: LibreTranslate answers 403 ("... disabled on this server")."""

    status = "FAILED_PRECONDITION"
    http_status = 403


def _missing(name: str) -> InvalidRequest:
    return InvalidRequest(f"Invalid request: missing {name} parameter")


async def read_fields(request: web.Request, limit: int) -> dict[str, Any]:
    """The request's fields: a JSON object, or a form (url-encoded or multipart)."""
    if request.content_type == "application/json":
        body = await read_body(request, limit)
        return json_object(body, "Invalid JSON format", "Invalid JSON format: send a JSON object of fields")
    try:
        form = await request.post()  # aiohttp applies client_max_size (--max-message-bytes) here too
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"request body over the limit of {limit} bytes (--max-message-bytes)") from None
    except (ValueError, AssertionError, UnicodeDecodeError) as exc:  # a malformed form or multipart body
        raise InvalidRequest(f"Invalid request: the form does not parse: {exc}") from None
    return {key: form.get(key) for key in form}


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


def _distinct(texts: list[str], best: str) -> list[str]:
    """LibreTranslate's alternatives: other hypotheses, each once, none equal to the translation."""
    return [t for t in dict.fromkeys(texts) if t != best]


def add_routes(http: HttpServer) -> None:
    app = http.app
    settings = app.settings
    languages = ServedLanguages(app.registry)
    detector = make_detector(settings.language_detection)

    def check_key(request: web.Request, fields: dict[str, Any], label: str) -> None:
        checker = app.token_checker
        if checker is None:
            return
        api_key = fields.get("api_key")
        header = request.headers.get("Authorization")
        if isinstance(api_key, str) and api_key and checker.check(f"Bearer {api_key}"):
            return
        if not api_key and header and checker.check(header):
            return
        app.metrics.unauthenticated.labels(label).inc()
        if not api_key and not header:  # upstream's wording and status (400) for a request without a key
            raise KeyMissing("Please contact the server operator to get an API key")
        raise Forbidden("Invalid API key")

    async def detect(text: str, codes: list[str]) -> list[dict[str, Any]]:
        """lingua on the text's first DETECT_CHARS characters, off the event loop (~2 ms per 1,000)."""
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(app.preprocess_pool, detector.detect, text[:DETECT_CHARS], codes)
        return [{"confidence": d.confidence, "language": d.language} for d in found]

    async def resolve_auto(texts: list[str], target: str) -> dict[str, Any]:
        """``source: auto`` -> LibreTranslate's detectedLanguage."""
        table = languages.table
        candidates = table.sources_to(target)
        if detector is not None and len(candidates) > 1:
            found = await detect("\n".join(texts), candidates)
            if found:
                return found[0]
        if len(candidates) == 1:  # the only language the target is reached from: not a detection
            return {"confidence": 100.0, "language": candidates[0]}
        raise InvalidRequest(
            f"Invalid request: source auto needs language detection, which is off on this server; "
            f"name the source language: one of {', '.join(candidates) or 'none'}"
        )

    def check_limits(texts: list[str]) -> None:
        if len(texts) > settings.max_texts_per_request:
            raise InvalidRequest(
                f"Invalid request: request ({len(texts)}) exceeds text limit ({settings.max_texts_per_request})"
            )
        for text in texts:
            if len(text) > settings.max_text_chars:
                raise InvalidRequest(
                    f"Invalid request: request ({len(text)}) exceeds text limit ({settings.max_text_chars})"
                )
        total = sum(map(len, texts))
        if total > settings.max_request_chars:
            raise InvalidRequest(
                f"Invalid request: request ({total}) exceeds character limit ({settings.max_request_chars})"
            )

    def decoding(alternatives: int):
        values: dict[str, Any] = {}
        if alternatives:
            if alternatives + 1 > settings.max_beam_size:
                raise InvalidRequest(f"Invalid request: alternatives parameter must be <= {settings.max_beam_size - 1}")
            values.update(beam_size=alternatives + 1, num_hypotheses=alternatives + 1)
        return params.decode_options(values)

    async def translate(request: web.Request, call: Call) -> web.Response:
        fields = await read_fields(request, settings.max_message_bytes)
        check_key(request, fields, call.method)
        texts, batch = _texts(fields)
        source, target = _string(fields, "source"), _string(fields, "target")
        if not source:
            raise _missing("source")
        if not target:
            raise _missing("target")
        alternatives = _alternatives(fields)
        check_limits(texts)
        table = languages.table
        if source != "auto" and source not in table.codes:
            raise InvalidRequest(f"{source} is not supported")
        if target not in table.codes:
            raise InvalidRequest(f"{target} is not supported")
        if not table.sources_to(target):
            raise InvalidRequest(f"{language_name(target)} ({target}) is not available as a target language")
        detected = await resolve_auto(texts, target) if source == "auto" else None
        source_code = detected["language"] if detected else source
        text_format = _string(fields, "format", TEXT)
        if text_format not in FORMATS:
            raise InvalidRequest(f"{text_format} format is not supported")
        model_name = table.model_for(source_code, target)
        if model_name is None:
            raise InvalidRequest(
                f"{language_name(target)} ({target}) is not available as a target language from "
                f"{language_name(source_code)} ({source_code})"
            )
        options = decoding(alternatives)
        with app.registry.use(model_name, TRANSLATION) as model:
            call.model = model.name
            if model.manifest.languages is not None:  # its language tokens (M2M100, NLLB, opus-mt >>xx<<)
                wanted = LanguageRequest(source_code, target)
                options, _, _ = apply_languages(model.manifest, model.engine.tokenizer, options, wanted)
            results = await engine_api.translate(model.engine, texts, options, text_format)
            call.items, call.queue_s = len(results), max(r.queue_ms for r in results) / 1e3
        for r in results:
            app.metrics.queue_time.labels(model.name).observe(r.queue_ms / 1e3)
        best = [r.hypotheses[0].text for r in results]
        others = [_distinct([h.text for h in r.hypotheses[1:]], b) for r, b in zip(results, best, strict=True)]
        reply: dict[str, Any] = {"translatedText": best if batch else best[0]}
        if detected is not None:
            reply["detectedLanguage"] = [detected] * len(texts) if batch else detected
        if alternatives:
            reply["alternatives"] = others if batch else others[0]
        return json_response(reply, ensure_ascii=False)

    async def detect_route(request: web.Request, call: Call) -> web.Response:
        fields = await read_fields(request, settings.max_message_bytes)
        check_key(request, fields, call.method)
        q = fields.get("q")
        if not q:
            raise _missing("q")
        if not isinstance(q, str):
            raise InvalidRequest("Invalid request: q parameter must be a string")
        if detector is None:
            raise NotConfigured(
                "Language detection is disabled on this server (language_detection off, or lingua not installed: "
                "pip install 'attnserve[detect]')"
            )
        check_limits([q])
        return json_response(await detect(q, languages.table.codes), ensure_ascii=False)

    async def languages_route(request: web.Request, call: Call) -> web.Response:
        table = languages.table
        return json_response(
            [{"code": c, "name": language_name(c), "targets": table.targets_of(c)} for c in table.codes]
        )

    async def frontend_settings(request: web.Request, call: Call) -> web.Response:
        table = languages.table
        source = table.sources[0] if table.sources else ""
        target = (table.targets_of(source) or [""])[0]
        keys = app.token_checker is not None
        return json_response(
            {
                "charLimit": settings.max_text_chars,
                "frontendTimeout": FRONTEND_TIMEOUT_MS,
                "apiKeys": keys,
                "keyRequired": keys,
                "suggestions": False,
                "filesTranslation": False,
                "supportedFilesFormat": [],
                "language": {
                    "source": {"code": source, "name": language_name(source)},
                    "target": {"code": target, "name": language_name(target)},
                },
            }
        )

    route = functools.partial(http.route, open=True, cors=True)  # browser pages of any origin, as upstream
    route("POST", "/translate", translate, label="libretranslate.translate", inference=True)
    route("POST", "/detect", detect_route, label="libretranslate.detect")
    route("GET", "/languages", languages_route, label="libretranslate.languages")
    route("GET", "/frontend/settings", frontend_settings, label="libretranslate.frontend_settings")
