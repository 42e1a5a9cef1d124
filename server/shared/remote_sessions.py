"""Sessions that run in another process: the workers' side of ``--shared-classifier``.

With ``--workers N --shared-classifier`` one more process (``entry/session_host.py``) holds the
classification models' onnxruntime sessions, one per model for every worker: on a GPU, one CUDA
context whose batches are those of all the workers at once, instead of N contexts taking turns
with a batch each. A worker's :class:`RemoteSession` stands where its session would: the model's
:class:`~attnserve.server.images.classifier.ImageClassifier` batches its own requests as ever and
runs each batch through :meth:`RemoteSession.run`, which writes the inputs into a memory-mapped
file the host reads in place (no pickling of pixels: a 32-image batch is 19 MB) and waits for the
outputs. The host runs the batches that arrive together as one (``session_host.merge_runs``).

Every thread that runs a session has its own connection and its own mapped file (the classifier's
two batches in flight are two threads): nothing is shared between threads, so no lock is held
while the host runs. The file is unlinked once the host has mapped it: a crash of either process
leaves nothing behind in ``/dev/shm``.
"""

from __future__ import annotations

import mmap
import os
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import current_process
from multiprocessing.connection import Client, Connection
from pathlib import Path

import numpy as np

from .errors import InferenceFailed, ProcessGone
from .locations import SHARED_MEMORY_DIR
from .onnx_sessions import ProviderError

MIN_SEGMENT_BYTES = 1 << 20
ALIGN = 64  # each input starts at a multiple of this many bytes of the mapped file

_host: str | None = None  # the address of this process's session host, when it has one


def use_host(address: str | None) -> None:
    """This process's classifiers run in the session host at ``address`` (None: in process)."""
    global _host
    _host = address


def host_address() -> str | None:
    return _host


@dataclass(frozen=True)
class NodeInfo:
    """What onnxruntime's ``NodeArg`` says of an input or output, sent across processes."""

    name: str
    type: str
    shape: list


def describe(nodes) -> list[NodeInfo]:
    return [NodeInfo(n.name, n.type, list(n.shape)) for n in nodes]


def connect(address: str) -> Connection:
    """A connection to the host (its authentication key is the one every process of the server
    inherits from the parent)."""
    try:
        return Client(address, family="AF_UNIX", authkey=current_process().authkey)
    except OSError as exc:
        raise ProcessGone(f"the shared classifier process at {address} cannot be reached: {exc}") from exc


class Segment:
    """A memory-mapped file this process writes a run's inputs into; unlinked once the host mapped
    it (the host keeps its mapping by ``path``)."""

    def __init__(self, size: int) -> None:
        self.size = max(MIN_SEGMENT_BYTES, 1 << (size - 1).bit_length())
        fd, self.path = tempfile.mkstemp(prefix=f"attnserve-{os.getpid()}-", dir=SHARED_MEMORY_DIR)
        try:
            os.ftruncate(fd, self.size)
            self.map = mmap.mmap(fd, self.size)
        finally:
            os.close(fd)
        self.linked = True  # until the host has mapped it

    def unlink(self) -> None:
        if self.linked:
            self.linked = False
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def array(self, shape: tuple, dtype) -> np.ndarray:
        """An array of ``shape`` at the start of the file."""
        dtype = np.dtype(dtype)
        return np.frombuffer(self.map, dtype, int(np.prod(shape, dtype=np.int64)), 0).reshape(shape)


class _Link(threading.local):
    conn: Connection | None = None
    segment: Segment | None = None


class RemoteSession:
    """An onnxruntime session opened in the session host: ``run``, ``get_inputs``,
    ``get_outputs`` and ``get_providers`` as the session's own."""

    def __init__(self, address: str, path: Path, provider: str, threads: int) -> None:
        self.address, self.path = address, Path(path)
        self._link = _Link()
        stamp = self.path.stat()
        self.key = (str(self.path), stamp.st_size, stamp.st_mtime_ns)
        self.user = f"{os.getpid()}-{uuid.uuid4().hex}"  # this session's hold on the host's: one open, one close
        try:
            meta = self._call(("open", self.key, provider, threads, self.user))
        except (InferenceFailed, ProcessGone) as exc:  # a load failure, as a session of its own would have
            raise ProviderError(str(exc)) from exc
        self._inputs, self._outputs, self._providers = meta["inputs"], meta["outputs"], meta["providers"]
        self.on_run: Callable[[int], None] | None = None  # told the rows of the host's run each batch was part of

    def get_inputs(self) -> list[NodeInfo]:
        return self._inputs

    def get_outputs(self) -> list[NodeInfo]:
        return self._outputs

    def get_providers(self) -> list[str]:
        return self._providers

    def staging(self, shape: tuple, dtype=np.float32) -> np.ndarray:
        """An array of ``shape`` in this thread's mapped file: a batch assembled in it is run
        without being copied again (the classifier's batch buffer)."""
        return self._segment(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize).array(shape, dtype)

    def run(self, output_names, feeds: dict, run_options=None) -> list[np.ndarray]:
        """The outputs ``output_names`` (None: all) of the graph on ``feeds``, run in the host:
        alone, or in one run with other workers' batches of the same model and shapes. An input
        that is this thread's :meth:`staging` array is already in place."""
        arrays = {name: np.ascontiguousarray(value) for name, value in feeds.items()}
        specs, offset = [], 0
        for name, a in arrays.items():
            specs.append((name, a.dtype.str, a.shape, offset))
            offset += -(-a.nbytes // ALIGN) * ALIGN
        segment = self._segment(offset)
        base = np.frombuffer(segment.map, np.uint8, 1).ctypes.data
        for (_, _, _, at), a in zip(specs, arrays.values()):
            if a.nbytes and a.ctypes.data != base + at:
                np.frombuffer(segment.map, np.uint8, a.nbytes, at)[:] = a.reshape(-1).view(np.uint8)
        names = list(output_names) if output_names else [o.name for o in self._outputs]
        fresh = segment.linked
        try:
            outputs, rows = self._call(("run", self.key, names, specs, segment.path, segment.size))
        except (InferenceFailed, ProcessGone):
            if fresh:  # the host may not have mapped it: the next run makes another
                self._link.segment = None
            raise
        finally:
            segment.unlink()  # mapped by the host now (or never to be): the name is no longer needed
        if self.on_run is not None:
            self.on_run(rows)
        return outputs

    def close(self) -> None:
        """This process no longer runs the session (its model was unloaded or replaced): the host
        closes it once no worker does. A host already gone has nothing to close."""
        try:
            self._call(("close", self.key, self.user))
        except (InferenceFailed, ProcessGone):
            pass
        link = self._link
        if link.conn is not None:
            link.conn.close()
            link.conn = None
        if link.segment is not None:
            link.segment.unlink()

    def _segment(self, size: int) -> Segment:
        link = self._link
        if link.segment is None or link.segment.size < size:
            if link.segment is not None:
                link.segment.unlink()
            link.segment = Segment(size)
        return link.segment

    def _call(self, message: tuple):
        link = self._link
        if link.conn is None:
            link.conn = connect(self.address)
        try:
            link.conn.send(message)
            status, value = link.conn.recv()
        except (OSError, EOFError) as exc:
            link.conn = None
            raise ProcessGone(
                f"the shared classifier process is gone ({type(exc).__name__}): {self.path.name}"
            ) from exc
        if status != "ok":
            raise InferenceFailed(f"{self.path.name}, in the shared classifier process: {value}")
        return value
