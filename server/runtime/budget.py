"""The memory budget of the lazy loader (``residency.py``): which models hold room in it, which
may give theirs up to a load (idle and old enough; or, drained, one in steady use once a load has
waited for it), and the checks at start and before a request waits."""

from __future__ import annotations

import time

from attnserve.contract.deadline import Deadline

from ..shared.config import Settings
from ..shared.errors import Overloaded, echo
from .registry import IndexedModel, ModelRegistry, RepositoryError


class Room:
    """The budget's state: ``reserved`` holds every model loaded, loading or draining."""

    def __init__(self, settings: Settings, registry: ModelRegistry) -> None:
        self.settings, self.registry = settings, registry
        self.pinned = frozenset(settings.pinned)
        self.reserved: dict[str, int] = {}  # loaded, loading or draining -> budget bytes
        self.waiters: dict[str, int] = {}  # requests waiting for a model's load
        self.queue: list[str] = []  # loads waiting for room, first come first
        self.loaded_at: dict[str, float] = {}  # time.monotonic() each loaded model came in
        self.draining: set[str] = set()  # unloaded for a waiting load once their requests finish

    def check(self) -> None:
        """The budget can hold the largest model and the pinned ones; RepositoryError otherwise."""
        s, index = self.settings, self.registry.index
        unknown = sorted(self.pinned - set(index))
        if unknown:
            raise RepositoryError(f"pinned_models: no servable model named {', '.join(unknown)} in the repository")
        if s.model_memory_bytes and index:
            largest = max(index.values(), key=lambda m: m.budget_bytes)
            if largest.budget_bytes > s.model_memory_bytes:
                raise RepositoryError(
                    f"model_memory_bytes {s.model_memory_bytes:,} cannot hold model {largest.name}, which takes "
                    f"{largest.budget_bytes:,} bytes ({largest.weight_bytes:,} of files + its KV-cache budget: "
                    "--max-kv-cache-bytes, else --max-tokens-in-flight tokens)"
                )
            pinned = sum(index[n].budget_bytes for n in self.pinned)
            if pinned > s.model_memory_bytes:
                raise RepositoryError(
                    f"model_memory_bytes {s.model_memory_bytes:,} cannot hold the pinned models ({pinned:,} bytes)"
                )
        if s.max_loaded_models and len(self.pinned) > s.max_loaded_models:
            raise RepositoryError(f"{len(self.pinned)} pinned models exceed max_loaded_models {s.max_loaded_models}")

    def fits(self, entry: IndexedModel) -> bool:
        s = self.settings
        count_ok = not s.max_loaded_models or len(self.reserved) + 1 <= s.max_loaded_models
        bytes_ok = not s.model_memory_bytes or sum(self.reserved.values()) + entry.budget_bytes <= s.model_memory_bytes
        return count_ok and bytes_ok

    def free(self, entry: IndexedModel) -> bool:
        """``entry`` fits now, no other load waiting: room that unloads nothing."""
        return not self.queue and self.fits(entry)

    def idle(self) -> list[str]:
        """Loaded models that could be unloaded to make room, the least recently used first, old enough or not."""
        idle = [
            name
            for name, model in self.registry.models.items()
            if model.users == 0 and not self.waiters.get(name) and name not in self.pinned and name in self.reserved
        ]
        return sorted(idle, key=lambda n: self.registry.last_used.get(n, 0.0))

    def resident_until(self, name: str) -> float:
        """When ``name`` may be unloaded to make room: --min-resident-seconds after its last use."""
        return self.registry.last_used.get(name, 0.0) + self.settings.min_resident_seconds

    def idlest(self) -> str | None:
        now = time.monotonic()
        return next((n for n in self.idle() if self.resident_until(n) <= now), None)

    def to_drain(self) -> str | None:
        """The least recently used model, busy or not, loaded --min-resident-seconds ago (None: none)."""
        now, minimum = time.monotonic(), self.settings.min_resident_seconds
        ready = [
            n
            for n in self.registry.models
            if n in self.reserved and n not in self.pinned and not self.waiters.get(n)
            if self.loaded_at.get(n, 0.0) + minimum <= now
        ]
        return min(ready, key=lambda n: self.registry.last_used.get(n, 0.0), default=None)

    def refuse_if_no_room_in_time(self, entry: IndexedModel, deadline: Deadline) -> None:
        """RESOURCE_EXHAUSTED now, rather than DEADLINE_EXCEEDED later, when the models in the way of
        ``entry``'s load are all idle but none may be unloaded before the request's deadline."""
        if self.fits(entry):
            return
        at = room_at(self.settings, self.reserved, entry, [(n, self.resident_until(n)) for n in self.idle()])
        if at is not None and at - time.monotonic() > deadline.remaining():
            raise no_room(entry.name, len(self.reserved), self.settings.min_resident_seconds, at - time.monotonic())


def room_at(
    settings: Settings, reserved: dict[str, int], entry: IndexedModel, idle: list[tuple[str, float]]
) -> float | None:
    """When unloading the ``idle`` models (name, when it may go; least recently used first) as they
    come of age makes room for ``entry`` beside the ``reserved`` ones; None when that is not enough
    and models in use or loads under way must finish first (no telling when)."""
    count, size = len(reserved), sum(reserved.values())
    for name, at in idle:
        count, size = count - 1, size - reserved[name]
        if (not settings.max_loaded_models or count + 1 <= settings.max_loaded_models) and (
            not settings.model_memory_bytes or size + entry.budget_bytes <= settings.model_memory_bytes
        ):
            return at
    return None


def no_room(name: str, loaded: int, minimum: float, wait: float) -> Overloaded:
    return Overloaded(
        f"model {echo(name)} is not loaded and there is no room for it within this request's deadline: "
        f"the {loaded} loaded models were each used less than {minimum:g} s ago "
        f"(--min-resident-seconds; the budget: --max-loaded-models, --model-memory-bytes); room is made in {wait:.1f} s"
    )
