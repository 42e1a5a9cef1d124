"""Triton's generate extension on the HTTP server: one text in, its translation out, whole or streamed.

- ``POST /v2/models/{model}[/versions/{version}]/generate``: ``{"text_input", "parameters"}``
  -> ``{"model_name", "model_version", "text_output"}``;
- ``POST /v2/models/{model}[/versions/{version}]/generate_stream``: ``text/event-stream``, one
  ``data: {...}`` event per generated piece whose ``text_output`` is the text delta (the last
  one, at the end of the translation, may be empty).

``parameters`` are the decoding options every protocol takes (``params.DECODING_PARAMETERS``),
the languages (``source_language``, ``target_language``, ``target_prefix``: M2M100 / NLLB
choose their language tokens from them), ``format`` (``text``, ``html`` or ``markdown``: the
text is a document, see ``service.documents``), ``return_alignments`` (``generate`` only: the
reply's ``alignments`` holds one ``"i-j ..."`` string per sentence), ``return_quality``
(``generate`` only, and on a server with ``--min-quality``: the reply's ``quality`` is the text's
score 0..1, ``quality_sentences`` its sentences', ``low_quality`` true below the threshold) and Triton's ``timeout``
(microseconds: the request's deadline). The deltas of a
stream concatenate to the text that ``generate`` returns for the same request. An error
before the first piece is answered as on every route, ``{"error": ...}`` with its HTTP
status (400, 404, 429, ...); one after it, when the status line has gone, is a last
``data: {"error": ...}`` event, as Triton sends it. A client that hangs up mid-stream gets
its handler cancelled by aiohttp, which closes the engine's stream: the decoder row is
freed at the next step.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from ...service.requests import MODEL_VERSION, TranslationRequest
from ...service.vocabulary import StreamEvent
from ...shared.calls import Call
from ...shared.errors import InvalidRequest, ServingError
from .. import params
from ..params import check_parameters, request_deadline
from .messages import REQUEST_ID, json_object, json_response, read_body, text_body_limit
from .table import RouteTable

TEXT_INPUT, TEXT_OUTPUT, PARAMETERS = "text_input", "text_output", "parameters"
log = logging.getLogger(__name__)
VERSIONED = ("/v2/models/{model}", "/v2/models/{model}/versions/{version}")


def parse_generate(body: bytes) -> tuple[str, dict[str, Any]]:
    """The body of a generate request -> (text, parameters); InvalidRequest names what is wrong."""
    shape = f'{{"{TEXT_INPUT}": "...", "{PARAMETERS}": {{}}}}'
    doc = json_object(body, "request body is not valid JSON", f"the request body must be a JSON object: {shape}")
    unknown = sorted(set(doc) - {TEXT_INPUT, PARAMETERS})
    if unknown:
        raise InvalidRequest(f"unknown input(s) {', '.join(unknown)}: this model takes {TEXT_INPUT} and {PARAMETERS}")
    if TEXT_INPUT not in doc:
        raise InvalidRequest(f"{TEXT_INPUT} is missing: send the text to translate")
    text = doc[TEXT_INPUT]
    if isinstance(text, list) and len(text) == 1:  # a batch of one, as some Triton clients send it
        text = text[0]
    if not isinstance(text, str):
        raise InvalidRequest(f"{TEXT_INPUT}: expected a string, got {type(text).__name__}")
    parameters = doc.get(PARAMETERS) or {}
    if not isinstance(parameters, dict):
        raise InvalidRequest(f"{PARAMETERS}: expected a JSON object of decoding options, got {parameters!r:.60}")
    check_parameters(
        parameters,
        {
            *params.DECODING_PARAMETERS,
            params.FORMAT,
            *params.LANGUAGE_PARAMETERS,
            params.GLOSSARY,
            params.GLOSSARY_ID,
            params.ALIGNMENTS,
        }
        | {params.QUALITY},
    )
    return text, parameters


def decode_options(parameters: dict[str, Any]):
    decoding = {k: v for k, v in parameters.items() if k in params.DECODING_PARAMETERS}
    options = params.decode_options(decoding, f"{PARAMETERS}.")
    if options.num_hypotheses > 1:
        raise InvalidRequest(
            f"{PARAMETERS}.num_hypotheses: generate returns one {TEXT_OUTPUT}; ask /infer for several hypotheses"
        )
    return options


def _event(doc: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(doc, ensure_ascii=False).encode() + b"\n\n"


def add_routes(table: RouteTable) -> None:
    doors = table.doors

    async def request_of(request: web.Request, call: Call) -> TranslationRequest:
        text, parameters = parse_generate(await read_body(request, doors.settings.max_message_bytes))
        return TranslationRequest(
            call,
            (text,),
            request.match_info["model"],
            request.match_info.get("version", ""),
            format=params.text_format(parameters, f"{PARAMETERS}."),
            options=decode_options(parameters),
            deadline=request_deadline(parameters),
            glossary=params.glossary(parameters, f"{PARAMETERS}."),
            glossary_id=params.glossary_id(parameters, f"{PARAMETERS}."),
            alignments=params.alignments(parameters, f"{PARAMETERS}."),
            quality=params.quality(parameters, f"{PARAMETERS}."),
            **params.languages(parameters, f"{PARAMETERS}."),
        )

    async def generate(request: web.Request, call: Call) -> web.Response:
        done = await doors.translation.translate(await request_of(request, call))
        reply = {
            "model_name": done.model,
            "model_version": MODEL_VERSION,
            TEXT_OUTPUT: done.results[0].hypotheses[0].text,
        }
        if done.alignments is not None:  # one "i-j ..." string per sentence
            reply["alignments"] = [a.pharaoh() for a in done.alignments[0]]
        if done.quality is not None:
            quality = done.quality[0]
            reply |= {"quality": quality.score, "quality_sentences": list(quality.sentences)}
            reply["low_quality"] = quality.low
        return json_response(reply, ensure_ascii=False)

    async def generate_stream(request: web.Request, call: Call) -> web.StreamResponse:
        events = doors.translation.stream(await request_of(request, call))
        try:
            return await _serve_stream(request, call, _pieces(events))
        finally:
            await events.aclose()  # a cancelled or failed stream frees its row at the next step

    limit = text_body_limit(doors.settings)  # a text and its parameters: a larger body is refused unread
    for base in VERSIONED:
        label = "triton.http.Generate"
        table.route("POST", f"{base}/generate", generate, label=label, inference=True, body_limit=limit)
        table.route(
            "POST",
            f"{base}/generate_stream",
            generate_stream,
            label="triton.http.GenerateStream",
            inference=True,
            body_limit=limit,
        )


async def _pieces(events: AsyncIterator[StreamEvent]) -> AsyncIterator[tuple[str, bool]]:
    """(delta, final) of each generated piece; pieces still incomplete ("" deltas) are skipped."""
    async for event in events:
        final = event.finish_reason is not None
        if event.delta or final:
            yield event.delta, final
        if final:
            return


async def _serve_stream(
    request: web.Request, call: Call, pieces: AsyncIterator[tuple[str, bool]]
) -> web.StreamResponse:
    """Send the pieces as server-sent events; the first is awaited before the status line, so a
    request refused by the engine (queue full: 429) still gets its own HTTP status."""
    first = await anext(pieces, None)
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", REQUEST_ID: call.request_id}
    )
    await response.prepare(request)
    try:
        await _send(response, call, first, pieces)
        await response.write_eof()
    except ConnectionResetError:  # the client went away: between two pieces, or before the end of the stream
        call.status = "CANCELLED"
    return response


async def _send(
    response: web.StreamResponse, call: Call, first: tuple[str, bool] | None, pieces: AsyncIterator[tuple[str, bool]]
) -> None:
    """Write ``first`` and the other pieces as events; an error after the status line is the last
    event. A client that hangs up raises ConnectionResetError, whatever was being written."""
    model_name, piece = call.model, first
    try:
        while piece is not None:
            delta, final = piece
            await response.write(_event({"model_name": model_name, "model_version": MODEL_VERSION, TEXT_OUTPUT: delta}))
            if final:
                break
            piece = await anext(pieces, None)
    except ServingError as exc:  # the status line has gone: the error is the last event
        call.status = exc.status
        await response.write(_event({"error": str(exc)}))
    except ConnectionResetError:
        raise
    except Exception as exc:  # noqa: BLE001 - never a traceback, and no second status line
        call.status = "INTERNAL"
        log.exception("request %s: generate_stream on model %s failed", call.request_id, model_name)
        await response.write(
            _event({"error": f"internal error: {type(exc).__name__}: {exc} (request id {call.request_id})"})
        )
