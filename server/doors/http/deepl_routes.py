"""DeepL's v2 API on the HTTP server, for the tools that speak it with a configurable server
URL (DeepL's official client libraries' ``server_url``, browser extensions, subtitle and CAT
tools): one more codec over the translation service, the stored glossaries and the file jobs.

- ``POST /v2/translate``: ``text`` (repeated), ``target_lang`` (``DE``, ``EN-US``, ``PT-BR``,
  ``ZH-HANT``, ...: a variant goes to the model made for it, such as an Argos ``pb`` or ``zt``,
  else to its language's plain one, never to another variant: ``EN-US`` -> ``en``, ``ZH-HANT``
  never -> a simplified ``zh``; ``service.routing``), ``source_lang`` (``EN``, ``PT``, ``ZH``;
  absent: detected),
  ``tag_handling`` (``html`` or ``xml``: read by the html reader, tags kept; xml's tag names
  are case-sensitive and its outline, not html's names, says which tags end a sentence) with
  DeepL's ``ignore_tags``, ``splitting_tags``, ``non_splitting_tags`` (comma-separated, or a
  JSON list) and ``outline_detection`` (xml): the request's ``MarkupRules``,
  ``glossary_id``, ``split_sentences`` (``1``: a text's newlines end sentences; ``nonewlines``:
  they do not, a sentence wrapped over lines is read as one and its breaks go back into the
  translation; ``0``: a text, or html's block, is one sentence), ``preserve_formatting`` (checked;
  formatting is always kept), ``formality`` (no target has it: ``more`` and ``less``
  are DeepL's 400 for such a target, ``prefer_more`` / ``prefer_less`` its default), ``model_type``
  (checked: a pair has one model); every other field (``context``, ``show_billed_characters``,
  ...) is accepted and ignored, as DeepL documents. JSON or a form ->
  ``{"translations": [{"detected_source_language", "text", "billed_characters"}]}``;
- ``GET /v2/languages`` (``type`` source or target: a language's code for the sources, each served
  variant's for the targets, ``EN-GB`` / ``EN-US`` / ``PT-BR`` / ``PT-PT`` / ``ZH-HANS`` for a plain
  ``en`` / ``pt`` / ``zh``), ``GET /v2/usage`` (the key's characters translated this calendar month,
  UTC, through any door, and its quota: ``service.usage``),
  ``GET /v2/glossary-language-pairs``, ``/v2/glossaries`` (``deepl_glossary_routes``);
- ``POST /v2/document`` (a multipart ``file``, ``target_lang``, ``source_lang``, ``glossary_id``,
  ``formality`` as for a text) ->
  ``{"document_id", "document_key"}``: a file job; ``POST /v2/document/{id}`` -> its ``status``
  (queued, translating, done, error), ``seconds_remaining``, ``billed_characters`` once done (the
  characters of text translated); ``.../result`` -> the file, once (503 until done, 400 if failed).

``Authorization: DeepL-Auth-Key KEY`` (or ``Bearer KEY``, or the query's ``auth_key``): KEY is
one of the server's tokens (403 otherwise; any key on a server without tokens). Errors are
DeepL's: ``{"message": ...}`` with 400, 403, 404 (an unrouted path under ``/v2/`` or ``/v3/``
too, but for KServe's: ``RouteTable.refuse``), 405, 413 (a body over its limit), 429 (the server
is busy), 456 (a per-key bound: the monthly characters, glossaries or file jobs), 503 (a document
not ready), 504.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
from collections.abc import Iterator
from typing import Any

from aiohttp import web
from multidict import MultiDict

from ...service.file_jobs import JobNotFound, JobRequest
from ...service.job_records import remaining_s
from ...service.requests import AUTO, TranslationRequest
from ...service.routing import LanguageNotServed
from ...service.vocabulary import HTML, TEXT
from ...shared.calls import Call
from ...shared.errors import InvalidRequest, MonthlyQuotaExceeded, Overloaded, RateLimited, ServingError, echo
from .deepl_languages import sources, targets, upper
from .deepl_options import (
    FLAGS,
    check_formality,
    check_model_type,
    check_output_format,
    choice,
    glossary_id,
    lang,
    markup_rules,
)
from .forms import FORM_SLACK, read_form, sent_whole
from .messages import json_object, multipart_pairs, read_body, text_body_limit, url_encoded_pairs
from .table import RouteTable

LABEL = "deepl"
SCHEMES = ("deepl-auth-key", "bearer")  # DeepL's, and the server's own for tools that send that
STATUS = {
    "INVALID_ARGUMENT": 400,
    "UNAUTHENTICATED": 403,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 503,  # a document's result before it is done: DeepL's "not ready"
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
QUOTA = 456  # DeepL's "quota exceeded": a bound of the caller's key
TAGS = {"html": HTML, "xml": HTML}  # XML's tags are kept and its text translated by the html reader (MarkupRules.xml)
NO_QUOTA = 10**12  # /v2/usage's limit of a key without a quota: DeepL's clients read a limit > 0 as valid
JOB_STATUS = {"queued": "queued", "running": "translating", "done": "done", "failed": "error", "cancelled": "error"}


class AuthorizationFailed(ServingError):
    status = "PERMISSION_DENIED"
    http_status = 403


class DocumentNotReady(ServingError):
    status, http_status = "UNAVAILABLE", 503


class QuotaExceeded(ServingError):
    status = "RESOURCE_EXHAUSTED"
    http_status = QUOTA


def deepl_error(status: str, message: str, http_status: int | None = None) -> web.Response:
    """A failed call in DeepL's shape: ``{"message": ...}`` and DeepL's status codes."""
    return web.json_response({"message": message}, status=http_status or STATUS.get(status, 500))


def token(request: web.Request) -> str | None:
    """The key of ``Authorization: DeepL-Auth-Key KEY`` (or ``Bearer KEY``), else of the query's
    ``auth_key`` (DeepL's older way, which tools still send)."""
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() in SCHEMES:
        return key.strip() or None
    return request.query.get("auth_key") or None


async def presented(request: web.Request) -> str | None:
    """The key a request presents (:func:`token`), for its request rates."""
    return token(request)


@contextlib.contextmanager
def quota_words() -> Iterator[None]:
    """A key past its monthly characters in DeepL's words and status (456 "Quota exceeded")."""
    try:
        yield
    except MonthlyQuotaExceeded as exc:
        raise QuotaExceeded(f"Quota exceeded: {exc.detail}") from None


def too_many(refused: RateLimited) -> tuple[int, str]:
    """A request past its client's request rate or from a banned client, in DeepL's status and
    words (429 "Too many requests": its clients back off and retry)."""
    return 429, f"Too many requests: {refused.detail}"


def keyed_route(routes: DeepLRoutes) -> dict[str, Any]:
    """The options of every DeepL route: open to the head's DeepL key check, DeepL's error shape,
    the key its rates count by and its words for a refusal by them."""
    return {
        "open": True,
        "authenticate": routes.authenticate,
        "errors": deepl_error,
        "token": presented,
        "slowdown": too_many,
    }


def document_key(document_id: str) -> str:
    """The ``document_key`` DeepL's clients send back with a document's id. The job is found only
    with the api key that submitted it; this key only checks that the pair belongs together."""
    return hashlib.sha256(f"attnserve-deepl-document:{document_id}".encode()).hexdigest()[:32]


async def read_fields(request: web.Request, limit: int) -> MultiDict:
    """A JSON object (a list value as repeated fields) or a form, url-encoded or multipart."""
    if request.content_type == "application/json":
        doc = json_object(await read_body(request, limit), "Invalid JSON", "send a JSON object of fields", {})
        fields: MultiDict = MultiDict()
        for name, value in doc.items():
            for item in value if isinstance(value, list) else [value]:
                fields.add(name, item)
        return fields
    if request.content_type == "application/x-www-form-urlencoded" or not request.body_exists:
        body = await read_body(request, limit) if request.body_exists else b""
        return MultiDict(list(request.query.items()) + url_encoded_pairs(body))
    return MultiDict(await multipart_pairs(request, limit))


class DeepLRoutes:
    def __init__(self, table: RouteTable) -> None:
        self.doors, self.settings = table.doors, table.doors.settings
        self.service = table.doors.translation

    def authenticate(self, request: web.Request) -> None:
        """On the head: a DeepL-Auth-Key the server knows (any, on a server without tokens)."""
        auth, key = self.doors.auth, token(request)
        if auth.keys_on and (key is None or not auth.allows(f"Bearer {key}")):
            auth.refused(LABEL, in_call=True)
            raise AuthorizationFailed("Authorization failure: send 'Authorization: DeepL-Auth-Key <key>'")

    def caller(self, request: web.Request, call: Call) -> str | None:
        """The caller's key (the jobs' api key), its digest set on ``call`` (its glossaries)."""
        key = token(request) if self.doors.auth.keys_on else None
        call.key = self.doors.auth.caller_key(f"Bearer {key}" if key else None)
        return key

    async def translate(self, request: web.Request, call: Call) -> web.Response:
        self.caller(request, call)
        fields = await read_fields(request, text_body_limit(self.settings))
        texts = fields.getall("text", [])
        if not texts:
            raise InvalidRequest("Parameter 'text' not specified.")
        if not all(isinstance(t, str) for t in texts):
            raise InvalidRequest("Parameter 'text' must be a string or a list of strings")
        target = lang(fields, "target_lang")
        source = lang(fields, "source_lang") if fields.get("source_lang") else AUTO
        tags = fields.get("tag_handling") or ""
        if tags and tags not in TAGS:
            raise InvalidRequest(f"Value for 'tag_handling' not supported: {echo(tags)}; expected html or xml")
        choice(fields, "preserve_formatting", FLAGS, "0")
        check_formality(fields)
        check_model_type(fields)
        wanted = TranslationRequest(
            call,
            tuple(texts),
            format=TAGS.get(tags, TEXT),
            markup=markup_rules(fields, tags),
            source_language=source,
            target_language=target,
            glossary_id=glossary_id(fields),
        )
        try:
            with quota_words():
                done = await self.service.translate(wanted)
        except LanguageNotServed as exc:
            raise not_supported(exc, source) from None
        detected = [d.language for d in done.detected] if done.detected else [done.source_language] * len(texts)
        translations = [
            {"detected_source_language": upper(code), "text": r.hypotheses[0].text, "billed_characters": len(text)}
            for code, r, text in zip(detected, done.results, texts, strict=True)
        ]
        return web.json_response({"translations": translations}, dumps=_dumps)

    async def languages(self, request: web.Request, call: Call) -> web.Response:
        fields = await read_fields(request, self.settings.max_message_bytes)
        kind = choice(fields, "type", ("source", "target"), "source")
        codes = {getattr(r, kind) for r in self.service.routes()}
        listed = dict(sorted(targets(codes) if kind == "target" else sources(codes)))
        extra = {"supports_formality": False} if kind == "target" else {}
        return web.json_response([{"language": code, "name": name} | extra for code, name in listed.items()])

    async def usage(self, request: web.Request, call: Call) -> web.Response:
        """The key's characters this month and its quota. The route is counted against no request
        rate, so its call names no client: it is found here as the tracker finds a metered call's."""
        auth = self.doors.auth
        client = auth.caller(token(request) if auth.keys_on else None, request.remote).client
        count, limit = await self.service.usage.report(client)
        return web.json_response({"character_count": count, "character_limit": limit or NO_QUOTA})

    async def upload(self, request: web.Request, call: Call) -> web.Response:
        key = self.caller(request, call)
        fields, filename, content = await read_form(request)
        if not filename and not content:
            raise InvalidRequest("Parameter 'file' not specified.")
        form = MultiDict(fields)
        target = lang(form, "target_lang")
        source = lang(form, "source_lang") if form.get("source_lang") else AUTO
        name = fields.get("filename") or filename
        check_output_format(form, name)
        check_formality(form)
        wanted = JobRequest(key, name, content, source, target, "", glossary_id(form), client=call.client)
        try:
            with quota_words():
                job = await self.doors.jobs.submit(wanted)
        except LanguageNotServed as exc:
            raise not_supported(exc, source) from None
        except Overloaded as exc:
            if "per api key" in str(exc):
                raise QuotaExceeded(str(exc)) from None
            raise
        return web.json_response({"document_id": job.id, "document_key": document_key(job.id)})

    async def _job(self, request: web.Request, call: Call):
        key = self.caller(request, call)
        fields = await read_fields(request, self.settings.max_message_bytes)
        document_id = request.match_info["id"]
        sent = fields.get("document_key")
        if not isinstance(sent, str) or not sent:
            raise InvalidRequest("Parameter 'document_key' not specified.")
        if not hmac.compare_digest(sent.encode(), document_key(document_id).encode()):  # DeepL's 404, as an unknown id
            raise JobNotFound("Document not found: no document has this document_id and document_key")
        return key, document_id

    async def status(self, request: web.Request, call: Call) -> web.Response:
        job = await self.doors.jobs.get(*await self._job(request, call))
        reply: dict[str, Any] = {"document_id": job.id, "status": JOB_STATUS[job.status]}
        if job.status == "running":
            remaining = remaining_s(job)
            if remaining is not None:
                reply["seconds_remaining"] = round(remaining)
        if job.status == "done":
            reply["billed_characters"] = job.characters  # of text translated, as TranslateFile counts them
        if job.status in ("failed", "cancelled"):
            reply["error_message"] = job.error or job.status
        return web.json_response(reply)

    async def result(self, request: web.Request, call: Call) -> web.StreamResponse:
        """The translated document, once (then 404, as DeepL); 503 until done, DeepL's "not ready"."""
        key, document_id = await self._job(request, call)
        job = await self.doors.jobs.get(key, document_id)
        if job.status != "done":
            wait = DocumentNotReady(f"Document not ready: it is {JOB_STATUS[job.status]}; retry when it is done")
            raise InvalidRequest(f"Document translation failed: {job.error or job.status}") if job.finished else wait
        job, path = await self.doors.jobs.result(key, document_id)
        response = await sent_whole(request, path, job.media_type, job.filename)  # a broken send keeps it
        await self.doors.jobs.delete(key, document_id)
        return response


def not_supported(exc: LanguageNotServed, source: str) -> InvalidRequest:
    """A pair no model serves, as DeepL words it: the field named is the language no model knows."""
    field = "source_lang" if exc.code and exc.code == source else "target_lang"
    return InvalidRequest(f"Value for '{field}' not supported: {exc}")


def _dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False)


def add_routes(table: RouteTable) -> None:
    routes = DeepLRoutes(table)
    settings = table.doors.settings
    keyed = functools.partial(table.route, **keyed_route(routes))
    text_limit, file_limit = text_body_limit(settings), 2 * settings.max_file_bytes + FORM_SLACK
    keyed("POST", "/v2/translate", routes.translate, label=f"{LABEL}.translate", inference=True, body_limit=text_limit)
    for method in ("GET", "POST"):  # DeepL serves both
        keyed(method, "/v2/languages", routes.languages, label=f"{LABEL}.languages", metered=False)
        keyed(method, "/v2/usage", routes.usage, label=f"{LABEL}.usage", metered=False)
    keyed("POST", "/v2/document", routes.upload, label=f"{LABEL}.document", body_limit=file_limit,
          body_setting="2 x --max-file-bytes + 256 KiB")  # fmt: skip
    keyed("POST", "/v2/document/{id}", routes.status, label=f"{LABEL}.document_status")
    keyed("POST", "/v2/document/{id}/result", routes.result, label=f"{LABEL}.document_result")
    for prefix in ("/v2/", "/v3/"):  # an unknown DeepL path answers in DeepL's shape (KServe's own are longer)
        table.refuse(prefix, deepl_error)
