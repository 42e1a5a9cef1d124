"""The classification service: every door's image requests, from the model to the batcher and back.

It resolves the model (and the KServe version), applies the server's default ``top_k``,
hands the images to the model's classifier (decoding and resizing on the bounded work pool,
then the dynamic batcher), bounds the wait by the request's deadline (a request that
expires leaves the batcher's queue before it reaches the model) and books the call: its
model, the images answered and their longest queue time. The batcher records the queue
time and batch size metrics of every image.
"""

from __future__ import annotations

from concurrent.futures import Executor

from attnserve.contract.kinds import IMAGE_CLASSIFICATION

from ..images.classifier import ImageResult
from ..runtime.registry import ModelRegistry
from ..shared.config import Settings
from . import limits
from .requests import ClassificationRequest
from .translation import bounded, check_version


class ClassificationService:
    def __init__(self, registry: ModelRegistry, settings: Settings, pool: Executor) -> None:
        self.registry, self.settings, self.pool = registry, settings, pool

    async def classify(self, request: ClassificationRequest) -> tuple[str, list[ImageResult]]:
        """(the model's name, one result per image, in order)."""
        call = request.caller
        deadline = limits.time_limit(request.deadline, self.settings.request_timeout_seconds)

        def waited(seconds: float) -> None:
            call.load_ms += seconds * 1e3

        async with self.registry.use(request.model, IMAGE_CLASSIFICATION, deadline, waited) as model:
            check_version(model, request.version)
            call.model = model.name
            top_k = request.top_k or self.settings.default_top_k
            classifying = model.classifier.classify(list(request.images), top_k, self.pool)
            results = await bounded(classifying, deadline)
            call.items, call.queue_s = len(results), max(r.queue_ms for r in results) / 1e3
        return model.name, results
