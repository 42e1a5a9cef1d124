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
scheduler decides when, as for the left-padded cache) moves the live rows past the kept count
into the holes and makes the batch the buffers' first rows (a view: nothing is allocated), or,
when the batch outgrows the buffers, copies it into buffers with room to grow. Cross-attention
K/V ``(B, H, L, D)`` and the source mask are kept as in :class:`~.cache.KVCache`: computed once
per text by the encoder, right-padded to the longest source.

On the host the buffers are numpy arrays whose memory the bound ``OrtValue`` s share, so a
boundary's copies need no rebinding; with :class:`~.cache.DevicePlacement` (CUDA) they are device
``OrtValue`` s and the boundary's copies go through the host (as :class:`~.cache.KVCache` does).
"""

from __future__ import annotations

import numpy as np

from .cache import KVCache, NewRows, Placement, _read_only, assign_cross, copy_source_rows

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
        max_rows: int = 1 << 30,
    ) -> None:
        self.num_layers, self.num_heads, self.head_dim = num_layers, num_heads, head_dim
        self.placement = placement or Placement()
        self.dtype = np.dtype(dtype)
        self.initial_capacity = initial_capacity
        self.max_rows = max_rows  # the batch's most rows (room allocated for growth stops there)
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
        """Bytes held by the self-attention buffers and cross K/V, free slots included, and the
        rows past the batch that a compaction in place keeps allocated."""
        per_token = 2 * self.num_layers * self.num_heads * self.head_dim
        past = max(self.rows, _rows(self._held(self.past, self._past_held, 0) or []))
        cross = max(self.rows, _rows(self._held([*self.cross, self.src_mask], self._cross_held, 0) or []))
        return per_token * (past * self.capacity * self.dtype.itemsize + cross * self.L * 4)

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
        self._retire()  # first: a layout like the last one gets its device buffers back
        self.L = int(new.src_mask.shape[1])
        self._set_rows(np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64))
        self.src_len = np.asarray(new.src_len, dtype=np.int64)
        self.capacity = max(1, min(self.initial_capacity, self.limit))
        shape = (n, self.num_heads, self.capacity, self.head_dim)
        self.past = [
            self.placement.alloc(shape, self.dtype) for _ in range(2 * self.num_layers)
        ]  # never read unwritten
        self.cross = [put(c) for c in new.cross]
        self.src_mask = put(new.src_mask)
        self._past_held = self.past if self.placement.device is None else []
        self._cross_held = []  # the cross K/V is the encoder's output, adopted
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
        # rebind when widened (new arrays); otherwise written in place, device values included
        self.version += assign_cross(self, slots, new)

    def copy_rows(self, dst: np.ndarray, src: np.ndarray, fresh: np.ndarray | None = None) -> None:
        """Row ``dst[i]`` becomes a copy of row ``src[i]`` (beam search): only the cached columns
        of the self-attention slots move; cross K/V and source mask only for the ``fresh`` pairs
        (default all: a beam moving to another row of its own job already has its source's)."""
        host = self.placement.to_host
        cols = int(self.seqlens[src].max(initial=0))
        pairs = _row_pairs(dst, src, self.seqlens, cols * self.num_heads * self.head_dim * self.dtype.itemsize)
        for i, t in enumerate(self.past):
            a = host(t)
            _copy_rows(a, dst, src, cols, pairs)
            self.past[i] = self.placement.write(t, a)  # the same buffer: nothing to rebind
        copy_source_rows(self, dst, src, fresh)
        for array in (self.positions, self.seqlens, self.live, self.live32):
            array[dst] = array[src]
        self.total[...] = self.seqlens.max(initial=0) + 1

    def compact(self, keep: np.ndarray, extra: int = 0) -> None:
        """Keep rows ``keep`` (B',) in that order, then ``extra`` free slots. The capacity shrinks
        to ``limit`` when the rows that needed more have left, the cross K/V to the longest kept
        source.

        On the host the batch is the first B' rows of buffers this cache allocated (:meth:`_held`):
        when they have room, only the rows not already at their place move (their cached
        columns; the slot table fills the holes with the last rows, so few move) and the batch
        becomes a view of their first B' rows, the one the decoder is bound to. When the batch
        outgrows them, the kept rows are copied into new buffers with room to grow
        (:meth:`_room`). With device placement every compaction copies into new buffers of B' rows."""
        k, B = len(keep), len(keep) + extra
        lengths, src_len = self.seqlens[keep].astype(np.int64), self.src_len[keep]
        cols = int(lengths.max(initial=0))
        L = int(src_len.max()) if k else 0
        capacity = max(min(self.capacity, self.limit), cols, 1)
        moved = np.flatnonzero(keep != np.arange(k))  # (m,) new rows whose old row is another
        dst, src = moved, keep[moved]
        past = self._held(self.past, self._past_held, B)
        if past is None or capacity != self.capacity:
            rows = self._room(B) if B > self.rows else B  # room when the batch grows
            self._past_held = past = _copied(self, self.past, keep, capacity, cols, self.dtype, rows)
            self.capacity = capacity
        else:
            for t in past:
                t[dst, :, :cols] = t[src, :, :cols]  # the right side is gathered first: overlaps are safe
        cross = self._held([*self.cross, self.src_mask], self._cross_held, B)
        if cross is None or L != self.L:
            rows = self._room(B) if B > self.rows else B  # room when the batch grows
            cross = _copied(self, self.cross, keep, L, L, np.float32, rows, zeros=True)
            mask = np.zeros((rows, L), np.int32)
            mask[:k] = self.placement.to_host(self.src_mask)[keep, :L]
            self._cross_held = cross = [*cross, mask]
            self.L = L
        else:
            for t in cross:
                t[dst] = t[src]
        cross[-1][k:B] = 0  # free slots' source masks: nothing to attend to until a newcomer's is written
        put = self.placement.from_host
        self._retire()  # read into host copies above: on a device the values are free
        self.past = [put(t[:B]) for t in past]
        self.cross, self.src_mask = [put(t[:B]) for t in cross[:-1]], put(cross[-1][:B])
        if self.placement.device is not None:  # the device holds the values, the host arrays were copies
            self._past_held = self._cross_held = []
        self._set_rows(np.concatenate([lengths, np.zeros(extra, np.int64)]), np.repeat([1, 0], [k, extra]))
        self.src_len = np.concatenate([src_len, np.zeros(extra, dtype=np.int64)])

    def _retire(self) -> None:  # every value held goes back to the placement: the caller replaces them all
        self.placement.release([*self.past, *self.cross, self.src_mask])

    def _held(self, arrays: list, held: list, rows: int) -> list[np.ndarray] | None:
        """``held``, the host buffers this cache allocated, when ``arrays`` are still their first
        rows and they have ``rows`` rows or more; else None (device placement, or the arrays were
        replaced since: adopted encoder outputs, widened cross K/V)."""
        if len(held) != len(arrays) or _rows(held) < rows:  # none are held with device placement
            return None
        if all(a is h or a.base is h for a, h in zip(arrays, held)):
            return held
        return None

    def _room(self, rows: int) -> int:
        """Rows to allocate for a batch of ``rows`` on the host: the self-attention buffers' when
        the batch fits them, else twice theirs up to ``max_rows`` (a batch that grows a row or two
        at a time copies itself a few times, not at every join); on a device exactly ``rows``."""
        held = _rows(self._past_held)
        if self.placement.device is not None:
            return rows
        return held if rows <= held else max(rows, min(2 * held, self.max_rows))

    def _resize(self, capacity: int) -> None:
        """Every buffer with ``capacity`` columns, the batch's rows' cached columns copied; on the
        host as many rows as the buffers held (a step bucket's padding rows stay allocated)."""
        rows, put = np.arange(self.rows), self.placement.from_host
        held = max(self.rows, _rows(self._past_held))
        past = _copied(self, self.past, rows, capacity, min(self.capacity, capacity), self.dtype, held)
        self.placement.release(self.past)
        self.past, self.capacity = [put(t[: self.rows]) for t in past], capacity
        self._past_held = past if self.placement.device is None else []
        self.version += 1

    def clear(self) -> None:
        """Drop every row without copying anything: the empty cache of a new engine."""
        if hasattr(self, "past"):  # device buffers kept by the placement for the next burst
            self._retire()
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
        self._past_held: list[np.ndarray] = []  # host buffers this cache allocated: the batch is their first rows
        self._cross_held: list[np.ndarray] = []  # likewise, the cross K/V and then the source mask


def _copied(
    cache, tensors: list, keep: np.ndarray, width: int, cols: int, dtype, rows: int, zeros: bool = False
) -> list[np.ndarray]:
    """New host buffers (rows, H, width, D) holding rows ``keep`` of ``tensors`` (their first ``cols``
    columns) in their first rows; the rest unwritten, or zeros (``zeros``: cross K/V, finite under the mask)."""
    host, out = cache.placement.to_host, []
    for t in tensors:
        a = np.empty((rows, cache.num_heads, width, cache.head_dim), dtype)
        _fill_rows(a, host(t), keep, cols, zeros)
        out.append(a)
    return out


def _fill_rows(a: np.ndarray, h: np.ndarray, keep: np.ndarray, cols: int, zeros: bool) -> None:
    """Rows ``keep`` of ``h`` (their first ``cols`` columns) into the first rows of ``a``; the rest
    of ``a`` unwritten, or zeros (``zeros``)."""
    k = len(keep)
    if h.shape[2] == cols == a.shape[2] and h.dtype == a.dtype:  # whole rows: one gather into place, no temporary
        np.take(h, keep, axis=0, out=a[:k], mode="clip")  # keep is in range: "clip" is unbuffered
    else:
        a[:k, :, :cols] = h[keep, :, :cols]
        if zeros:
            a[:k, :, cols:] = 0
    if zeros:
        a[k:] = 0


def _rows(held: list) -> int:
    return int(held[0].shape[0]) if held else 0


def make_cache(spec, decoder, placement: Placement, max_rows: int = 1 << 30):
    """The cache of ``spec``'s layout (model.json ``kv_cache``): :class:`InPlaceCache`
    for an in-place decoder, in the dtype of its past inputs (fp16 graphs keep an fp16 cache), for
    batches of up to ``max_rows`` rows; else the left-padded :class:`~.cache.KVCache`."""
    if not spec.decoder_io.in_place:
        return KVCache(spec.num_layers, spec.num_heads, spec.head_dim, placement)
    types = {i.name: i.type for i in getattr(decoder, "get_inputs", list)()}
    dtype = np.float16 if types.get(spec.decoder_io.past[0]) == "tensor(float16)" else np.float32
    return InPlaceCache(spec.num_layers, spec.num_heads, spec.head_dim, placement, dtype, max_rows=max_rows)


def bucket_tensors(cache: InPlaceCache, rows: int) -> tuple[list, list, object]:
    """The self-attention buffers, cross K/V and source mask with ``rows`` rows (>= the batch's),
    the batch in the first ones: what a step at that batch size (a step bucket, buckets.py) binds;
    the rows past the batch are padding whose results nobody reads.

    On the host they are the first ``rows`` rows of the buffers this cache holds (views: their
    address is the buffers', the same at every step until a buffer is replaced), copied into
    buffers with that many rows first when the batch is not already the first rows of such
    buffers (a batch adopted from the encoder, widened cross K/V). With device placement the
    values themselves are padded (once per layout: the boundary operations keep their rows)."""
    if cache.placement.device is not None:
        return _padded_values(cache, rows)
    past = cache._held(cache.past, cache._past_held, rows)
    if past is None:
        cols = int(cache.seqlens.max(initial=0))
        past = _copied(cache, cache.past, np.arange(cache.rows), cache.capacity, cols, cache.dtype, cache._room(rows))
        cache._past_held, cache.past = past, [t[: cache.rows] for t in past]
        cache.version += 1
    cross = cache._held([*cache.cross, cache.src_mask], cache._cross_held, rows)
    if cross is None:
        keep, alloc = np.arange(cache.rows), max(rows, _rows(cache._cross_held))
        cross = _copied(cache, cache.cross, keep, cache.L, cache.L, np.float32, alloc, zeros=True)
        mask = np.zeros((alloc, cache.L), np.int32)
        mask[: cache.rows] = cache.src_mask
        cache._cross_held = cross = [*cross, mask]
        cache.cross, cache.src_mask = [t[: cache.rows] for t in cross[:-1]], mask[: cache.rows]
        cache.version += 1
    return [t[:rows] for t in past], [t[:rows] for t in cross[:-1]], cross[-1][:rows]


def _padded_values(cache: InPlaceCache, rows: int) -> tuple[list, list, object]:
    """Device placement: every value with exactly ``rows`` rows (a copy through the host when not)."""
    host, put = cache.placement.to_host, cache.placement.from_host

    def padded(value):
        if (value.shape if isinstance(value, np.ndarray) else value.shape())[0] == rows:
            return value  # read without a copy: this runs at every step
        a = host(value)
        out = np.zeros((rows, *a.shape[1:]), a.dtype)
        n = min(rows, a.shape[0])
        out[:n] = a[:n]
        cache.version += 1
        cache.placement.release([value])
        return put(out)

    cache.past = [padded(t) for t in cache.past]
    cache.cross = [padded(t) for t in cache.cross]
    cache.src_mask = padded(cache.src_mask)
    return cache.past, cache.cross, cache.src_mask


ROW_COPY_BYTES = 16 << 10  # a row's cached columns worth a copy of their own (about 1.5 us of Python each)


def _row_pairs(dst: np.ndarray, src: np.ndarray, lengths: np.ndarray, row_bytes: int) -> list | None:
    """(dst, src, cached columns) of each row copy, when the rows are worth copying one by one:
    no row is both read and written (beam search writes only rows no parent is on) and the rows
    are long. Row by row, each row's own columns are copied once; the one gather of all the rows
    writes them to a temporary and copies that (twice the memory traffic). None: one gather."""
    if row_bytes < ROW_COPY_BYTES or not set(dst.tolist()).isdisjoint(src.tolist()):
        return None
    return list(zip(dst.tolist(), src.tolist(), lengths[src].tolist()))


def _copy_rows(a: np.ndarray, dst: np.ndarray, src: np.ndarray, cols: int, pairs: list | None) -> None:
    """Cache rows ``src`` of ``a`` (B, H, capacity, D) into rows ``dst``: one gather of ``cols``
    columns (the right side is gathered first, so overlaps are safe), or ``pairs`` one by one."""
    if pairs is None:
        a[dst, :, :cols] = a[src, :, :cols]
        return
    for d, s, n in pairs:
        a[d, :, :n] = a[s, :, :n]
