"""The decode batch's KV cache written in place: one slot per row, each at its own length.

Layout (``kv_cache: in-place`` in model.json; docs/architecture.md, "Translation graphs and the
KV cache"): per layer and kind one buffer ``(B, H, capacity, D)``; row ``r`` holds its
``lengths[r]`` cached tokens in columns ``0..lengths[r] - 1`` and nothing is padded. The
decoder's ``GroupQueryAttention`` takes ``seqlens_k = lengths`` and writes each row's new
key/value at column ``lengths[r]`` of the buffer bound as both its past and its present (io
binding, one ``OrtValue`` per buffer), attending over that row's own columns only: a step
copies no past and a row pays for its own length, not the longest row's.

Every row of the batch shares the capacity (the buffer is one tensor). It starts at
:data:`INITIAL_CAPACITY` tokens and doubles, by one copy of the cached columns, only when a row
would write past it (:meth:`InPlaceCache.reserve`). At step boundaries: a finished row's slot is
freed by setting its length to 0 (no copy; it computes a one-token dummy until reused); a
newcomer takes a free slot in place (its cross K/V and source mask copied in, its past nothing);
beam search copies only the cached columns of the rows whose parent is another row
(:meth:`copy_rows`; rows that continue themselves stay where they are); :meth:`compact` (the
scheduler decides when, as for the left-padded cache) copies the live rows' cached columns into
a smaller batch. Cross-attention K/V ``(B, H, L, D)`` and the source mask are kept as in
:class:`~.cache.KVCache`: computed once per text by the encoder, right-padded to the longest source.

On the host the buffers are numpy arrays whose memory the bound ``OrtValue`` s share, so a
boundary's copies need no rebinding; with :class:`~.cache.DevicePlacement` (CUDA) they are device
``OrtValue`` s and the boundary's copies go through the host (as :class:`~.cache.KVCache` does).
"""

from __future__ import annotations

import numpy as np

from .cache import NewRows, Placement, _read_only, assign_cross, copy_source_rows

INITIAL_CAPACITY = 32  # tokens per row a batch starts with; doubled on overflow


class InPlaceCache:
    """Self-attention buffers (written in place by the decoder), per-row lengths, cross K/V and
    source masks of every slot (row) of the decode batch; the same boundary operations as
    :class:`~.cache.KVCache` (start, assign, free, copy_rows, compact, clear)."""

    in_place = True

    def __init__(
        self,
        num_layers: int,
        num_heads: int,
        head_dim: int,
        placement: Placement | None = None,
        dtype: type = np.float32,
        initial_capacity: int = INITIAL_CAPACITY,
    ) -> None:
        self.num_layers, self.num_heads, self.head_dim = num_layers, num_heads, head_dim
        self.placement = placement or Placement()
        self.dtype = np.dtype(dtype)
        self.initial_capacity = initial_capacity
        self.growths = 0  # copies made because a row outgrew the capacity
        self.version = 0  # changes whenever an array the runner binds is replaced
        self.limit = 1 << 30  # tokens a running row may reach (the scheduler sets it at boundaries)
        self.clear()

    # --- what the runner, the slot table and the metrics read ----------------------

    @property
    def rows(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def P(self) -> int:
        """The longest row's cached tokens (the left-padded cache's shared length)."""
        return int(self.total) - 1 if self.rows else 0

    @property
    def pad(self) -> np.ndarray:
        """No row is padded: nothing a compaction could drop (the slot table reads this)."""
        return np.zeros(self.rows, dtype=np.int64)

    @property
    def row_bytes(self) -> int:
        """Bytes one row holds at the current capacity: its self-attention slot (the cache's
        dtype) and its cross K/V (float32)."""
        per_token = 2 * self.num_layers * self.num_heads * self.head_dim
        return per_token * (self.capacity * self.dtype.itemsize + self.L * 4)

    @property
    def nbytes(self) -> int:
        """Bytes held by the self-attention buffers and cross K/V, free slots included."""
        return self.rows * self.row_bytes

    def step_inputs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """positions (B, 1) int64, seqlens_k (B,) int32 and total_sequence_length () int32 of the
        next step: arrays kept up to date by :meth:`advance` (bound once, read by every step)."""
        return self.positions, self.seqlens, self.total

    def advance(self, present: list | None = None) -> None:
        """After a step: every live row holds one more token (the decoder wrote it in place)."""
        self.positions += self.live[:, None]
        self.seqlens += self.live32
        self.total[...] = self.seqlens.max() + 1

    def reserve(self) -> None:
        """Grow the capacity (one copy of the cached columns) when a row's next token would not fit:
        doubled, but never past ``limit`` (the most tokens a running row may reach, set by the
        scheduler), so the buffer holds no column that no row can use."""
        need = int(self.total)
        if need > self.capacity:
            self._resize(max(min(2 * self.capacity, self.limit), need))
            self.growths += 1

    # --- step boundaries ---------------------------------------------------------------

    def start(self, new: NewRows) -> None:
        """Replace the whole cache (no live rows may be left) with ``new``'s rows, in order: empty
        slots of the initial capacity and, as they are (no copy), their cross K/V and source mask."""
        n = new.src_mask.shape[0]
        put = self.placement.from_host
        self.L = int(new.src_mask.shape[1])
        self._set_rows(np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64))
        self.src_len = np.asarray(new.src_len, dtype=np.int64)
        self.capacity = max(1, min(self.initial_capacity, self.limit))
        shape = (n, self.num_heads, self.capacity, self.head_dim)
        self.past = [put(np.empty(shape, self.dtype)) for _ in range(2 * self.num_layers)]  # never read unwritten
        self.cross = [put(c) for c in new.cross]
        self.src_mask = put(new.src_mask)
        self.version += 1

    def _set_rows(self, lengths: np.ndarray, live: np.ndarray) -> None:
        """Set every row's length and liveness; rebuilds the step inputs (new arrays: rebound)."""
        self.live = live.astype(np.int64)  # (B,) 1 = a job's row, 0 = free (stays at length 0)
        self.live32 = self.live.astype(np.int32)
        self.positions = lengths.astype(np.int64)[:, None]  # (B, 1) the next token's position
        self.seqlens = lengths.astype(np.int32)  # (B,) cached tokens: where the next one is written
        self.total = np.array(int(self.seqlens.max(initial=0)) + 1, dtype=np.int32)
        self.version += 1

    @property
    def lengths(self) -> np.ndarray:
        return self.seqlens

    def free(self, slots: np.ndarray) -> None:
        """The slots' rows end: length 0, no copy; they compute a dummy token until reused or compacted away."""
        self.positions[slots] = 0
        self.seqlens[slots] = 0
        self.live[slots] = 0
        self.live32[slots] = 0
        self.total[...] = self.seqlens.max(initial=0) + 1
        self.src_len[slots] = 0

    def assign(self, slots: np.ndarray, new: NewRows) -> None:
        """Newcomers into free ``slots``, in place: length 0, their cross K/V and source mask."""
        self.positions[slots] = 0
        self.seqlens[slots] = 0
        self.live[slots] = 1
        self.live32[slots] = 1
        self.total[...] = self.seqlens.max(initial=0) + 1
        self.src_len[slots] = new.src_len
        widened = assign_cross(self, slots, new)
        # rebind: widened arrays are new ones, and device values are new OrtValues
        self.version += widened + (self.placement.device is not None)

    def copy_rows(self, dst: np.ndarray, src: np.ndarray, fresh: np.ndarray | None = None) -> None:
        """Row ``dst[i]`` becomes a copy of row ``src[i]`` (beam search): only the cached columns
        of the self-attention slots move; cross K/V and source mask only for the ``fresh`` pairs
        (default all: a beam moving to another row of its own job already has its source's)."""
        host, put = self.placement.to_host, self.placement.from_host
        cols = int(self.seqlens[src].max(initial=0))
        for i, t in enumerate(self.past):
            a = host(t)
            a[dst, :, :cols] = a[src, :, :cols]  # the right side is gathered first, so overlaps are safe
            self.past[i] = put(a)
        copy_source_rows(self, dst, src, fresh)
        for array in (self.positions, self.seqlens, self.live, self.live32):
            array[dst] = array[src]
        self.total[...] = self.seqlens.max(initial=0) + 1
        self.version += self.placement.device is not None

    def compact(self, keep: np.ndarray, extra: int = 0) -> None:
        """Keep rows ``keep`` (B',) in that order, then ``extra`` free slots: one copy of the kept
        rows' cached columns, and of their cross K/V up to the longest kept source. The capacity
        shrinks to ``limit`` when the rows that needed more have left."""
        host, put = self.placement.to_host, self.placement.from_host
        k, B, H, D = len(keep), len(keep) + extra, self.num_heads, self.head_dim
        lengths, src_len = self.seqlens[keep].astype(np.int64), self.src_len[keep]
        cols = int(lengths.max(initial=0))
        L = int(src_len.max()) if k else 0
        self.capacity = max(min(self.capacity, self.limit), cols, 1)
        past = []
        for t in self.past:
            out = np.empty((B, H, self.capacity, D), self.dtype)
            out[:k, :, :cols] = host(t)[keep, :, :cols]
            past.append(put(out))
        cross = []
        for t in self.cross:
            out = np.empty((B, H, L, D), np.float32)
            out[:k] = host(t)[keep, :, :L]
            out[k:] = 0
            cross.append(put(out))
        mask = np.zeros((B, L), np.int32)
        mask[:k] = host(self.src_mask)[keep, :L]
        self.past, self.cross, self.src_mask, self.L = past, cross, put(mask), L
        self._set_rows(np.concatenate([lengths, np.zeros(extra, np.int64)]), np.repeat([1, 0], [k, extra]))
        self.src_len = np.concatenate([src_len, np.zeros(extra, dtype=np.int64)])

    def _resize(self, capacity: int) -> None:
        """Every buffer with ``capacity`` columns, the cached ones copied."""
        host, put = self.placement.to_host, self.placement.from_host
        cols = min(self.capacity, capacity)
        past = []
        for t in self.past:
            out = np.empty((self.rows, self.num_heads, capacity, self.head_dim), self.dtype)
            out[:, :, :cols] = host(t)[:, :, :cols]
            past.append(put(out))
        self.past, self.capacity = past, capacity
        self.version += 1

    def clear(self) -> None:
        """Drop every row without copying anything: the empty cache of a new engine."""
        self.version += 1
        self.capacity = 0
        self.L = 0
        self._set_rows(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        self.src_len = np.zeros(0, dtype=np.int64)
        empty = _read_only(np.zeros((0, self.num_heads, 0, self.head_dim), self.dtype))
        self.past: list = [empty] * (2 * self.num_layers)
        self.cross: list = [_read_only(np.zeros((0, self.num_heads, 0, self.head_dim), np.float32))] * (
            2 * self.num_layers
        )
        self.src_mask = _read_only(np.zeros((0, 0), np.int32))
