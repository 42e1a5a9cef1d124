"""A small typed Python client for the attnserve gRPC API (``attnserve.v1``).

    from attnserve.client import Client, Translator, Classifier

    with Client("127.0.0.1:50051") as client:
        print(client.translate(["Monday, March 3, 2025"])[0].text)
        print(client.classify(["digit.png"], top_k=3)[0].labels[0])

Calls carry a deadline (``timeout`` seconds) and are retried with backoff when the
server answers UNAVAILABLE (starting up, draining, connection refused); every other
failure raises :class:`AttnServeError` with the gRPC status code and message.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import numpy as np
from google.protobuf.descriptor import FieldDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc

from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

DEFAULT_ADDRESS = "127.0.0.1:50051"
FINISH_REASONS = {pb.FINISH_REASON_EOS: "eos", pb.FINISH_REASON_LENGTH: "length"}
KINDS = {pb.MODEL_KIND_TRANSLATION: "translation", pb.MODEL_KIND_IMAGE_CLASSIFICATION: "image-classification"}

T = TypeVar("T")

__all__ = [
    "DEFAULT_ADDRESS",
    "AttnServeError",
    "Alignment",
    "Chunk",
    "Classification",
    "Classifier",
    "Client",
    "Hypothesis",
    "Label",
    "LanguagePair",
    "ModelSummary",
    "Translation",
    "Translator",
]


class AttnServeError(Exception):
    """A failed call: ``code`` is the gRPC status (``grpc.StatusCode``), ``details`` the server's message."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details
        super().__init__(f"{code.name}: {details}")


@dataclass(frozen=True)
class Hypothesis:
    text: str
    token_ids: list[int] = field(default_factory=list)  # when asked for (return_token_ids)
    score: float | None = None  # when asked for (return_scores)
    logprob: float | None = None
    finish_reason: str = ""  # "eos" | "length"
    alignments: list[Alignment] = field(default_factory=list)  # per sentence, when asked for (alignments=True)


@dataclass(frozen=True)
class Alignment:
    """One sentence's word alignment: ``links`` (source word, target word) pairs, words the
    whitespace-separated tokens of ``source`` and ``target``; ``attention`` the word-level
    cross-attention, one row per target word over the source words."""

    source: str
    target: str
    links: list[tuple[int, int]]
    attention: list[list[float]]

    def pharaoh(self) -> str:
        """``"0-0 1-2 ..."``, as fast_align prints it."""
        return " ".join(f"{i}-{j}" for i, j in self.links)


@dataclass(frozen=True)
class Translation:
    hypotheses: list[Hypothesis]  # best first
    source_tokens: int
    timing: dict[str, float]  # queue_ms, encode_ms, decode_ms, first_token_ms
    pivot_language: str = ""  # the pair had no model: translated source -> this -> target ("" = directly)

    @property
    def text(self) -> str:
        return self.hypotheses[0].text


@dataclass(frozen=True)
class Chunk:
    delta: str
    token_ids: list[int]
    finish_reason: str  # "" until the last chunk


@dataclass(frozen=True)
class TranslatedFile:
    content: bytes
    filename: str
    media_type: str
    model: str
    characters: int
    sentences: int
    source_language: str
    target_language: str
    detected_language: str = ""


@dataclass(frozen=True)
class Label:
    label: str
    index: int
    probability: float


@dataclass(frozen=True)
class Classification:
    labels: list[Label]  # most probable first
    batch_size: int
    timing: dict[str, float]  # preprocess_ms, queue_ms, inference_ms


@dataclass(frozen=True)
class ModelSummary:
    name: str
    kind: str
    ready: bool
    error: str
    provider: str
    precision: str
    attention: str
    labels: list[str]
    limits: dict[str, int]
    config: dict[str, str]
    domain: str = ""  # what the model was trained for ("" = not stated)
    source_languages: list[str] = field(default_factory=list)  # translation; empty: one fixed pair
    target_languages: list[str] = field(default_factory=list)
    family: str = ""  # attnserve | marian | m2m_100
    loaded: bool = False  # in memory now; a ready model that is not loads on its first request


@dataclass(frozen=True)
class LanguagePair:
    """A pair the server translates: by one model, or by two through ``pivot_language``."""

    source: str
    target: str
    models: list[str]
    pivot_language: str = ""


def _timing(msg: Any) -> dict[str, float]:
    return {f.name: getattr(msg, f.name) for f in msg.DESCRIPTOR.fields}


def _summary(info: pb.ModelInfo) -> ModelSummary:
    limits = {
        f.name: getattr(info.limits, f.name) for f in info.limits.DESCRIPTOR.fields if getattr(info.limits, f.name)
    }
    return ModelSummary(
        info.name,
        KINDS.get(info.kind, "unknown"),
        info.ready,
        info.error,
        info.provider,
        info.precision,
        info.attention,
        list(info.labels),
        limits,
        dict(info.config),
        info.domain,
        list(info.source_languages),
        list(info.target_languages),
        info.family,
        info.loaded,
    )


def _image_input(image: bytes | str | Path | np.ndarray) -> pb.ImageInput:
    if isinstance(image, np.ndarray):  # already preprocessed: (C, H, W) or (1, C, H, W) float32
        values = np.ascontiguousarray(image, dtype="<f4")
        tensor = pb.Tensor(shape=list(values.shape), datatype=pb.DATA_TYPE_FP32, raw_contents=values.tobytes())
        return pb.ImageInput(tensor=tensor)
    if isinstance(image, (str, Path)):
        image = Path(image).read_bytes()
    return pb.ImageInput(encoded=bytes(image))


FORMATS = {"text": pb.TEXT_FORMAT_TEXT, "html": pb.TEXT_FORMAT_HTML, "markdown": pb.TEXT_FORMAT_MARKDOWN}
UNSIGNED_MAX = {FieldDescriptor.TYPE_UINT32: 2**32 - 1, FieldDescriptor.TYPE_UINT64: 2**64 - 1}


def unsigned_max(message: Any, field: str) -> int | None:
    """The largest value of ``message``'s unsigned integer ``field`` (its smallest is 0); None if
    the field is not unsigned."""
    return UNSIGNED_MAX.get(message.DESCRIPTOR.fields_by_name[field].type)


def _check_unsigned(message: Any, **values: Any) -> None:
    """A negative (or too large) int for an unsigned field -> ValueError naming the parameter
    (protobuf's own is a bare "Value out of range: -1")."""
    for name, value in values.items():
        limit = unsigned_max(message, name)
        if limit is not None and isinstance(value, int) and not 0 <= value <= limit:
            raise ValueError(f"{name} must be an integer from 0 to {limit}, got {value}")


def text_format(name: str) -> int:
    """A format name ("text", "html" or "markdown") -> ``TextFormat``."""
    if name not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {name!r}")
    return FORMATS[name]


def glossary_entries(glossary: Mapping[str, str] | None) -> list[pb.GlossaryEntry]:
    """source term -> target term ("" keeps the term) -> ``GlossaryEntry`` messages."""
    return [pb.GlossaryEntry(source=source, target=target) for source, target in (glossary or {}).items()]


def read_glossary(path: str | Path) -> dict[str, str]:
    """A TSV glossary: ``source<TAB>target`` lines, or ``source`` alone to keep the term; blank
    lines and lines starting with ``#`` skipped. Raises ValueError naming the file and line."""
    entries: dict[str, str] = {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) > 2 or not fields[0].strip():
            raise ValueError(f"{path}, line {number}: expected 'source<TAB>target' or 'source', got {line!r:.80}")
        entries[fields[0].strip()] = fields[1].strip() if len(fields) == 2 else ""
    return entries


def decoding_options(
    *,
    beam_size: int = 1,
    num_hypotheses: int = 1,
    length_penalty: float | None = None,
    max_new_tokens: int = 0,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float | None = None,
    seed: int | None = None,
    return_scores: bool = False,
    return_token_ids: bool = False,
    source_language: str = "",
    target_language: str = "",
    target_prefix: str = "",
) -> pb.DecodingOptions:
    """Keyword options -> ``DecodingOptions`` (unset optionals stay unset: the server's defaults).
    Languages: the model's codes (``deu_Latn``, ``fra``) or ISO 639-1 (``de``); with no model
    named, the pair picks the model. ``target_prefix``: text every translation starts with.
    A negative count or seed (unsigned fields) is a ValueError naming it."""
    _check_unsigned(
        pb.DecodingOptions,
        beam_size=beam_size,
        num_hypotheses=num_hypotheses,
        max_new_tokens=max_new_tokens,
        top_k=top_k,
        seed=seed,
    )
    opts = pb.DecodingOptions(
        source_language=source_language,
        target_language=target_language,
        target_prefix=target_prefix,
        beam_size=beam_size,
        num_hypotheses=num_hypotheses,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        return_scores=return_scores,
        return_token_ids=return_token_ids,
    )
    if length_penalty is not None:
        opts.length_penalty = length_penalty
    if top_p is not None:
        opts.top_p = top_p
    if seed is not None:
        opts.seed = seed
    return opts


def _alignment(a: pb.SentenceAlignment) -> Alignment:
    weights = np.asarray(a.attention, dtype=np.float32).reshape(a.target_words, a.source_words)
    return Alignment(a.source, a.target, [(link.source_word, link.target_word) for link in a.links], weights.tolist())


def _translation(t: pb.Translation) -> Translation:
    hyps = [
        Hypothesis(
            h.text,
            list(h.token_ids),
            h.score if h.HasField("score") else None,
            h.logprob if h.HasField("logprob") else None,
            FINISH_REASONS.get(h.finish_reason, ""),
            [_alignment(a) for a in h.alignments],
        )
        for h in t.hypotheses
    ]
    return Translation(hyps, t.source_tokens, _timing(t.timing))


class _CallDetails(
    collections.namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    pass


class _BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds ``authorization: Bearer <token>`` to every call (docs/operations.md, "Bearer tokens")."""

    def __init__(self, token: str) -> None:
        self.header = ("authorization", f"Bearer {token}")

    def _details(self, d: grpc.ClientCallDetails) -> _CallDetails:
        metadata = [*(d.metadata or ()), self.header]
        return _CallDetails(d.method, d.timeout, metadata, d.credentials, d.wait_for_ready, d.compression)

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)


class Client:
    """A channel to one server; thread-safe; use as a context manager or call :meth:`close`.

    ``token``: a bearer token sent with every call. ``root_certificates`` (PEM bytes of the CA)
    switches to TLS; add ``private_key`` and ``certificate_chain`` for mutual TLS.
    """

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.1,
        max_message_bytes: int = 64 << 20,
        token: str | None = None,
        root_certificates: bytes | None = None,
        private_key: bytes | None = None,
        certificate_chain: bytes | None = None,
    ) -> None:
        self.address, self.timeout, self.retries, self.backoff_s = address, timeout, retries, backoff_s
        options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.enable_retries", 0),  # retries are ours: explicit, and they respect the whole deadline
        ]
        if root_certificates is not None or certificate_chain is not None:
            credentials = grpc.ssl_channel_credentials(root_certificates, private_key, certificate_chain)
            self.channel = grpc.secure_channel(address, credentials, options=options)
        else:
            self.channel = grpc.insecure_channel(address, options=options)
        if token:
            self.channel = grpc.intercept_channel(self.channel, _BearerToken(token))
        self.stub = pb_grpc.InferenceServiceStub(self.channel)
        self.health_stub = health_pb2_grpc.HealthStub(self.channel)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def _call(self, fn: Callable[[float], T], timeout: float | None) -> T:
        """``fn(seconds_left)`` with retries on UNAVAILABLE until the deadline; errors -> AttnServeError."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        attempt = 0
        while True:
            left = deadline - time.monotonic()
            try:
                return fn(max(left, 0.001))
            except grpc.RpcError as exc:
                code = exc.code()
                pause = min(self.backoff_s * 2**attempt, 2.0)
                if (
                    code != grpc.StatusCode.UNAVAILABLE
                    or attempt >= self.retries
                    or time.monotonic() + pause >= deadline
                ):
                    raise AttnServeError(code, exc.details() or "") from None
                attempt += 1
                time.sleep(pause)

    # ------------------------------------------------------------- translation

    def translate(
        self,
        texts: str | Sequence[str],
        model: str = "",
        *,
        timeout: float | None = None,
        format: str = "text",
        glossary: Mapping[str, str] | None = None,
        keep: Sequence[str] = (),
        alignments: bool = False,
        **options: Any,
    ) -> list[Translation]:
        """One :class:`Translation` per text (a document: lines and sentences, joined back as sent).
        ``format``: "text", "html" or "markdown"; ``glossary``: source term -> target term the
        translation must spell verbatim ("" keeps the term); ``keep``: terms left as they are;
        ``alignments``: the best hypothesis carries one :class:`Alignment` per sentence;
        ``options``: see :func:`decoding_options`."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        request = pb.TranslateRequest(
            model=model,
            texts=texts,
            options=decoding_options(**options),
            format=text_format(format),
            glossary=glossary_entries(glossary),
            keep=list(keep),
            return_alignments=alignments,
        )
        reply = self._call(lambda t: self.stub.Translate(request, timeout=t), timeout)
        return [dataclasses.replace(_translation(t), pivot_language=reply.pivot_language) for t in reply.translations]

    def translate_stream(
        self,
        text: str,
        model: str = "",
        *,
        timeout: float | None = None,
        format: str = "text",
        glossary: Mapping[str, str] | None = None,
        keep: Sequence[str] = (),
        **options: Any,
    ) -> Iterator[Chunk]:
        """Text deltas as they are generated (greedy or sampling), sentence by sentence in document
        order; the last chunk has the finish reason. ``glossary`` / ``keep``: as :meth:`translate`.

        Closing the iterator early cancels the call (the server frees the sequence).
        """
        request = pb.TranslateRequest(
            model=model,
            texts=[text],
            options=decoding_options(**options),
            format=text_format(format),
            glossary=glossary_entries(glossary),
            keep=list(keep),
        )
        first: list[pb.TranslateChunk] = []

        def start(t: float) -> Any:  # retried only until the first chunk has arrived
            call = self.stub.TranslateStream(request, timeout=t)
            try:
                first.append(next(call))
            except StopIteration:
                pass
            return call

        call = self._call(start, timeout)
        try:
            for msg in [*first, *self._stream_rest(call)]:
                yield Chunk(msg.delta, list(msg.token_ids), FINISH_REASONS.get(msg.finish_reason, ""))
        finally:
            call.cancel()

    def translate_file(
        self,
        path: str | Path,
        target_language: str,
        source_language: str = "auto",
        model: str = "",
        *,
        progress: Callable[[int, int], None] | None = None,
        timeout: float | None = None,
    ) -> TranslatedFile:
        """Translate the file at ``path`` (its extension picks the format) as one request;
        ``progress(done, total)`` hears of its sentences as the server decodes them.
        Closing early (an exception in ``progress``) cancels the call."""
        path = Path(path)
        request = pb.TranslateFileRequest(
            model=model,
            filename=path.name,
            content=path.read_bytes(),
            source_language=source_language,
            target_language=target_language,
        )
        call = self._call(lambda t: self.stub.TranslateFile(request, timeout=t), timeout)
        parts: list[bytes] = []
        try:
            for msg in self._stream_rest(call):
                kind = msg.WhichOneof("event")
                if kind == "progress" and progress is not None:
                    progress(msg.progress.sentences_done, msg.progress.sentences_total)
                elif kind == "content":
                    parts.append(msg.content)
                elif kind == "done":
                    d = msg.done
                    return TranslatedFile(
                        b"".join(parts), d.filename, d.media_type, d.model, d.characters, d.sentences,
                        d.source_language, d.target_language, d.detected_language,
                    )  # fmt: skip
        finally:
            call.cancel()
        raise AttnServeError(grpc.StatusCode.INTERNAL, "the TranslateFile stream ended without its file")

    @staticmethod
    def _stream_rest(call: Any) -> Iterator[pb.TranslateChunk]:
        try:
            yield from call
        except grpc.RpcError as exc:
            raise AttnServeError(exc.code(), exc.details() or "") from None

    # ---------------------------------------------------------- classification

    def classify(
        self,
        images: Sequence[bytes | str | Path | np.ndarray],
        model: str = "",
        *,
        top_k: int = 0,
        timeout: float | None = None,
    ) -> list[Classification]:
        """One :class:`Classification` per image: encoded bytes, a file path, or a preprocessed
        (C, H, W) float32 array. ``top_k`` 0 = the server's default."""
        if isinstance(images, (bytes, str, Path, np.ndarray)):
            images = [images]
        _check_unsigned(pb.ClassifyRequest, top_k=top_k)
        request = pb.ClassifyRequest(model=model, images=[_image_input(i) for i in images], top_k=top_k)
        reply = self._call(lambda t: self.stub.Classify(request, timeout=t), timeout)
        return [
            Classification([Label(s.label, s.index, s.probability) for s in r.labels], r.batch_size, _timing(r.timing))
            for r in reply.results
        ]

    # ------------------------------------------------------------------ models

    def list_models(self, *, timeout: float | None = None) -> list[ModelSummary]:
        reply = self._call(lambda t: self.stub.ListModels(pb.ListModelsRequest(), timeout=t), timeout)
        return [_summary(m) for m in reply.models]

    def language_pairs(self, *, timeout: float | None = None) -> list[LanguagePair]:
        """Every pair the server translates, directly and through its pivot language."""
        reply = self._call(lambda t: self.stub.ListModels(pb.ListModelsRequest(), timeout=t), timeout)
        return [LanguagePair(r.source, r.target, list(r.models), r.pivot_language) for r in reply.routes]

    def get_model(self, name: str, *, timeout: float | None = None) -> ModelSummary:
        return _summary(self._call(lambda t: self.stub.GetModel(pb.GetModelRequest(name=name), timeout=t), timeout))

    def health(self, service: str = "", *, timeout: float | None = None) -> str:
        """``SERVING``, ``NOT_SERVING`` or ``SERVICE_UNKNOWN`` for ``service`` ("" = the whole server)."""
        request = health_pb2.HealthCheckRequest(service=service)
        try:
            reply = self._call(lambda t: self.health_stub.Check(request, timeout=t), timeout)
        except AttnServeError as exc:
            if exc.code == grpc.StatusCode.NOT_FOUND:
                return "SERVICE_UNKNOWN"
            raise
        return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


class Translator:
    """``Translator("127.0.0.1:50051", beam_size=4)("Monday, March 3, 2025") -> str``."""

    def __init__(self, client: Client | str = DEFAULT_ADDRESS, model: str = "", **options: Any) -> None:
        self.client = Client(client) if isinstance(client, str) else client
        self.model, self.options = model, options

    def __call__(self, text: str) -> str:
        return self.client.translate([text], self.model, **self.options)[0].text

    def batch(self, texts: Sequence[str]) -> list[str]:
        return [t.text for t in self.client.translate(list(texts), self.model, **self.options)]

    def stream(self, text: str) -> Iterator[str]:
        for chunk in self.client.translate_stream(text, self.model, **self.options):
            if chunk.delta:
                yield chunk.delta


class Classifier:
    """``Classifier("127.0.0.1:50051")("digit.png") -> [Label, ...]`` (most probable first)."""

    def __init__(self, client: Client | str = DEFAULT_ADDRESS, model: str = "", top_k: int = 0) -> None:
        self.client = Client(client) if isinstance(client, str) else client
        self.model, self.top_k = model, top_k

    def __call__(self, image: bytes | str | Path | np.ndarray) -> list[Label]:
        return self.client.classify([image], self.model, top_k=self.top_k)[0].labels

    def batch(self, images: Sequence[bytes | str | Path | np.ndarray]) -> list[list[Label]]:
        return [r.labels for r in self.client.classify(list(images), self.model, top_k=self.top_k)]
