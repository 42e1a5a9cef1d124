"""The decode batch's KV cache: layout, and the copies a step boundary may make.

Layout (docs/architecture.md, "Translation graphs and the KV cache"): every row of the batch has
its self-attention keys/values in one tensor per layer and kind, ``(B, H, P, D)``,
**left-padded** to the longest row's length ``P``: row ``r`` holds its ``P - pad[r]``
cached tokens in slots ``pad[r]..P-1`` and the decoder's ``self_mask`` hides the rest.
A row's next position is ``P - pad[r]``, so rows at different steps share one batch.
Cross-attention keys/values ``(B, H, L, D)`` are right-padded to the longest source, and
no further: every step's cross-attention reads all ``L`` columns, masked or not.

The decoder returns ``present = past + new`` and the next step feeds it back as
``past`` untouched. A batch that starts from an idle engine takes the encoder's output
as its cross K/V without a copy (:meth:`KVCache.start`) when one encoder run took exactly
its rows; rows from several runs (by source length) or from a longer run are copied once. At step boundaries a finished
row's slot is freed without a copy and a newcomer takes it in place (left-padded to the
full length); beam search copies its own rows. The whole cache is copied only by
:meth:`KVCache.compact` (the scheduler decides when: growth, or when free slots and
unneeded left padding have wasted about as much work as the copy costs), which also
drops the columns no live row needs.

Tensors live where :class:`Placement` says: numpy arrays fed to ``session.run`` (CPU),
or ``OrtValue`` s on the device bound with io binding (CUDA), so between boundaries the
cache never leaves the GPU. The boundary operations (assign, copy_rows, compact) work
on host copies: on CUDA each one moves the tensors it touches to the host and back.
That keeps the device path small and correct by construction (the same numpy code,
tested on CPU through the same io binding), at the price of PCIe traffic at
boundaries, every step for beam search; device-side gathers are future work.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

log = logging.getLogger(__name__)

STEPS_AHEAD = 64  # steps of positions and self-mask a boundary builds at once (more as P grows)


class Placement:
    """Host placement: tensors are numpy arrays, fed to the session's run (``runner.py``)."""

    device: str | None = None

    def to_host(self, tensor) -> np.ndarray:
        return tensor

    def from_host(self, array: np.ndarray):
        return np.ascontiguousarray(array)

    def alloc(self, shape: tuple, dtype) -> np.ndarray:
        """A tensor of ``shape`` and ``dtype`` whose contents the caller writes before reading."""
        return np.empty(shape, dtype)

    def release(self, tensors: list) -> None:
        """Tensors the cache no longer holds: on the host, left to the garbage collector."""

    def write(self, tensor, array: np.ndarray):
        """``array`` (``to_host(tensor)``, changed) as the tensor: on the host it is the tensor."""
        return self.from_host(array)


class DevicePlacement(Placement):
    """Tensors are ``OrtValue`` s on ``device`` ("cuda", or "cpu" to exercise the path in tests)."""

    def __init__(self, device: str = "cuda", device_id: int = 0) -> None:
        self.device, self.device_id = device, device_id
        self._pool: list[tuple[tuple, ort.OrtValue]] = []  # ((shape, type), value) released, oldest first
        self.pooled_bytes = 0
        self.pool_limit = 0  # twice the most bytes released at once (the largest cache cleared or replaced)

    def to_host(self, tensor) -> np.ndarray:
        if isinstance(tensor, np.ndarray):  # the empty tensors a new cache starts with
            return tensor
        # device -> host copy; on CPU .numpy() is a view that does not keep the OrtValue's
        # buffer alive, so copy there too (the CPU device only serves to test this path)
        return np.array(tensor.numpy())

    def from_host(self, array: np.ndarray):
        array = np.ascontiguousarray(array)
        if array.dtype not in ORT_TYPES or not array.size:  # nothing a cache would reuse
            return ort.OrtValue.ortvalue_from_numpy(array, self.device, self.device_id)
        value = self.alloc(array.shape, array.dtype)
        value.update_inplace(array)
        return value

    def alloc(self, shape: tuple, dtype) -> ort.OrtValue:
        """A device value of ``shape`` and ``dtype``: the one released longest ago with them (at its
        address again), else a new one. A layout the cache had before gets its buffers back in the
        order it released them, so a CUDA graph captured on them replays (buckets.py)."""
        key = (tuple(shape), ORT_TYPES[np.dtype(dtype)])
        for i, (k, value) in enumerate(self._pool):
            if k == key:
                del self._pool[i]
                self.pooled_bytes -= _value_bytes(key)
                return value
        return ort.OrtValue.ortvalue_from_shape_and_type(shape, np.dtype(dtype).type, self.device, self.device_id)

    def release(self, tensors: list) -> None:
        """Device values the cache no longer holds (it replaced or dropped them), kept for
        :meth:`alloc` within twice the most bytes released at once: an engine between bursts keeps
        its cache's device memory, and the buffers of the capacities a burst grew through; the
        oldest released go first."""
        pooled = {id(v) for _, v in self._pool}
        values = [t for t in tensors if isinstance(t, ort.OrtValue) and id(t) not in pooled]
        values = list({id(v): v for v in values}.values())  # each once: one held twice would be handed out twice
        keys = [(tuple(v.shape()), v.data_type()) for v in values]
        self.pool_limit = max(self.pool_limit, 2 * sum(_value_bytes(k) for k in keys))
        for key, value in zip(keys, values):
            self._pool.append((key, value))
            self.pooled_bytes += _value_bytes(key)
        while self.pooled_bytes > self.pool_limit:
            key, _ = self._pool.pop(0)
            self.pooled_bytes -= _value_bytes(key)

    def write(self, tensor, array: np.ndarray):
        """``array`` written into ``tensor``'s device memory (same shape and type): the tensor keeps
        its address, so a binding (and a CUDA graph captured on it) still reads it."""
        if isinstance(tensor, ort.OrtValue) and tuple(tensor.shape()) == array.shape:
            if tensor.data_type() == ORT_TYPES.get(array.dtype):
                tensor.update_inplace(np.ascontiguousarray(array))
                return tensor
        return self.from_host(array)


ORT_TYPES = {np.dtype(t): f"tensor({n})" for t, n in ((np.float32, "float"), (np.float16, "float16"))}
ORT_TYPES.update({np.dtype(np.int32): "tensor(int32)", np.dtype(np.int64): "tensor(int64)"})
ITEM_BYTES = {name: dtype.itemsize for dtype, name in ORT_TYPES.items()}


def _value_bytes(key: tuple) -> int:
    shape, kind = key
    return int(np.prod(shape, dtype=np.int64)) * ITEM_BYTES[kind]


@dataclass(frozen=True)
class NewRows:
    """Encoder output of rows joining the batch (one row per source, beams expand later)."""

    cross: list[np.ndarray]  # 2 per layer, (n, H, Ln, D) float32
    src_mask: np.ndarray  # (n, Ln) int32
    src_len: np.ndarray  # (n,) int64


class KVCache:
    """Left-padded self-attention cache, cross K/V and source masks of every slot (row) of the decode batch.

    A slot is live (a job's row) or free. Freeing a slot copies nothing: its cache columns
    are hidden by setting its padding to the whole length. A newcomer takes a free slot in
    place (:meth:`assign`), beam search copies rows in place (:meth:`copy_rows`), and only
    :meth:`compact` copies the whole cache: it keeps the live rows, drops the left-padding
    columns none of them needs and appends empty slots.
    """

    def __init__(self, num_layers: int, num_heads: int, head_dim: int, placement: Placement | None = None) -> None:
        self.num_layers, self.num_heads, self.head_dim = num_layers, num_heads, head_dim
        self.placement = placement or Placement()
        self.in_place = False
        self._empty = _read_only(np.zeros((0, num_heads, 0, head_dim), np.float32))
        self._unpadded = np.zeros((STEPS_AHEAD, 0, 1), np.int64), np.ones((0, STEPS_AHEAD), np.int32)
        self.clear()  # P, L, pad, src_len, past, cross, src_mask, step inputs: an empty batch

    @property
    def rows(self) -> int:
        return int(self.pad.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes held by the self-attention cache and cross K/V (float32), free slots included."""
        return self.rows * self.row_bytes

    @property
    def capacity(self) -> int:
        """Cached tokens each row's columns hold now: the shared length P (left-padded)."""
        return self.P

    @property
    def row_bytes(self) -> int:
        """Bytes one row holds now: P self-attention columns and L cross columns, float32."""
        return 2 * self.num_layers * self.num_heads * self.head_dim * 4 * (self.P + self.L)

    def step_inputs(self) -> tuple[np.ndarray, np.ndarray]:
        """positions (B, 1) int64 and self_mask (B, P + 1) int32 for the next step.

        Both are views of tables built for the coming steps when the rows' padding changes (a
        boundary): the positions are row ``P - base`` of a ``(S, B, 1)`` table, the mask the
        first ``P + 1`` columns of a ``(B, base + S)`` one that already holds every later column
        (ones). Between two decoder runs nothing is computed: an in-place ``+= 1`` on the
        positions there took ~10 us of a batch-1 step, on the caches the run had just flushed,
        where a view takes ~1 (benchmarks/README.md). The positions are contiguous; the mask is
        a column slice, contiguous at batch 1 (onnxruntime copies a strided one itself; the
        device path binds a contiguous copy)."""
        P = self.P
        j = P - self._base
        if self._positions is None or j >= self._positions.shape[0]:
            self._base, j = P, 0
            cols = np.arange(2 * P + STEPS_AHEAD, dtype=np.int64)
            self._positions = (cols[P:, None] - self.pad)[:, :, None]  # (P + STEPS_AHEAD, B, 1): row j is step P + j
            self._mask = (cols >= self.pad[:, None]).astype(np.int32)  # (B, 2P + STEPS_AHEAD)
        return self._positions[j], self._mask[:, : P + 1]

    def advance(self, present: list) -> None:
        """After a step: the decoder's present (B, H, P + 1, D) becomes the past."""
        self.past = present
        self.P += 1

    def start(self, new: NewRows) -> None:
        """Replace the whole cache (no live rows may be left) with ``new``'s rows, in order: an
        empty history and, as they are (no copy), their cross K/V and source mask."""
        n, H, D = new.src_mask.shape[0], self.num_heads, self.head_dim
        put = self.placement.from_host
        self.P, self.L = 0, int(new.src_mask.shape[1])
        self.pad = np.zeros(n, dtype=np.int64)
        self.src_len = np.asarray(new.src_len, dtype=np.int64)
        self.past = [put(np.zeros((n, H, 0, D), np.float32))] * len(self.past)  # empty: one serves all
        self.cross = [put(c) for c in new.cross]
        self.src_mask = put(new.src_mask)
        self._base = 0  # no row is padded: the step inputs are known
        self._positions, self._mask = self._unpadded_inputs(n)

    def _unpadded_inputs(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The step-input tables of ``n`` rows that start together (no padding): views of
        read-only tables kept for the largest such batch so far (nothing writes them)."""
        positions, mask = self._unpadded
        if mask.shape[0] < n:
            steps = np.arange(STEPS_AHEAD, dtype=np.int64)
            positions = _read_only(np.repeat(steps[:, None, None], n, axis=1))  # (STEPS_AHEAD, n, 1)
            mask = _read_only(np.ones((n, STEPS_AHEAD), dtype=np.int32))
            self._unpadded = positions, mask
        return positions[:, :n], mask[:n]

    def free(self, slots: np.ndarray) -> None:
        """Hide the slots' history (no copy); they compute until reused or compacted away."""
        self._positions = None  # the rows' padding changes: step inputs rebuilt
        self.pad[slots] = self.P
        self.src_len[slots] = 0

    def assign(self, slots: np.ndarray, new: NewRows) -> None:
        """Newcomers into free ``slots``, in place: an empty history, their cross K/V and source mask."""
        self._positions = None  # the rows' padding changes: step inputs rebuilt
        self.pad[slots] = self.P
        self.src_len[slots] = new.src_len
        assign_cross(self, slots, new)

    def copy_rows(self, dst: np.ndarray, src: np.ndarray, fresh: np.ndarray | None = None) -> None:
        """Row ``dst[i]`` becomes a copy of row ``src[i]`` (beam search), in place. ``fresh``
        (bool per pair, default all): the rows whose cross K/V and source mask must be copied
        too; a beam moving to another row of its own job already has its source's."""
        self._positions = None  # the rows' padding changes: step inputs rebuilt
        host = self.placement.to_host
        for i, t in enumerate(self.past):
            a = host(t)
            a[dst] = a[src]  # the right side is gathered first, so overlaps are safe
            self.past[i] = self.placement.write(t, a)
        self.pad[dst] = self.pad[src]
        copy_source_rows(self, dst, src, fresh)

    def compact(self, keep: np.ndarray, extra: int = 0) -> None:
        """Keep rows ``keep`` (B',) in that order, then ``extra`` free slots: one copy of the cache.

        Drops the left-padding columns no kept row needs and the source columns beyond
        the longest kept source.
        """
        self._positions = None  # the rows' padding changes: step inputs rebuilt
        host, put = self.placement.to_host, self.placement.from_host
        k, B, H, D = len(keep), len(keep) + extra, self.num_heads, self.head_dim
        pad, src_len = self.pad[keep], self.src_len[keep]  # (B',)
        start = int(pad.min()) if k else self.P
        P = self.P - start
        L = int(src_len.max()) if k else 0
        past = []
        for t in self.past:
            out = np.empty((B, H, P, D), np.float32)
            if start:
                out[:k] = host(t)[keep, :, start:]
            else:
                np.take(host(t), keep, axis=0, out=out[:k])  # one copy, no temporary
            out[k:] = 0  # free slots: finite values under the mask
            past.append(put(out))
        cross = []
        for t in self.cross:
            out = np.empty((B, H, L, D), np.float32)
            out[:k] = host(t)[keep, :, :L]
            out[k:] = 0
            cross.append(put(out))
        mask = np.zeros((B, L), np.int32)
        mask[:k] = host(self.src_mask)[keep, :L]
        self.past, self.cross, self.src_mask = past, cross, put(mask)
        self.pad = np.concatenate([pad - start, np.full(extra, P, dtype=np.int64)])
        self.src_len = np.concatenate([src_len, np.zeros(extra, dtype=np.int64)])
        self.P, self.L = P, L

    def clear(self) -> None:
        """Drop every row without copying anything: the empty cache of a new engine."""
        self._positions, self._base = None, 0  # the rows' padding changes: step inputs rebuilt
        empty = self._empty  # on the host until the next start; nothing is allocated here
        self.P = 0  # cached length shared by all rows (left-padded)
        self.L = 0  # padded source length
        self.pad = NO_ROWS  # (B,) left-padding slots per row
        self.src_len = NO_ROWS  # (B,) true source length per row (0: free)
        self.past: list = [empty] * (2 * self.num_layers)  # 2 per layer, (B, H, P, D)
        self.cross: list = [empty] * (2 * self.num_layers)  # 2 per layer, (B, H, L, D)
        self.src_mask = NO_MASK  # (B, L)


def copy_source_rows(cache, dst: np.ndarray, src: np.ndarray, fresh: np.ndarray | None) -> None:
    """Cross K/V, source mask and source length of rows ``dst[fresh]`` from ``src[fresh]``."""
    if fresh is not None:
        dst, src = dst[fresh], src[fresh]
    if not len(dst):
        return
    host, write = cache.placement.to_host, cache.placement.write
    for i, t in enumerate(cache.cross):
        a = host(t)
        a[dst] = a[src]
        cache.cross[i] = write(t, a)
    mask = host(cache.src_mask)
    mask[dst] = mask[src]
    cache.src_mask = write(cache.src_mask, mask)
    cache.src_len[dst] = cache.src_len[src]


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


NO_ROWS = _read_only(np.zeros(0, dtype=np.int64))  # an empty cache's pad and src_len (a start replaces them)
NO_MASK = _read_only(np.zeros((0, 0), dtype=np.int32))


def placement_for(session) -> Placement:
    """Device placement with io binding when the session runs on CUDA, host placement otherwise."""
    providers = session.get_providers()
    if "CUDAExecutionProvider" in providers:
        options = session.get_provider_options().get("CUDAExecutionProvider", {})
        return DevicePlacement("cuda", int(options.get("device_id", 0)))
    return Placement()


def assign_cross(cache, slots: np.ndarray, new: NewRows) -> bool:
    """Newcomers' source masks and cross K/V into ``slots`` of ``cache`` (a :class:`KVCache` or an
    ``InPlaceCache``: ``cross``, ``src_mask``, ``L``, ``placement``), every row's widened first when
    theirs are longer (exactly: the only copy a join may cost). Returns whether it widened (new arrays)."""
    Ln = new.src_mask.shape[1]
    widened = Ln > cache.L
    if widened:
        _widen_cross(cache, Ln)
    host, write = cache.placement.to_host, cache.placement.write
    mask = host(cache.src_mask)
    mask[slots] = 0
    mask[slots, :Ln] = new.src_mask
    cache.src_mask = write(cache.src_mask, mask)
    for i, (t, n) in enumerate(zip(cache.cross, new.cross)):
        c = host(t)
        c[slots, :, :Ln] = n  # columns past Ln keep stale values, hidden by the mask
        cache.cross[i] = write(t, c)
    return widened


def _widen_cross(cache, L: int) -> None:
    host, put = cache.placement.to_host, cache.placement.from_host
    H, D = cache.num_heads, cache.head_dim
    cross = []
    for c in cache.cross:
        c = host(c)  # (B, H, L0, D), or more rows: the padding rows of a step bucket (slot_cache.py)
        wide = np.zeros((c.shape[0], H, L, D), np.float32)
        wide[:, :, : cache.L] = c
        cross.append(put(wide))
    narrow = host(cache.src_mask)
    mask = np.zeros((narrow.shape[0], L), np.int32)
    mask[:, : cache.L] = narrow
    cache.placement.release([*cache.cross, cache.src_mask])
    cache.cross, cache.src_mask, cache.L = cross, put(mask), L
