"""Typed errors of the serving core. Handlers map each to one gRPC status (docs/architecture.md,
"Errors and limits"); the core itself never imports grpc."""

from __future__ import annotations

import math

ECHO_CHARS = 64  # of a client's value quoted in an error message
MAX_MESSAGE_CHARS = 1024  # of any error message sent to a client (gRPC sends it as trailing metadata)


def echo(value: object, limit: int = ECHO_CHARS, *, quoted: bool = True) -> str:
    """``repr(value)`` (``quoted=False``: ``str``) for an error message, cut to about ``limit``
    characters: a client's value (a model name, a language code, a word) is quoted, never copied
    whole: a 1M-character model name copied into the status would make it RESOURCE_EXHAUSTED
    ("metadata size exceeds") instead of NOT_FOUND."""
    text = value if isinstance(value, str) else repr(value)
    shown = repr if quoted else str
    if len(text) <= limit:
        return shown(value)
    return f"{shown(text[:limit])}... ({len(text):,} characters)"


def client_message(message: str, hidden: tuple[str, ...] = ()) -> str:
    """An error message as a client may see it: each of ``hidden`` (the model repository's
    absolute path) left out, and at most MAX_MESSAGE_CHARS characters. The last safeguard under
    :func:`echo`, applied to every error a call answers."""
    for text in hidden:
        if text:
            message = message.replace(text.rstrip("/") + "/", "").replace(text, "<model repository>")
    if len(message) > MAX_MESSAGE_CHARS:
        cut = len(message) - MAX_MESSAGE_CHARS
        message = f"{message[: MAX_MESSAGE_CHARS - 40]}... ({cut + 40:,} characters cut)"
    return message


class ServingError(Exception):
    """Base class: ``status`` names the gRPC status code the handler answers with."""

    status = "INTERNAL"


class InvalidRequest(ServingError):
    """Bad input the client can fix: empty or over-long text, bad option values, bad images."""

    status = "INVALID_ARGUMENT"


class InvalidOption(InvalidRequest):
    """A decoding option out of its range: ``option`` names it, ``maximum`` is its largest value."""

    def __init__(self, message: str, option: str, maximum: int | float | None = None) -> None:
        super().__init__(message)
        self.option, self.maximum = option, maximum


class LimitExceeded(InvalidRequest):
    """A request over one of the server's limits: ``limit`` names it (``max_texts_per_request``,
    ``max_text_chars``, ``max_request_chars``), ``value`` is the request's, ``maximum`` the limit."""

    def __init__(self, message: str, limit: str, value: int, maximum: int) -> None:
        super().__init__(message)
        self.limit, self.value, self.maximum = limit, value, maximum


class UnknownFormat(InvalidRequest):
    """A text format other than "text" or "html"."""

    def __init__(self, value: object, formats: tuple[str, ...]) -> None:
        super().__init__(f"format: unknown value {echo(value)} (one of {', '.join(formats)})")
        self.value = value


class ModelNotFound(ServingError):
    status = "NOT_FOUND"


class Overloaded(ServingError):
    """Queue full or too many tokens in flight; the client may retry later."""

    status = "RESOURCE_EXHAUSTED"


class RateLimited(Overloaded):
    """A client past one of its request rates (``--requests-per-minute``, ``--requests-per-hour``,
    ``--requests-per-day``, or its token's own in ``--auth-token-file``): ``limit`` requests a
    ``period`` ("minute", "hour", "day"),
    ``reason`` names the rate (the metrics' label), ``retry_after`` is the seconds until the next
    request is let in. HTTP answers 429 with ``Retry-After``; each door words it its own way."""

    http_status = 429

    def __init__(self, limit: int, period: str, reason: str, where: str, retry_after: float) -> None:
        self.limit, self.period, self.reason, self.retry_after = limit, period, reason, retry_after
        self.detail = f"{limit} per {period} for this client ({where}); retry in {self.retry_seconds} s"
        super().__init__(f"too many requests: {self.detail}")

    @property
    def retry_seconds(self) -> int:
        """``retry_after`` as ``Retry-After`` states it: whole seconds, rounded up, at least 1."""
        return max(1, math.ceil(self.retry_after))


class Banned(RateLimited):
    """A client banned for ``seconds`` (``--ban-seconds``) after ``refusals`` refusals past its
    request rates (``--ban-after-refusals``). A ban is temporary, so it keeps RateLimited's status
    and ``Retry-After`` (at the ban's end); LibreTranslate's door answers it with upstream's 403."""

    def __init__(self, refusals: int, seconds: float, retry_after: float) -> None:
        self.limit, self.period, self.reason, self.retry_after = refusals, f"{seconds:g} s", "banned", retry_after
        self.detail = (
            f"this client is banned for {seconds:g} s after {refusals} refusal{'s' * (refusals != 1)} past its "
            f"request rates (--ban-after-refusals, --ban-seconds); retry in {self.retry_seconds} s"
        )
        Overloaded.__init__(self, f"too many requests: {self.detail}")


class MonthlyQuotaExceeded(ServingError):
    """A client whose characters translated this month would pass its monthly quota
    (``--characters-per-month``, or its token's own in ``--auth-token-file``): RESOURCE_EXHAUSTED,
    HTTP 429; DeepL's door answers its own 456. It lasts until the month (UTC) ends, so it is not a
    request rate's refusal to retry in seconds."""

    status = "RESOURCE_EXHAUSTED"
    http_status = 429

    def __init__(self, detail: str) -> None:
        self.detail = detail  # what is used of which quota, and when it renews
        super().__init__(f"quota exceeded: {detail}")


class ShuttingDown(ServingError):
    """The server is draining and takes no new work."""

    status = "UNAVAILABLE"


class ModelUnavailable(ServingError):
    """A model of the repository that cannot be loaded now (its load failed; it is retried after a
    backoff), or not within the request's deadline (the memory budget is held by busy models)."""

    status = "UNAVAILABLE"


class StorageUnavailable(ServingError):
    """The server's disk cannot take a file now (full, over a size limit, gone); the client may retry later."""

    status = "UNAVAILABLE"


class InferenceFailed(ServingError):
    """onnxruntime failed on a batch; every request of that batch gets this."""

    status = "INTERNAL"


class ProcessGone(ServingError):
    """The process that runs this worker's models (``--shared-classifier``) exited: the server
    is stopping, and a supervisor starts it again."""

    status = "UNAVAILABLE"


class DeadlineExceeded(ServingError):
    """The request's own time limit (a KServe ``timeout`` parameter) passed; its work was dropped."""

    status = "DEADLINE_EXCEEDED"


class NotEnabled(ServingError):
    """A feature this server was started without (the admin operations without ``--enable-admin``)."""

    status = "UNIMPLEMENTED"
