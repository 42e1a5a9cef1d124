"""attnserve.v1's messages <-> the service's requests and results (the v1 door's codec).

A ``TranslateRequest`` becomes a ``TranslationRequest``, a ``ClassifyRequest`` a
``ClassificationRequest``; what is checked here is the messages' own shape (enum values,
finite numbers, which oneof is set); the rest is the service's."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from attnserve.contract.kinds import IMAGE_CLASSIFICATION, TRANSLATION
from attnserve.protos.attnserve.v1 import inference_pb2 as pb

from ..service.models import FailedModel, Served
from ..service.requests import ClassificationRequest, Deadline, Translated, TranslationRequest
from ..service.routing import Route
from ..service.vocabulary import (
    DecodeOptions,
    EncodedImage,
    Glossary,
    Hypothesis,
    ImageInput,
    ImageResult,
    RawTensor,
    StreamEvent,
    WordAlignment,
)
from ..shared.calls import Call
from ..shared.config import Settings
from ..shared.errors import InvalidRequest
from . import params

FINISH_REASONS = {"eos": pb.FINISH_REASON_EOS, "length": pb.FINISH_REASON_LENGTH}
KINDS = {TRANSLATION: pb.MODEL_KIND_TRANSLATION, IMAGE_CLASSIFICATION: pb.MODEL_KIND_IMAGE_CLASSIFICATION}
DATA_TYPES = {pb.DATA_TYPE_UNSPECIFIED: "FP32", pb.DATA_TYPE_FP32: "FP32", pb.DATA_TYPE_FP16: "FP16"}
DATA_TYPES[pb.DATA_TYPE_UINT8] = "UINT8"


def _enum_check(enum: Any, value: int, field_name: str) -> None:
    if value not in enum.values():
        names = ", ".join(enum.keys())
        raise InvalidRequest(f"{field_name}: unknown value {value} (one of {names})")


def _finite(value: float, field_name: str) -> float:
    if not math.isfinite(value):
        raise InvalidRequest(f"{field_name}: must be a finite number, got {value}")
    return float(value)


# ---------------------------------------------------------------- translation


def texts(request: pb.TranslateRequest, *, single: bool = False) -> list[str]:
    items = list(request.texts)
    if not items:
        raise InvalidRequest("texts is empty: send at least one text")
    if single and len(items) != 1:
        raise InvalidRequest(f"TranslateStream takes exactly one text, got {len(items)}")
    return items


FORMAT_NAMES = {pb.TEXT_FORMAT_TEXT: "text", pb.TEXT_FORMAT_HTML: "html", pb.TEXT_FORMAT_MARKDOWN: "markdown"}


def text_format(request: pb.TranslateRequest) -> str:
    """``TranslateRequest.format`` -> the documents' format name ("text", "html" or "markdown")."""
    _enum_check(pb.TextFormat, request.format, "format")
    return FORMAT_NAMES[request.format]


MODE_NAMES = {
    pb.DECODING_MODE_GREEDY: "greedy",
    pb.DECODING_MODE_BEAM_SEARCH: "beam_search",
    pb.DECODING_MODE_SAMPLING: "sampling",
}


def decode_options(options: pb.DecodingOptions) -> DecodeOptions:
    """``DecodingOptions`` -> the engine's ``DecodeOptions`` (checked by :func:`params.decode_options`)."""
    _enum_check(pb.DecodingMode, options.mode, "options.mode")
    values: dict[str, Any] = {
        "beam_size": options.beam_size,
        "num_hypotheses": options.num_hypotheses,
        "max_new_tokens": options.max_new_tokens,
        "temperature": _finite(options.temperature, "options.temperature"),
        "top_k": options.top_k,
        "return_scores": options.return_scores,
    }
    if options.mode in MODE_NAMES:
        values["mode"] = MODE_NAMES[options.mode]
    # proto3 optionals: unset = the default
    if options.HasField("length_penalty"):
        values["length_penalty"] = _finite(options.length_penalty, "options.length_penalty")
    if options.HasField("top_p"):
        values["top_p"] = _finite(options.top_p, "options.top_p")
    if options.HasField("seed"):
        values["seed"] = options.seed
    return params.decode_options(values, "options.")


def translation_request(
    request: pb.TranslateRequest, call: Call, deadline: Deadline | None = None, *, single: bool = False
) -> TranslationRequest:
    options = request.options
    return TranslationRequest(
        call,
        tuple(texts(request, single=single)),
        request.model,
        format=text_format(request),
        source_language=options.source_language,
        target_language=options.target_language,
        target_prefix=options.target_prefix,
        options=decode_options(options),
        deadline=deadline,
        glossary=glossary(request),
        glossary_id=request.glossary_id,
        alignments=request.return_alignments,
        quality=request.return_quality,
    )


def glossary(request: pb.TranslateRequest) -> tuple[tuple[str, str], ...]:
    """``glossary`` entries, then ``keep`` terms (target ""), as (source, target) pairs."""
    return tuple((e.source, e.target) for e in request.glossary) + tuple((term, "") for term in request.keep)


def _hypothesis(hyp: Hypothesis, options: pb.DecodingOptions) -> pb.Hypothesis:
    out = pb.Hypothesis(text=hyp.text, finish_reason=FINISH_REASONS.get(hyp.finish_reason, 0))
    if options.return_token_ids:
        out.token_ids.extend(int(t) for t in hyp.token_ids)
    if options.return_scores:
        out.score, out.logprob = float(hyp.score), float(hyp.logprob)
    return out


def sentence_alignment(alignment: WordAlignment) -> pb.SentenceAlignment:
    src, tgt = alignment.source_spans, alignment.target_spans
    links = [
        pb.WordLink(
            source_word=i, target_word=j, source_start=src[i][0], source_end=src[i][1],
            target_start=tgt[j][0], target_end=tgt[j][1],
        )
        for i, j in alignment.links
    ]  # fmt: skip
    return pb.SentenceAlignment(
        source=alignment.source,
        target=alignment.target,
        links=links,
        attention=alignment.attention.ravel().tolist(),
        source_words=len(src),
        target_words=len(tgt),
    )


def translate_response(done: Translated, options: pb.DecodingOptions) -> pb.TranslateResponse:
    reply = pb.TranslateResponse(
        model=done.model,
        source_language=done.source_language,
        target_language=done.target_language,
        pivot_language=done.pivot,
    )
    for k, result in enumerate(done.results):
        hypotheses = [_hypothesis(h, options) for h in result.hypotheses]
        if done.alignments is not None and hypotheses:
            hypotheses[0].alignments.extend(sentence_alignment(a) for a in done.alignments[k])
        translation = pb.Translation(
            hypotheses=hypotheses,
            source_tokens=result.source_tokens,
            timing=pb.TranslationTiming(
                queue_ms=result.queue_ms,
                encode_ms=result.encode_ms,
                decode_ms=result.decode_ms,
                first_token_ms=result.first_token_ms,
            ),
        )
        if done.quality is not None:
            q = done.quality[k]
            translation.quality.CopyFrom(pb.TranslationQuality(score=q.score, sentences=q.sentences, low=q.low))
        reply.translations.append(translation)
    return reply


def translate_chunk(event: StreamEvent, options: pb.DecodingOptions) -> pb.TranslateChunk | None:
    """One engine ``StreamEvent`` -> a chunk; None for an event that carries nothing to send."""
    chunk = pb.TranslateChunk(delta=event.delta)
    if event.finish_reason is not None:
        chunk.finish_reason = FINISH_REASONS.get(event.finish_reason, 0)
        chunk.pivot_language = event.pivot_language
    if options.return_token_ids:
        chunk.token_ids.extend(event.token_ids)
    if not chunk.delta and not chunk.token_ids and event.finish_reason is None:
        return None
    return chunk


# ------------------------------------------------------------- classification


def image_inputs(request: pb.ClassifyRequest, lifted: Mapping[int, memoryview] | None = None) -> list[ImageInput]:
    """The request's images; ``lifted``: tensors' raw_contents by image index, read from the
    received bytes in place of the message's (``v1_wire``)."""
    lifted = lifted or {}
    inputs: list[ImageInput] = []
    for i, image in enumerate(request.images):
        which = image.WhichOneof("input")
        if which == "encoded":
            inputs.append(EncodedImage(image.encoded))
        elif which == "tensor":
            tensor = image.tensor
            if tensor.datatype not in DATA_TYPES:  # every known value is there: this one is unknown
                _enum_check(pb.DataType, tensor.datatype, f"images[{i}].tensor.datatype")
            raw = lifted.get(i)
            raw = tensor.raw_contents if raw is None else raw
            inputs.append(RawTensor(list(tensor.shape), DATA_TYPES[tensor.datatype], raw))
        else:
            raise InvalidRequest(f"images[{i}]: set either encoded or tensor")
    return inputs


def classification_request(
    request: pb.ClassifyRequest,
    call: Call,
    deadline: Deadline | None = None,
    lifted: Mapping[int, memoryview] | None = None,
) -> ClassificationRequest:
    return ClassificationRequest(
        call, tuple(image_inputs(request, lifted)), request.model, top_k=request.top_k, deadline=deadline
    )


def classify_response(model: str, results: list[ImageResult]) -> pb.ClassifyResponse:
    reply = pb.ClassifyResponse(model=model)
    for r in results:
        reply.results.append(
            pb.Classification(
                labels=[pb.LabelScore(label=s.label, index=s.index, probability=s.probability) for s in r.labels],
                batch_size=r.batch_size,
                timing=pb.ClassificationTiming(
                    preprocess_ms=r.preprocess_ms, queue_ms=r.queue_ms, inference_ms=r.inference_ms
                ),
            )
        )
    return reply


# --------------------------------------------------------------------- models


def language_routes(routes: list[Route]) -> list[pb.LanguageRoute]:
    return [pb.LanguageRoute(source=r.source, target=r.target, models=r.models, pivot_language=r.pivot) for r in routes]


def model_info(model: Served | FailedModel, settings: Settings, *, loaded: bool, failure: str = "") -> pb.ModelInfo:
    """``loaded``: its sessions are open; ``failure``: why its last load failed (not ready until it loads)."""
    if isinstance(model, FailedModel):
        return pb.ModelInfo(name=model.name, kind=KINDS.get(model.kind, 0), ready=False, error=model.public_reason)
    m = model.manifest
    info = pb.ModelInfo(
        name=model.name,
        kind=KINDS[model.kind],
        ready=not failure,
        error=failure,
        loaded=loaded,
        provider=model.provider,
        precision=m.precision,
        attention=m.attention,
        config={k: json.dumps(v) for k, v in m.config.items()},
        version=m.attnserve_version,
        domain=str(m.extra.get("domain", "")),
    )
    if model.kind == TRANSLATION:
        info.family = m.family
        if m.languages is not None:
            info.source_languages.extend(m.languages.source)
            info.target_languages.extend(m.languages.target)
        info.limits.CopyFrom(
            pb.ModelLimits(
                max_source_len=m.limits.get("max_source_len", 0),
                max_target_len=m.limits.get("max_target_len", 0),
                max_beam_size=settings.max_beam_size,
                max_items_per_request=settings.max_texts_per_request,
                max_queue_size=settings.max_translation_queue,
                max_text_chars=settings.max_text_chars,
                max_request_chars=settings.max_request_chars,
            )
        )
    else:
        prep = m.preprocessing
        info.labels.extend(m.labels or [])
        info.limits.CopyFrom(
            pb.ModelLimits(
                max_items_per_request=settings.max_images_per_request,
                max_batch_size=settings.max_batch_size,
                max_queue_size=settings.max_queue_size,
                max_image_bytes=settings.max_image_bytes,
                max_image_pixels=settings.max_image_pixels,
            )
        )
        info.preprocessing.CopyFrom(
            pb.ImagePreprocessing(
                image_size=prep.image_size,
                channels=prep.channels,
                mean=prep.mean,
                std=prep.std,
                resample=prep.resample,
                invert=prep.invert,
            )
        )
    return info


def stored_glossary(glossary: Glossary) -> pb.StoredGlossary:
    """A stored glossary (``service/stored_glossaries.py``), its entries where they were read."""
    return pb.StoredGlossary(
        id=glossary.id,
        name=glossary.name,
        source_language=glossary.source,
        target_language=glossary.target,
        entry_count=glossary.entry_count,
        created_unix_s=glossary.created,
        entries=[pb.GlossaryEntry(source=s, target=t) for s, t in glossary.entries],
    )
