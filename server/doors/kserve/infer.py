"""KServe v2 inference on attnserve's models: the tensor conventions of each kind.

Translation: input ``TEXT`` (BYTES, [N] or [N, 1], UTF-8 texts) -> output ``TRANSLATION``
(BYTES, the same shape; [N, H] with ``num_hypotheses`` H > 1, best first). Decoding
options are request parameters (``params.DECODING_PARAMETERS``), and so are the languages
(``source_language``, ``target_language``, ``target_prefix``: ``server.languages``). Streaming (decoupled,
``ModelStreamInfer``): one text per request, one response per generated piece whose
``TRANSLATION`` is the text delta, the last one flagged ``triton_final_response: true``
(an empty extra response instead when the request asks for
``triton_enable_empty_final_response``: Triton's convention).

Classification: input ``IMAGE`` (BYTES, [N] or [N, 1], encoded images) or ``PIXELS``
(FP32, [N, C, H, W], preprocessed) -> output ``PROBABILITIES`` (FP32, [N, K]); with
Triton's classification extension (output parameter ``classification`` = k) the output is
BYTES [N, k] of ``"<probability>:<index>:<label>"``, most probable first.

The request parameter ``timeout`` (microseconds, Triton's) bounds a request's time in the
server; past it the work is dropped and the call fails with DEADLINE_EXCEEDED.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnserve.contract.kinds import TRANSLATION

from ... import engine_api, languages, params
from ...calls import Call, within
from ...classification import EncodedImage, ImageInput, RawTensor
from ...errors import InferenceFailed, InvalidRequest, ModelNotFound
from ...registry import LoadedModel
from .tensors import BYTES, Tensor

TEXT, TRANSLATION_OUT = "TEXT", "TRANSLATION"
IMAGE, PIXELS, PROBABILITIES = "IMAGE", "PIXELS", "PROBABILITIES"
VERSION = "1"  # one version per model name; a hot reload replaces it in place
FINAL = "triton_final_response"
EMPTY_FINAL = "triton_enable_empty_final_response"
CLASSIFICATION = "classification"  # the output parameter of Triton's classification extension
TIMEOUT = "timeout"
# Request parameters Triton's clients may send that mean nothing here: accepted and ignored.
IGNORED = {"priority", "sequence_id", "sequence_start", "sequence_end", "binary_data_output", "headers"}


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


def check_version(model: LoadedModel, version: str) -> None:
    if version not in ("", VERSION):
        raise ModelNotFound(f"model {model.name!r} has no version {version!r}; it serves version {VERSION}")


def request_timeout_s(parameters: Mapping[str, Any]) -> float | None:
    if TIMEOUT not in parameters:
        return None
    value = parameters[TIMEOUT]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidRequest(f"parameters.{TIMEOUT}: expected microseconds > 0, got {value!r}")
    return value / 1e6


def check_parameters(parameters: Mapping[str, Any], known: set[str]) -> None:
    unknown = sorted(set(parameters) - known - IGNORED - {TIMEOUT, EMPTY_FINAL})
    if unknown:
        names = ", ".join(sorted(known)) or "none"
        raise InvalidRequest(f"unknown request parameter(s) {', '.join(unknown)} (this model takes: {names})")


def _one_input(request: InferRequest, names: tuple[str, ...]) -> Tensor:
    for t in request.inputs:
        if t.name not in names:
            raise InvalidRequest(f"unknown input {t.name!r}; this model takes {' or '.join(names)}")
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
            raise InvalidRequest(f"unknown output {o.name!r}; this model has {', '.join(names)}")
        if o.name in seen:
            raise InvalidRequest(f"output {o.name} is requested twice")
        seen.add(o.name)
        k = o.class_count
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise InvalidRequest(f"output {o.name}: {CLASSIFICATION} must be an integer >= 0, got {k!r}")
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


def _response(model: LoadedModel, request: InferRequest, outputs: list[Tensor], **parameters: Any) -> InferResponse:
    return InferResponse(model.name, VERSION, request.id, outputs, dict(parameters))


class KServeInference:
    """Runs KServe v2 requests on the serving core; one per server (the preprocessing pool is shared)."""

    def __init__(self, pool: Executor) -> None:
        self.pool = pool

    # ----------------------------------------------------------------- translation

    def _translation_request(self, model: LoadedModel, request: InferRequest) -> tuple[Tensor, list[str], Any, str]:
        check_parameters(request.parameters, {*params.DECODING_PARAMETERS, params.FORMAT, *params.LANGUAGE_PARAMETERS})
        tensor = _one_input(request, (TEXT,))
        _outputs(request, (TRANSLATION_OUT,), classify=False)
        texts = _texts(tensor)
        decoding = {k: v for k, v in request.parameters.items() if k in params.DECODING_PARAMETERS}
        options = params.decode_options(decoding, "parameters.")
        wanted = params.language_request(request.parameters, "parameters.")
        options, _, _ = languages.apply(model.manifest, model.engine.tokenizer, options, wanted)
        return tensor, texts, options, params.text_format(request.parameters, "parameters.")

    async def _translate(self, model: LoadedModel, request: InferRequest, call: Call) -> InferResponse:
        tensor, texts, options, format = self._translation_request(model, request)
        translating = engine_api.translate(model.engine, texts, options, format)
        results = await within(translating, request_timeout_s(request.parameters))
        call.items, call.queue_s = len(texts), max(r.queue_ms for r in results) / 1e3
        h = options.num_hypotheses
        if h == 1:
            data, shape = [r.hypotheses[0].text.encode() for r in results], tensor.shape
        else:  # fewer finished hypotheses than asked for (a short beam) leave empty strings
            data = [(r.hypotheses[i].text if i < len(r.hypotheses) else "").encode() for r in results for i in range(h)]
            shape = (len(texts), h)
        return _response(model, request, [Tensor(TRANSLATION_OUT, BYTES, tuple(shape), data)])

    async def _translate_stream(
        self, model: LoadedModel, request: InferRequest, call: Call
    ) -> AsyncIterator[InferResponse]:
        tensor, texts, options, format = self._translation_request(model, request)
        if len(texts) != 1:
            raise InvalidRequest(
                f"ModelStreamInfer translates one text per request (input {TEXT} of shape [1]), got {len(texts)}: "
                "send one request per text on the stream"
            )
        empty_final = request.parameters.get(EMPTY_FINAL, False) is True
        timeout = request_timeout_s(request.parameters)
        shape = tuple(1 for _ in tensor.shape)
        events = engine_api.stream(model.engine, texts[0], options, format)
        loop_deadline = None if timeout is None else time.monotonic() + timeout

        def piece(delta: str, final: bool) -> InferResponse:
            return _response(
                model, request, [Tensor(TRANSLATION_OUT, BYTES, shape, [delta.encode()])], **{FINAL: final}
            )

        try:
            while True:
                remaining = None if loop_deadline is None else max(loop_deadline - time.monotonic(), 0.0)
                try:
                    event = await within(events.__anext__(), remaining)
                except StopAsyncIteration:
                    return
                if event.finish_reason is None:
                    if event.delta:
                        yield piece(event.delta, False)
                    continue
                call.items = 1
                if empty_final:
                    if event.delta:
                        yield piece(event.delta, False)
                    yield _response(model, request, [], **{FINAL: True})
                else:
                    yield piece(event.delta, True)
                return
        finally:
            await events.aclose()  # a cancelled or failed stream frees its row at the next step

    # -------------------------------------------------------------- classification

    def _images(self, model: LoadedModel, tensor: Tensor) -> list[ImageInput]:
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
        # Each image goes through the same checks as attnserve.v1's raw tensors (finite, in range).
        return [RawTensor(expected, "FP32", image.tobytes()) for image in tensor.data]

    async def _classify(self, model: LoadedModel, request: InferRequest, call: Call) -> InferResponse:
        check_parameters(request.parameters, set())
        tensor = _one_input(request, (IMAGE, PIXELS))
        outputs = _outputs(request, (PROBABILITIES,), classify=True)
        inputs = self._images(model, tensor)
        labels = model.classifier.labels
        top_k = max(1, min(max(o.class_count for o in outputs), len(labels)))
        results = await within(
            model.classifier.classify(inputs, top_k, self.pool), request_timeout_s(request.parameters)
        )
        call.items, call.queue_s = len(inputs), max(r.queue_ms for r in results) / 1e3
        if any(r.probabilities.shape != (len(labels),) for r in results):
            raise InferenceFailed(f"model {model.name}: probabilities do not have one value per label")
        out = []
        for o in outputs:
            if o.class_count:
                k = min(o.class_count, len(labels))
                data = [f"{s.probability:f}:{s.index}:{s.label}".encode() for r in results for s in r.labels[:k]]
                out.append(Tensor(o.name, BYTES, (len(results), k), data))
            else:
                probs = np.stack([r.probabilities for r in results]).astype(np.float32)  # (N, K)
                out.append(Tensor(o.name, "FP32", probs.shape, probs))
        return _response(model, request, out)

    # ------------------------------------------------------------------- entry points

    async def infer(self, model: LoadedModel, request: InferRequest, call: Call) -> InferResponse:
        """One request, one response (ModelInfer, POST /v2/models/{m}/infer)."""
        check_version(model, request.model_version)
        if model.kind == TRANSLATION:
            return await self._translate(model, request, call)
        return await self._classify(model, request, call)

    async def stream(self, model: LoadedModel, request: InferRequest, call: Call) -> AsyncIterator[InferResponse]:
        """The responses of one ModelStreamInfer request: text deltas for translation (decoupled),
        the one response of a classification."""
        check_version(model, request.model_version)
        if model.kind == TRANSLATION:
            async for response in self._translate_stream(model, request, call):
                yield response
            return
        response = await self._classify(model, request, call)
        response.parameters[FINAL] = True
        yield response
