"""Triton's system shared memory extension on the KServe gRPC door.

A client creates a POSIX shared memory object (``/dev/shm/<key>``), registers a region of it
by name (``SystemSharedMemoryRegister``: ``key``, ``offset``, ``byte_size``), and then names the
region in a tensor's parameters instead of sending the tensor: ``shared_memory_region``,
``shared_memory_byte_size`` and the optional ``shared_memory_offset`` (into the region). An
input is read in place (a read-only view of the mapping: no copy on the way in, so grpcio's
receive path carries a few hundred bytes instead of the tensor); an output is written into the
region and its entry of ``raw_output_contents`` left empty, as Triton does
(``src/shared_memory_manager.cc``, ``src/grpc/infer_handler.cc``).

Any process on the host that can reach the gRPC port could name any shared memory object the
server's user may open, so the extension is off unless the operator starts the server with
``--shared-memory system``. Keys are single names under ``/dev/shm``: no path separator after
POSIX's optional leading ``/``, no ``..``, opened without following a symbolic link, and only
a regular file is mapped. A client that shrinks a registered object makes the next read of the
mapping fault (SIGBUS), as in Triton: the operator's trust in the clients is the guard.

A region unregistered while a request reads or writes it stays mapped until that request
lets go of its views (the mapping is closed only when nothing exports it; otherwise the last
view unmaps it), as Triton defers the unmap of a region in use.
"""

from __future__ import annotations

import mmap
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...shared.errors import InvalidRequest, NotEnabled, Overloaded, ServingError, echo

SHM_DIR = Path("/dev/shm")
REGION, OFFSET, BYTE_SIZE = "shared_memory_region", "shared_memory_offset", "shared_memory_byte_size"
PARAMETERS = (REGION, OFFSET, BYTE_SIZE)
MAX_REGIONS = 1024  # regions one server process keeps mapped at once
MAX_NAME_CHARS = 256  # of a region's name (it is kept, and listed by Status)
OFF = (
    "system shared memory is off on this server: start it with --shared-memory system "
    "(only where every client that reaches the gRPC port may read and write the host's /dev/shm)"
)


class RegionNotFound(ServingError):
    """A region name, or a key under /dev/shm, that does not exist."""

    status = "NOT_FOUND"


class RegionExists(ServingError):
    status = "ALREADY_EXISTS"


@dataclass
class Region:
    """One registered region: ``byte_size`` bytes from ``offset`` of the object ``key``."""

    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap  # from the page holding ``offset``
    start: int  # where the region begins in ``mapping``


def check_key(key: str) -> str:
    """The object's file name under /dev/shm; a key that could leave it is refused."""
    name = key[1:] if key.startswith("/") else key
    if not name or "/" in name or "\\" in name or ".." in name or "\0" in name or name == ".":
        raise InvalidRequest(
            f"shared memory key {echo(key)} is not the name of a POSIX shared memory object "
            "(one name, an optional leading '/', no other path separator and no '..')"
        )
    return name


def _map(key: str, offset: int, byte_size: int, directory: Path) -> tuple[mmap.mmap, int]:
    """(mapping, start of the region in it) of ``byte_size`` bytes from ``offset`` of the object."""
    path = directory / check_key(key)
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise RegionNotFound(f"no shared memory object {echo(key)} (under {directory})") from None
    except OSError as exc:  # ELOOP: a symbolic link; EACCES, EISDIR, ENAMETOOLONG
        raise InvalidRequest(f"shared memory key {echo(key)} cannot be opened: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidRequest(f"shared memory key {echo(key)} is not a shared memory object")
        if offset + byte_size > info.st_size:
            raise InvalidRequest(
                f"shared memory region of {echo(key)}: offset {offset} + byte_size {byte_size} is past "
                f"the object's {info.st_size} bytes"
            )
        aligned = offset - offset % mmap.ALLOCATIONGRANULARITY  # mmap maps whole pages
        return mmap.mmap(fd, offset - aligned + byte_size, offset=aligned), offset - aligned
    finally:
        os.close(fd)


def _close(region: Region) -> None:
    try:
        region.mapping.close()
    except BufferError:  # a request still holds a view: the last view unmaps it
        pass


class SystemSharedMemory:
    """The registered regions of one server process, by name (the event loop's thread only)."""

    def __init__(self, enabled: bool, directory: Path = SHM_DIR) -> None:
        self.enabled, self.directory = enabled, directory
        self.regions: dict[str, Region] = {}

    def _check_enabled(self) -> None:
        if not self.enabled:
            raise NotEnabled(OFF)

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self._check_enabled()
        if not name or len(name) > MAX_NAME_CHARS:
            raise InvalidRequest(f"a shared memory region needs a name of 1 to {MAX_NAME_CHARS} characters")
        if name in self.regions:
            raise RegionExists(f"shared memory region {echo(name)} is already registered: unregister it first")
        if offset < 0 or byte_size <= 0:
            raise InvalidRequest(f"shared memory region {echo(name)}: offset must be >= 0 and byte_size > 0")
        if len(self.regions) >= MAX_REGIONS:
            raise Overloaded(f"{MAX_REGIONS} shared memory regions are registered: unregister some first")
        mapping, start = _map(key, offset, byte_size, self.directory)
        self.regions[name] = Region(name, key, offset, byte_size, mapping, start)

    def status(self, name: str = "") -> list[Region]:
        """Every region (``name`` empty), or the one named."""
        self._check_enabled()
        if not name:
            return sorted(self.regions.values(), key=lambda r: r.name)
        return [self._get(name)]

    def unregister(self, name: str = "") -> None:
        """The region named (none registered by that name: nothing to do, as Triton), or all."""
        self._check_enabled()
        for region in [self.regions.pop(name, None)] if name else list(self.regions.values()):
            if region is not None:
                _close(region)
        if not name:
            self.regions.clear()

    def _get(self, name: str) -> Region:
        region = self.regions.get(name)
        if region is None:
            raise RegionNotFound(f"no shared memory region {echo(name)} is registered")
        return region

    def view(self, tensor: str, parameters: dict[str, Any]) -> memoryview:
        """The bytes a tensor's shared memory parameters name; ``tensor``: "input X", "output Y"."""
        self._check_enabled()
        name, offset, size = _parameters(tensor, parameters)
        region = self._get(name)
        if offset >= region.byte_size or size > region.byte_size - offset:
            raise InvalidRequest(
                f"{tensor}: {OFFSET} {offset} + {BYTE_SIZE} {size} is outside shared memory region "
                f"{echo(name)} ({region.byte_size} bytes)"
            )
        start = region.start + offset
        return memoryview(region.mapping)[start : start + size]


def _parameters(tensor: str, parameters: dict[str, Any]) -> tuple[str, int, int]:
    """(region, offset, byte size) of a tensor's parameters, each of its type (Triton's rules)."""
    name, offset, size = parameters.get(REGION), parameters.get(OFFSET, 0), parameters.get(BYTE_SIZE)
    if REGION not in parameters:
        raise InvalidRequest(f"{tensor}: {OFFSET} and {BYTE_SIZE} need {REGION}")
    if not isinstance(name, str):
        raise InvalidRequest(f"{tensor}: {REGION} must be a string, got {echo(name)}")
    if size is None:
        raise InvalidRequest(f"{tensor}: {BYTE_SIZE} must be given with {REGION}")
    for key, value in ((OFFSET, offset), (BYTE_SIZE, size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidRequest(f"{tensor}: {key} must be an integer >= 0, got {echo(value)}")
    return name, offset, size


def uses_shared_memory(parameters: dict[str, Any]) -> bool:
    return not parameters.keys().isdisjoint(PARAMETERS)


def without_shared_memory(parameters: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in parameters.items() if k not in PARAMETERS}
