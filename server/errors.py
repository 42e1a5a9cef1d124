"""Typed errors of the serving core. Handlers map each to one gRPC status (docs/architecture.md,
"Errors and limits"); the core itself never imports grpc."""

from __future__ import annotations


class ServingError(Exception):
    """Base class: ``status`` names the gRPC status code the handler answers with."""

    status = "INTERNAL"


class InvalidRequest(ServingError):
    """Bad input the client can fix: empty or over-long text, bad option values, bad images."""

    status = "INVALID_ARGUMENT"


class ModelNotFound(ServingError):
    status = "NOT_FOUND"


class Overloaded(ServingError):
    """Queue full or too many tokens in flight; the client may retry later."""

    status = "RESOURCE_EXHAUSTED"


class ShuttingDown(ServingError):
    """The server is draining and takes no new work."""

    status = "UNAVAILABLE"


class InferenceFailed(ServingError):
    """onnxruntime failed on a batch; every request of that batch gets this."""

    status = "INTERNAL"


class DeadlineExceeded(ServingError):
    """The request's own time limit (a KServe ``timeout`` parameter) passed; its work was dropped."""

    status = "DEADLINE_EXCEEDED"


class NotEnabled(ServingError):
    """A feature this server was started without (the admin operations without ``--enable-admin``)."""

    status = "UNIMPLEMENTED"
