"""The front doors: one codec per protocol.

A door decodes its wire format into the canonical request of ``attnserve.server.service``
(a ``TranslationRequest`` or a ``ClassificationRequest``), awaits the service, and encodes
the result, or the typed error, in its own status and message shape. Routing, limits,
documents, deadlines, bookkeeping and metrics are the service's; what a door checks is the
shape of its own messages (a field's type, a tensor's shape, a parameter it does not know).

- ``v1``: attnserve.v1 over gRPC (``v1_codec``: its messages; ``v1_files``: its files and file jobs);
- ``kserve``: KServe v2 / Triton's ``inference.GRPCInferenceService`` over gRPC, and the
  tensor conventions its REST routes share (``kserve.infer``);
- ``http``: the aiohttp server: KServe v2 REST, Triton's generate / generate_stream,
  LibreTranslate.

Every door holds a ``context.DoorContext``: the services, a read-only view of the models, the
auth hook; never the application object. Doors do not import each other: what several share
sits here (``context``, ``params``, ``wire``, ``access_log``). Nor do they import the layers
under the service: the types they encode come from ``service`` (``service.vocabulary`` names the
ones defined below it), what they read of the models from ``service.models.ModelView``.
"""

from __future__ import annotations

from typing import Any

from attnserve.contract.deadline import Deadline


def client_deadline(context: Any) -> Deadline | None:
    """The gRPC client's deadline of a call (``grpc.aio.ServicerContext``), if it set one."""
    return Deadline.from_timeout(context.time_remaining())
