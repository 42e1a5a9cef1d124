"""What a door may read of the models: their names, descriptors and readiness (KServe's model
metadata, repository index and statistics; attnserve.v1's ListModels and GetModel). A door holds
this view, never the registry: it cannot load, swap or run a model, only describe one.

The view hands out the registry's records of the models, which a door reads and never changes: a
model a request may name (``Served``: loaded, or only indexed until its first request; its name,
kind, manifest and provider) and one that failed to load (``FailedModel``: its public reason). What
a loaded model's parts know (how often they ran) the view answers itself."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from ..runtime.registry import FailedModel, IndexedModel, LoadedModel, ModelRegistry
from ..runtime.residency import Residency
from ..shared.errors import ModelNotFound, client_message, echo
from .requests import MODEL_VERSION
from .translation import check_version

Served = LoadedModel | IndexedModel
__all__ = ["FailedModel", "ModelView", "Served"]


class ModelView:
    """A read-only view of the registry and, lazily served, the residency; ``serving()`` says
    whether the server takes work (started and not draining)."""

    def __init__(self, registry: ModelRegistry, residency: Residency | None, serving: Callable[[], bool]) -> None:
        self._registry, self._residency, self._serving = registry, residency, serving
        # live views of the registry's own dicts, which it updates in place
        self.models: Mapping[str, LoadedModel] = MappingProxyType(registry.models)
        self.index: Mapping[str, IndexedModel] = MappingProxyType(registry.index)
        self.failed: Mapping[str, FailedModel] = MappingProxyType(registry.failed)

    @property
    def ready(self) -> bool:
        """Taking work (KServe's server readiness; health ``""`` says the same)."""
        return self._serving()

    def served(self) -> list[str]:
        """The names a request may ask for: loaded, or (lazily served) loaded on their first request."""
        return self._registry.served()

    def failing(self, name: str) -> bool:
        """Lazily served: its last load failed and is not retried yet."""
        return self._residency is not None and self._residency.failing(name)

    def model_ready(self, name: str, version: str = "") -> bool:
        """Loaded, or (lazily served) indexed and not failing to load: a request for it is served."""
        served = name in self._registry.served() and not self.failing(name)
        return served and self.ready and version in ("", MODEL_VERSION)

    def get(self, name: str, version: str = "") -> Served:
        """A served model by KServe's (name, version), loaded or only indexed; NOT_FOUND for an
        unknown name or version."""
        model = self._registry.get(name, None)
        check_version(model, version)
        return model

    def find(self, name: str) -> Served | FailedModel:
        """Any model of the repository by name, the ones that failed to load among them."""
        model = self.models.get(name) or self.index.get(name) or self.failed.get(name)
        if model is None:
            raise ModelNotFound(f"unknown model {echo(name)}; served: {', '.join(self.served())}")
        return model

    def loaded(self, name: str) -> bool:
        """Its sessions are open (lazily served: it is resident now)."""
        return name in self._registry.models

    def executions(self, name: str) -> int:
        """How often the loaded model ran (KServe's execution count): onnxruntime calls of an image
        classifier's batches, a translation engine's decoder steps; 0 while it is not loaded."""
        model = self._registry.models.get(name)
        if model is None:
            return 0
        if model.classifier is not None:
            return model.classifier.batcher.batches_total
        return getattr(model.engine, "steps_total", 0)

    def state(self, name: str) -> tuple[str, str]:
        """(KServe repository index state, reason) of an indexed model; a failed load's reason as
        clients see it (paths within the model repository, never absolute)."""
        if self._residency is None:
            return ("READY", "") if name in self._registry.models else ("UNAVAILABLE", "not loaded")
        where, reason = self._residency.state(name)
        indexed = self._registry.index.get(name)
        if indexed is not None:
            repo = indexed.model_dir.parent
            reason = client_message(reason, (str(repo.resolve()), str(repo.absolute())))
        return where, reason

    def load_failure(self, name: str) -> str:
        """Lazily served: why its last load failed, as clients see it ("" when it did not)."""
        return self.state(name)[1] if self.failing(name) else ""
