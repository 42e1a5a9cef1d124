"""The translation service's limits on what a request's texts are, checked before any text is read:
the refusals' wording in one place (``--max-texts-per-request``, ``--max-text-chars``,
``--max-request-chars``)."""

from __future__ import annotations

from attnserve.contract.deadline import Deadline

from ..config import Settings
from ..errors import InvalidRequest, LimitExceeded


def check_texts(settings: Settings, texts: tuple[str, ...] | list[str]) -> None:
    """The server's limits on a request's texts, checked before anything is read."""
    s = settings
    if not texts:
        raise InvalidRequest("no texts to translate")
    if len(texts) > s.max_texts_per_request:
        raise LimitExceeded(
            f"{len(texts)} texts in one request; the limit is {s.max_texts_per_request}: split the request",
            "max_texts_per_request", len(texts), s.max_texts_per_request,
        )  # fmt: skip
    for i, text in enumerate(texts):
        if len(text) > s.max_text_chars:
            raise LimitExceeded(
                f"text {i} is {len(text):,} characters; this server takes at most {s.max_text_chars:,} per "
                "text: split it",
                "max_text_chars", len(text), s.max_text_chars,
            )  # fmt: skip
    total = sum(map(len, texts))
    if total > s.max_request_chars:
        raise LimitExceeded(
            f"the texts of this request are {total:,} characters together; this server takes at most "
            f"{s.max_request_chars:,} per request: send them in several requests",
            "max_request_chars", total, s.max_request_chars,
        )  # fmt: skip
    for i, text in enumerate(texts):
        if not text.strip():
            raise InvalidRequest(f"text {i} is empty")


def check_prefix(settings: Settings, prefix: str) -> None:
    """A ``target_prefix`` is client text like the texts: at most ``max_text_chars``, checked
    before it is tokenised (4M characters would hold the event loop for seconds)."""
    limit = settings.max_text_chars
    if len(prefix) > limit:
        raise LimitExceeded(
            f"target_prefix is {len(prefix):,} characters; this server takes at most {limit:,} per text",
            "max_text_chars", len(prefix), limit,
        )  # fmt: skip


def time_limit(deadline: Deadline | None, seconds: float, file: bool = False) -> Deadline | None:
    """A request's deadline, or the server's time limit of ``seconds`` from now when that passes first
    (``--request-timeout-seconds``, a file's ``--file-timeout-seconds``; 0: none)."""
    per = " per file (--file-timeout-seconds)" if file else " (--request-timeout-seconds)"
    return Deadline.within(deadline, seconds, f"the server's time limit of {seconds:g} s{per}")
