"""The HTTP routes as one table: a row per (method, path, handler) with the row's options, which
the HTTP server registers (``server.HttpServer``). Each door's route module adds its rows."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from ...shared.calls import Call
from ...shared.errors import RateLimited
from ..context import DoorContext
from .parse_process import ParseProcess

Handler = Callable[[web.Request, Call], Awaitable[web.StreamResponse]]
Errors = Callable[[str, str, int | None], web.Response]  # (gRPC status name, message, HTTP status) -> the answer
Token = Callable[[web.Request], Awaitable[str | None]]  # a request's api key, read once its body is in


@dataclass(frozen=True)
class Route:
    """One row; the options are :meth:`server.HttpServer.serve`'s."""

    method: str
    path: str
    handler: Handler
    label: str  # the metrics' method label
    inference: bool = False
    open: bool = False
    tracked: bool = True
    cors: bool = False
    body_limit: int | None = None
    body_setting: str = "12 x --max-request-chars + 64 KiB"
    authenticate: Callable[[web.Request], None] | None = None
    errors: Errors | None = None  # a protocol's own error shape
    metered: bool = True  # counts against its client's request rates (not a listing: /languages)
    token: Token | None = None  # the token the door reads (default: the Authorization header's bearer)
    # the protocol's HTTP status and words for a refusal by a request rate or a ban
    slowdown: Callable[[RateLimited], tuple[int, str]] | None = None


class RouteTable:
    """The rows the route modules add, and what they are built from: the doors' context, the
    aiohttp application (for a route module's start-up and clean-up hooks) and the HTTP server's
    process for parsing large JSON bodies."""

    def __init__(self, doors: DoorContext, web_app: web.Application, parse_process: ParseProcess) -> None:
        self.doors, self.web, self.parse_process = doors, web_app, parse_process
        self.rows: list[Route] = []
        self.refusals: dict[str, Errors | None] = {}

    def route(self, method: str, path: str, handler: Handler, *, label: str, **options) -> None:
        self.rows.append(Route(method, path, handler, label, **options))

    def refuse(self, prefix: str, errors: Errors | None) -> None:
        """A request whose path starts with ``prefix`` and matches no route (an unknown path, a
        wrong method) is refused in ``errors``' shape (None: the server's ``{"error": ...}``). Two
        doors share ``/v2/``, so the longest prefix that matches decides: DeepL's clients read
        ``{"message": ...}``, Triton's ``{"error": ...}``."""
        self.refusals[prefix] = errors

    def refusal(self, path: str) -> Errors | None:
        """The error shape of an unrouted ``path`` (:meth:`refuse`)."""
        matching = [prefix for prefix in self.refusals if path.startswith(prefix)]
        return self.refusals[max(matching, key=len)] if matching else None
