"""KServe v2 inference on attnserve's models: the tensor conventions of each kind, decoded
into the services' requests and encoded back (the codec both KServe doors share).

Translation: input ``TEXT`` (BYTES, [N] or [N, 1], UTF-8 texts) -> output ``TRANSLATION``
(BYTES, the same shape; [N, H] with ``num_hypotheses`` H > 1, best first). Decoding
options are request parameters (``params.DECODING_PARAMETERS``), and so are the languages
(``source_language``, ``target_language``, ``target_prefix``: ``service.languages``). Streaming (decoupled,
``ModelStreamInfer``): one text per request, one response per generated piece whose
``TRANSLATION`` is the text delta, the last one flagged ``triton_final_response: true``
(an empty extra response instead when the request asks for
``triton_enable_empty_final_response``: Triton's convention).

Classification: input ``IMAGE`` (BYTES, [N] or [N, 1], encoded images) or ``PIXELS``
(FP32, [N, C, H, W], preprocessed) -> output ``PROBABILITIES`` (FP32, [N, K]); with
Triton's classification extension (output parameter ``classification`` = k) the output is
BYTES [N, k] of ``"<probability>:<index>:<label>"``, most probable first.

The request parameter ``timeout`` (microseconds, Triton's) becomes the request's deadline
(with the gRPC client's, the earlier of the two): the service drops its work when it passes
and the call fails with DEADLINE_EXCEEDED.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnserve.contract.deadline import Deadline, earliest
from attnserve.contract.kinds import TRANSLATION

from ...service.classification import ClassificationService
from ...service.models import Served
from ...service.requests import MODEL_VERSION, ClassificationRequest, TranslationRequest
from ...service.translation import TranslationService
from ...service.vocabulary import EncodedImage, ImageInput, RawTensor
from ...shared.calls import Call
from ...shared.errors import InferenceFailed, InvalidRequest, echo
from .. import params
from ..context import DoorContext
from ..params import EMPTY_FINAL, check_parameters, request_deadline
from .tensors import BYTES, Tensor

TEXT, TRANSLATION_OUT = "TEXT", "TRANSLATION"
# With return_alignments: per text, its sentences' links "i-j ...", one line per sentence.
ALIGNMENTS_OUT = "ALIGNMENTS"
# With return_quality, an output QUALITY named, or a server with --min-quality: per text, its score
# 0..1 (service/quality.py); the response parameter low_quality counts the texts below --min-quality.
QUALITY_OUT, LOW_QUALITY = "QUALITY", "low_quality"
IMAGE, PIXELS, PROBABILITIES = "IMAGE", "PIXELS", "PROBABILITIES"
VERSION = MODEL_VERSION
FINAL = "triton_final_response"
CLASSIFICATION = "classification"  # the output parameter of Triton's classification extension


@dataclass(frozen=True)
class RequestedOutput:
    name: str
    parameters: Mapping[str, Any] = field(default_factory=dict)

    @property
    def class_count(self) -> int:
        return self.parameters.get(CLASSIFICATION, 0)


@dataclass(frozen=True)
class InferRequest:
    model_name: str
    model_version: str = ""
    id: str = ""
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[RequestedOutput] = field(default_factory=list)
    parameters: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class InferResponse:
    model_name: str
    model_version: str
    id: str
    outputs: list[Tensor]
    parameters: dict[str, Any] = field(default_factory=dict)


def _one_input(request: InferRequest, names: tuple[str, ...]) -> Tensor:
    for t in request.inputs:
        if t.name not in names:
            raise InvalidRequest(f"unknown input {echo(t.name)}; this model takes {' or '.join(names)}")
    if len(request.inputs) != 1:
        got = ", ".join(t.name for t in request.inputs) or "none"
        raise InvalidRequest(f"send exactly one input, {' or '.join(names)}; got {got}")
    return request.inputs[0]


def _batch_of(tensor: Tensor, datatype: str) -> int:
    """N of a [N] or [N, 1] tensor of ``datatype``."""
    if tensor.datatype != datatype:
        raise InvalidRequest(f"input {tensor.name} must be {datatype}, got {tensor.datatype}")
    if len(tensor.shape) not in (1, 2) or (len(tensor.shape) == 2 and tensor.shape[1] != 1):
        raise InvalidRequest(f"input {tensor.name} must have shape [N] or [N, 1], got {list(tensor.shape)}")
    if tensor.shape[0] == 0:
        raise InvalidRequest(f"input {tensor.name} is empty: send at least one element")
    return tensor.shape[0]


def _outputs(request: InferRequest, names: tuple[str, ...], classify: bool) -> list[RequestedOutput]:
    """The outputs asked for (all when none is named); unknown, repeated or bad ones are refused."""
    if not request.outputs:
        return [RequestedOutput(name) for name in names]
    seen = set()
    for o in request.outputs:
        if o.name not in names:
            raise InvalidRequest(f"unknown output {echo(o.name)}; this model has {', '.join(names)}")
        if o.name in seen:
            raise InvalidRequest(f"output {o.name} is requested twice")
        seen.add(o.name)
        k = o.class_count
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise InvalidRequest(f"output {o.name}: {CLASSIFICATION} must be an integer >= 0, got {echo(k)}")
        if k and not classify:
            raise InvalidRequest(f"output {o.name}: {CLASSIFICATION} applies to classification models only")
    return list(request.outputs)


def _texts(tensor: Tensor) -> list[str]:
    _batch_of(tensor, BYTES)
    texts = []
    for i, item in enumerate(tensor.data):
        try:
            texts.append(item.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise InvalidRequest(f"input {tensor.name}[{i}] is not valid UTF-8: {exc}") from None
    return texts


def _response(model: str, request: InferRequest, outputs: list[Tensor], **parameters: Any) -> InferResponse:
    return InferResponse(model, VERSION, request.id, outputs, dict(parameters))


PARAMETERS = {
    *params.DECODING_PARAMETERS,
    params.FORMAT,
    *params.LANGUAGE_PARAMETERS,
    params.GLOSSARY,
    params.GLOSSARY_ID,
    params.ALIGNMENTS,
    params.QUALITY,
}


def translation_request(model: str, request: InferRequest, call: Call, deadline: Deadline | None) -> TranslationRequest:
    """A ``TEXT`` request to ``model`` -> the translation service's request (decoding options and
    languages from the request parameters)."""
    check_parameters(request.parameters, PARAMETERS)
    tensor = _one_input(request, (TEXT,))
    named = {o.name for o in _outputs(request, (TRANSLATION_OUT, ALIGNMENTS_OUT, QUALITY_OUT), classify=False)}
    decoding = {k: v for k, v in request.parameters.items() if k in params.DECODING_PARAMETERS}
    return TranslationRequest(
        call,
        tuple(_texts(tensor)),
        model,
        request.model_version,
        format=params.text_format(request.parameters, "parameters."),
        options=params.decode_options(decoding, "parameters."),
        deadline=earliest(deadline, request_deadline(request.parameters)),
        glossary=params.glossary(request.parameters, "parameters."),
        glossary_id=params.glossary_id(request.parameters, "parameters."),
        alignments=params.alignments(request.parameters, "parameters."),
        quality=params.quality(request.parameters, "parameters.") or (bool(request.outputs) and QUALITY_OUT in named),
        **params.languages(request.parameters, "parameters."),
    )


def _images(model: Served, tensor: Tensor) -> list[ImageInput]:
    if tensor.name == IMAGE:
        _batch_of(tensor, BYTES)
        return [EncodedImage(item) for item in tensor.data]
    prep = model.manifest.preprocessing
    expected = [prep.channels, prep.image_size, prep.image_size]
    if tensor.datatype != "FP32":
        raise InvalidRequest(f"input {PIXELS} must be FP32, got {tensor.datatype}")
    if len(tensor.shape) != 4 or list(tensor.shape[1:]) != expected or tensor.shape[0] == 0:
        raise InvalidRequest(
            f"input {PIXELS} must have shape [N, {', '.join(map(str, expected))}], got {list(tensor.shape)}"
        )
    # Each image goes through the same checks as attnserve.v1's raw tensors (finite, in range),
    # read in place from the request's tensor (no copy until the batch).
    data = np.ascontiguousarray(tensor.data, dtype="<f4")
    return [RawTensor(expected, "FP32", image) for image in data]


class KServeInference:
    """KServe v2 requests (gRPC and REST) through the services; one per server."""

    def __init__(self, doors: DoorContext) -> None:
        self.doors = doors
        self.translation: TranslationService = doors.translation
        self.classification: ClassificationService = doors.classification

    async def infer(self, request: InferRequest, call: Call, deadline: Deadline | None = None) -> InferResponse:
        """One request, one response (ModelInfer, POST /v2/models/{m}/infer)."""
        model = self.doors.models.get(request.model_name, request.model_version)  # its kind picks the tensors
        if model.kind != TRANSLATION:
            return await self._classify(model, request, call, deadline)
        wanted = translation_request(model.name, request, call, deadline)
        done = await self.translation.translate(wanted)
        h, shape = wanted.options.num_hypotheses, _one_input(request, (TEXT,)).shape
        if h == 1:
            data = [r.hypotheses[0].text.encode() for r in done.results]
        else:  # fewer distinct hypotheses than asked for (a short beam) leave empty strings
            hyps = [[h.text for h in r.hypotheses] for r in done.results]
            data = [(row[i] if i < len(row) else "").encode() for row in hyps for i in range(h)]
            shape = (len(done.results), h)
        outputs = [Tensor(TRANSLATION_OUT, BYTES, tuple(shape), data)]
        if done.alignments is not None:
            lines = ["\n".join(a.pharaoh() for a in sentences).encode() for sentences in done.alignments]
            outputs.append(Tensor(ALIGNMENTS_OUT, BYTES, (len(lines),), lines))
        if done.quality is None:
            return _response(done.model, request, outputs)
        scores = np.array([q.score for q in done.quality], dtype=np.float32)  # (N,)
        outputs.append(Tensor(QUALITY_OUT, "FP32", scores.shape, scores))
        return _response(done.model, request, outputs, **{LOW_QUALITY: sum(q.low for q in done.quality)})

    async def stream(
        self, request: InferRequest, call: Call, deadline: Deadline | None = None
    ) -> AsyncIterator[InferResponse]:
        """The responses of one ModelStreamInfer request: text deltas for translation (decoupled),
        the one response of a classification."""
        model = self.doors.models.get(request.model_name, request.model_version)
        if model.kind != TRANSLATION:
            response = await self._classify(model, request, call, deadline)
            response.parameters[FINAL] = True
            yield response
            return
        wanted = translation_request(model.name, request, call, deadline)
        if len(wanted.texts) != 1:
            raise InvalidRequest(
                f"ModelStreamInfer translates one text per request (input {TEXT} of shape [1]), "
                f"got {len(wanted.texts)}: send one request per text on the stream"
            )
        shape = tuple(1 for _ in _one_input(request, (TEXT,)).shape)

        def piece(delta: str, final: bool) -> InferResponse:
            return _response(
                model.name, request, [Tensor(TRANSLATION_OUT, BYTES, shape, [delta.encode()])], **{FINAL: final}
            )

        events = self.translation.stream(wanted)
        try:
            async for event in events:
                if event.finish_reason is None:
                    if event.delta:
                        yield piece(event.delta, False)
                elif request.parameters.get(EMPTY_FINAL, False) is True:
                    if event.delta:
                        yield piece(event.delta, False)
                    yield _response(model.name, request, [], **{FINAL: True})
                else:
                    yield piece(event.delta, True)
        finally:
            await events.aclose()  # a cancelled or failed stream frees its row at the next step

    async def _classify(
        self, model: Served, request: InferRequest, call: Call, deadline: Deadline | None
    ) -> InferResponse:
        check_parameters(request.parameters, set())
        tensor = _one_input(request, (IMAGE, PIXELS))
        outputs = _outputs(request, (PROBABILITIES,), classify=True)
        labels = model.manifest.labels or []  # the classifier's, read from the model's manifest
        top_k = max(1, min(max(o.class_count for o in outputs), len(labels)))
        deadline = earliest(deadline, request_deadline(request.parameters))
        wanted = ClassificationRequest(call, tuple(_images(model, tensor)), model.name, top_k=top_k, deadline=deadline)
        name, results = await self.classification.classify(wanted)
        if any(r.probabilities.shape != (len(labels),) for r in results):
            raise InferenceFailed(f"model {name}: probabilities do not have one value per label")
        out = []
        for o in outputs:
            if o.class_count:
                k = min(o.class_count, len(labels))
                data = [f"{s.probability:f}:{s.index}:{s.label}".encode() for r in results for s in r.labels[:k]]
                out.append(Tensor(o.name, BYTES, (len(results), k), data))
            else:
                rows = [r.probabilities for r in results]  # N x (K,)
                probs = (rows[0][None] if len(rows) == 1 else np.stack(rows)).astype(np.float32, copy=False)  # (N, K)
                out.append(Tensor(o.name, "FP32", probs.shape, probs))
        return _response(name, request, out)
