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
import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

from .jobs import FileJob, JobClient
from .requests import (
    check_unsigned,
    decoding_options,
    file_request,
    glossary_entries,
    image_input,
    read_glossary,
    text_format,
    text_list,
    unsigned_max,
)
from .results import (
    FINISH_REASONS,
    Alignment,
    Chunk,
    Classification,
    Hypothesis,
    Label,
    LanguagePair,
    ModelSummary,
    Quality,
    TranslatedFile,
    Translation,
    summary_of,
    timing_of,
    translation_of,
)

DEFAULT_ADDRESS = "127.0.0.1:50051"
MAX_TIMEOUT_S = 365 * 86400.0  # a longer timeout is none: gRPC fails a deadline past its range at once

T = TypeVar("T")

__all__ = [
    "DEFAULT_ADDRESS",
    "TranslatedFile",
    "FileJob",
    "decoding_options",
    "read_glossary",
    "unsigned_max",
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
    "Quality",
    "Translation",
    "Translator",
]


class AttnServeError(Exception):
    """A failed call: ``code`` is the gRPC status (``grpc.StatusCode``), ``details`` the server's message."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details
        super().__init__(f"{code.name}: {details}")


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
    switches to TLS; add ``private_key`` and ``certificate_chain`` for mutual TLS (both, or a ValueError).
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
        if (private_key is None) != (certificate_chain is None):  # half a client identity: no TLS, or gRPC aborts
            raise ValueError("private_key and certificate_chain go together (mutual TLS): give both or neither")
        if retries < 0:  # taken as 0 before, without a word
            raise ValueError(f"retries must be 0 or more, got {retries}")
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

    @property
    def jobs(self) -> JobClient:
        """File jobs (``client.jobs``): submit, get, watch, cancel, result."""
        return JobClient(self)

    def _call(self, fn: Callable[[float], T], timeout: float | None) -> T:
        """``fn(seconds_left)`` with retries on UNAVAILABLE until the deadline; errors -> AttnServeError."""
        deadline = time.monotonic() + min(self.timeout if timeout is None else timeout, MAX_TIMEOUT_S)
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
        texts: str | Iterable[str],
        model: str = "",
        *,
        timeout: float | None = None,
        format: str = "text",
        glossary: Mapping[str, str] | None = None,
        keep: Sequence[str] = (),
        alignments: bool = False,
        quality: bool = False,
        **options: Any,
    ) -> list[Translation]:
        """One :class:`Translation` per text (a document: lines and sentences, joined back as sent).
        ``format``: "text", "html" or "markdown"; ``glossary``: source term -> target term the
        translation must spell verbatim ("" keeps the term); ``keep``: terms left as they are;
        ``alignments``: the best hypothesis carries one :class:`Alignment` per sentence;
        ``quality``: each translation carries its :class:`Quality` (0..1, from the model's own evidence);
        ``options``: see :func:`decoding_options`. No texts (an empty list) is no translations,
        without a call; a text that is not a ``str`` is a TypeError naming it."""
        texts = text_list(texts)
        if not texts:
            return []
        request = pb.TranslateRequest(
            model=model,
            texts=texts,
            options=decoding_options(**options),
            format=text_format(format),
            glossary=glossary_entries(glossary),
            keep=list(keep),
            return_alignments=alignments,
            return_quality=quality,
        )
        reply = self._call(lambda t: self.stub.Translate(request, timeout=t), timeout)
        return [dataclasses.replace(translation_of(t), pivot_language=reply.pivot_language) for t in reply.translations]

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
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        request = pb.TranslateRequest(
            model=model,
            texts=[text],
            options=decoding_options(**options),
            format=text_format(format),
            glossary=glossary_entries(glossary),
            keep=list(keep),
        )
        call, messages = self._stream(lambda t: self.stub.TranslateStream(request, timeout=t), timeout)
        try:
            for msg in messages:
                reason = FINISH_REASONS.get(msg.finish_reason, "")
                yield Chunk(msg.delta, list(msg.token_ids), reason, msg.pivot_language)
        finally:
            call.cancel()

    def translate_file(
        self,
        path: str | Path,
        target_language: str,
        source_language: str = "auto",
        model: str = "",
        *,
        glossary_id: str = "",
        progress: Callable[[int, int], None] | None = None,
        timeout: float | None = None,
    ) -> TranslatedFile:
        """Translate the file at ``path`` (its extension picks the format) as one request, with
        the stored glossary ``glossary_id`` where one is named; ``progress(done, total)`` hears
        of its sentences as the server decodes them. Closing early (an exception in
        ``progress``) cancels the call."""
        request = file_request(path, target_language, source_language, model, glossary_id)
        call, messages = self._stream(lambda t: self.stub.TranslateFile(request, timeout=t), timeout)
        parts: list[bytes] = []
        try:
            for msg in messages:
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

    def _stream(self, open_call: Callable[[float], Any], timeout: float | None) -> tuple[Any, Iterator[Any]]:
        """A server stream, retried as :meth:`_call` retries until its first message has arrived (a
        call is only made when it is read: UNAVAILABLE comes with the first message, not before);
        once a message has reached the caller it is not. Returns the call (to cancel) and its
        messages, each yielded as it arrives."""
        first: list[Any] = []

        def start(t: float) -> Any:
            call = open_call(t)
            try:
                first.append(next(call))
            except StopIteration:
                pass
            return call

        call = self._call(start, timeout)
        return call, itertools.chain(first, self._stream_rest(call))

    @staticmethod
    def _stream_rest(call: Any) -> Iterator[Any]:
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
        check_unsigned(pb.ClassifyRequest, top_k=top_k)
        request = pb.ClassifyRequest(model=model, images=[image_input(i) for i in images], top_k=top_k)
        reply = self._call(lambda t: self.stub.Classify(request, timeout=t), timeout)
        return [
            Classification(
                [Label(s.label, s.index, s.probability) for s in r.labels], r.batch_size, timing_of(r.timing)
            )
            for r in reply.results
        ]

    # ------------------------------------------------------------------ models

    def list_models(self, *, timeout: float | None = None) -> list[ModelSummary]:
        reply = self._call(lambda t: self.stub.ListModels(pb.ListModelsRequest(), timeout=t), timeout)
        return [summary_of(m) for m in reply.models]

    def language_pairs(self, *, timeout: float | None = None) -> list[LanguagePair]:
        """Every pair the server translates, directly and through its pivot language."""
        reply = self._call(lambda t: self.stub.ListModels(pb.ListModelsRequest(), timeout=t), timeout)
        return [LanguagePair(r.source, r.target, list(r.models), r.pivot_language) for r in reply.routes]

    def get_model(self, name: str, *, timeout: float | None = None) -> ModelSummary:
        return summary_of(self._call(lambda t: self.stub.GetModel(pb.GetModelRequest(name=name), timeout=t), timeout))

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


from .shortcuts import Classifier, Translator  # noqa: E402  (they wrap Client)
