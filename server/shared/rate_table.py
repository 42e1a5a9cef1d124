"""The request-rate state of the processes of ``--workers N``, shared: one table in a memory-mapped
file, so a client gets its rates (``rates.py``) whichever worker its connections reach.

The parent creates the file (:func:`create_table`, in ``/dev/shm``) with a random key, each worker
opens it before it serves (:func:`use_table`), and the parent unlinks it once every worker has:
nothing is left behind, however the set ends. A client is found by a keyed hash of its name (its
token's sha256 or its address): 8 bytes, never 0 (an empty slot), whose remainder picks a set of
``WAYS`` slots. The key is the server's own, so no one can choose addresses that fall in one set.

A set holds its slots' hashes, the time each was last seen and their ``SLOTS`` timestamps. A client
not in its set takes an empty slot, else one whose client has nothing left to count (buckets full,
refusals forgiven, ban over: it would start afresh the same), else the least recently seen's. The
table has twice ``MAX_CLIENTS`` slots, so sets fill rarely before that many clients are counted at
once; past it, as in one process, the least recently seen are forgotten.

A request reads and writes its set under ``flock`` on the file (and a lock for this process's
threads): the kernel releases it when a process dies, so a worker killed mid-request cannot leave
the others waiting. It takes a few microseconds, on requests with a rate only.
"""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import struct
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .locations import SHARED_MEMORY_DIR
from .rates import MAX_CLIENTS, SLOTS

WAYS = 8
# a set: its slots' hashes, then when each was last seen, then each slot's SLOTS timestamps
_SET = struct.Struct(f"<{WAYS}Q{WAYS}d{WAYS * SLOTS}d")
_SEEN = WAYS * 8  # byte offsets in a set
_STATE = WAYS * 16


def create_table(max_clients: int = MAX_CLIENTS) -> tuple[str, bytes]:
    """A new, empty table's file for ``max_clients`` clients (sparse: memory is taken as sets are
    first written), and the key of its hash; the caller unlinks the file."""
    sets = max(1, 2 * max_clients // WAYS)
    fd, path = tempfile.mkstemp(prefix=f"attnserve-rates-{os.getpid()}-", dir=SHARED_MEMORY_DIR)
    try:
        os.ftruncate(fd, sets * _SET.size)
    finally:
        os.close(fd)
    return path, os.urandom(16)


class ClientTable:
    """A process's view of the shared table at ``path`` (see the module's docstring)."""

    def __init__(self, path: str, key: bytes) -> None:
        self.key = key
        self.fd = os.open(path, os.O_RDWR)
        size = os.fstat(self.fd).st_size
        if size == 0 or size % _SET.size:
            os.close(self.fd)
            raise ValueError(f"{path} is not a request-rate table ({size} bytes)")
        self.map = mmap.mmap(self.fd, size)
        self.sets = size // _SET.size
        self._threads = threading.Lock()

    @contextmanager
    def state(self, client: str, now: float) -> Iterator[list[float]]:
        digest = hashlib.blake2b(client.encode(), digest_size=8, key=self.key).digest()
        h = int.from_bytes(digest, "little") | 1
        base = h % self.sets * _SET.size
        with self._threads:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            try:
                values = _SET.unpack_from(self.map, base)
                way = _way(values, h, now)
                start = 2 * WAYS + way * SLOTS
                full_at = list(values[start : start + SLOTS]) if values[way] == h else [0.0] * SLOTS
                try:
                    yield full_at
                finally:
                    struct.pack_into("<Q", self.map, base + way * 8, h)
                    struct.pack_into("<d", self.map, base + _SEEN + way * 8, now)
                    struct.pack_into(f"<{SLOTS}d", self.map, base + _STATE + way * SLOTS * 8, *full_at)
            finally:
                fcntl.flock(self.fd, fcntl.LOCK_UN)

    def close(self) -> None:
        self.map.close()
        os.close(self.fd)


def _way(values: tuple, h: int, now: float) -> int:
    """The slot of the set ``values`` for the client hashed ``h``: its own, else an empty one, else
    one with nothing left to count, else the least recently seen."""
    hashes = values[:WAYS]
    if h in hashes:
        return hashes.index(h)
    if 0 in hashes:
        return hashes.index(0)
    for way in range(WAYS):
        start = 2 * WAYS + way * SLOTS
        if max(values[start : start + SLOTS]) <= now:
            return way
    seen = values[WAYS : 2 * WAYS]
    return seen.index(min(seen))


_table: ClientTable | None = None


def use_table(path: str | None, key: bytes = b"") -> None:
    """In a worker of ``--workers N``, before it serves: count every client in the parent's table
    at ``path`` (opened now, so that the parent may unlink it once every worker is ready)."""
    global _table
    _table = ClientTable(path, key) if path else None


def shared_table() -> ClientTable | None:
    """The table :func:`use_table` opened in this process; None in a server of one process."""
    return _table
