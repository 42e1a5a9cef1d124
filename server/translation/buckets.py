"""An in-place decoder's steps at a fixed set of batch sizes, bound to persistent buffers, so that
onnxruntime's CUDA graphs can replay them.

A CUDA graph replays the kernels one run launched, with the shapes and device addresses of that
run. onnxruntime captures one per ``gpu_graph_id`` (a RunOptions entry) on a session whose CUDA
provider has ``enable_cuda_graph``, and replays it at every later run with that id, so every
input and output must be bound (io binding) at the address it had at the capture and updated in
place (``OrtValue.update_inplace``), never rebound elsewhere.

With ``EngineSettings.step_buckets`` on, a step runs at the smallest size of :func:`step_buckets`
(1, 2, 4, ... up to the batch's most rows) that holds the batch; the rows past the batch are
padding (no cached token, the pad token, a source mask the cache leaves as it is) whose logits
nobody reads. Per size, :class:`BucketSteps` allocates once the step's small inputs (token ids,
positions, ``seqlens_k`` and ``total_sequence_length``, which GroupQueryAttention reads on the
host) and the logits; the KV buffers, cross K/V and source mask are the first rows of the cache's
own buffers (:func:`~.slot_cache.bucket_tensors`), at the same address at every step
until the cache replaces a buffer (a capacity growth, a compaction into bigger buffers, a
newcomer with a longer source).

Graphs (``"cuda-graphs"``, on a decoder session made with them): each size's graph is captured
on the addresses its binding had, under an id of its own. GroupQueryAttention reads
``total_sequence_length`` on the host when its kernels are launched, so a replay would keep the
total of the step it was captured at (on an H200 the tokens then went wrong after 16 steps): a
step that runs a graph is given the buffers' capacity as its total, the same at every replay, and
each row's own length stays in ``seqlens_k`` on the device. A step runs without one (one log line
per reason) when it asks for the attention output (bound on the host, as wide as the sources),
when every row is at its first token (GroupQueryAttention takes its first-prompt path there,
which a replay would repeat), or when the session has no graphs.

A bucket keeps a graph per layout it ran (the addresses and shapes bound), the
:data:`GRAPHS_PER_BUCKET` run most recently: a step whose buffers are ones a graph was captured on
replays it, a new layout captures one, at most :data:`MAX_CAPTURES` per runner, after which its
steps run without a graph. On a device a compaction or a capacity growth copies the cache into
other device values (the other boundary copies write into the ones bound), but the cache gives
the values it drops back to its placement, which hands the same buffers out again for the same
shapes (``cache.DevicePlacement.alloc``): a burst like the last one, and the capacities a burst
grows through, find their graphs (``python -m benchmarks.cuda_checks --steps decode-graphs``
measures the steps with and without graphs).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort

from .cache import Placement
from .sessions import ModelSpec
from .slot_cache import bucket_tensors

log = logging.getLogger(__name__)

GRAPH_ID = "gpu_graph_id"  # onnxruntime's RunOptions entry (-1: run without capture or replay)
MAX_CAPTURES = 64  # graphs one runner captures, recaptures included
GRAPHS_PER_BUCKET = 4  # layouts whose graphs a bucket keeps (each holds its own intermediate buffers)


def step_buckets(max_rows: int) -> tuple[int, ...]:
    """The batch sizes steps run at: powers of two below ``max_rows``, then ``max_rows``."""
    sizes = [1 << i for i in range(max(max_rows, 1).bit_length()) if 1 << i < max_rows]
    return (*sizes, max(max_rows, 1))


def bucket_for(sizes: tuple[int, ...], rows: int) -> int:
    """The smallest of ``sizes`` that holds ``rows`` (``rows`` itself beyond the largest)."""
    for size in sizes:
        if size >= rows:
            return size
    return rows


def session_has_graphs(session) -> bool:
    """Whether ``session``'s CUDA provider was made with ``enable_cuda_graph``."""
    options = getattr(session, "get_provider_options", dict)().get("CUDAExecutionProvider", {})
    return str(options.get("enable_cuda_graph", "0")).lower() in ("1", "true")


@dataclass
class Bucket:
    """One batch size's persistent step buffers, its binding and its graph."""

    rows: int
    host: dict[str, np.ndarray]  # ids (b, 1) int64, positions (b, 1) int64, seqlens (b,) int32, total () int32
    values: dict[str, ort.OrtValue]  # what is bound for them (host: the same memory; device: device buffers)
    logits: np.ndarray | None  # (b, V) float32 bound on the host; None: a device buffer in ``values``
    binding: object = None
    bound: tuple | None = None  # (cache version, cache id, attention) of the binding
    keep: list = field(default_factory=list)  # host OrtValues of the cache's views, alive with the binding
    addresses: tuple = ()  # (name, data pointer, shape) of every bound value
    capacity: int = 0  # columns of the bound self-attention buffers
    graphs: dict = field(default_factory=dict)  # addresses -> the graph id captured on them, least recently run first


class BucketSteps:
    """Decoder steps of an in-place cache at :func:`step_buckets` sizes (module docstring)."""

    def __init__(self, decoder, spec: ModelSpec, placement: Placement, vocab: int, max_rows: int, graphs: bool):
        self.io, self.placement, self.vocab, self.pad_id = spec.decoder_io, placement, vocab, spec.pad_id
        self.sizes = step_buckets(max_rows)
        self.want_graphs = graphs
        self._said: set[str] = set()
        self._buckets: dict[int, Bucket] = {}
        self._next_graph = 1  # 0 is onnxruntime's default id: a run without options never meets ours
        self.captures = 0
        self._options: dict[int, ort.RunOptions] = {}
        self.use(decoder)

    def use(self, decoder) -> None:
        """Run ``decoder`` (the runner's session, or one swapped in): every binding made again."""
        self.decoder = decoder
        self.graphs = self.want_graphs and session_has_graphs(decoder)
        if self.want_graphs and not self.graphs:
            self._once("session", "the decoder session has no CUDA graphs (not CUDA, or made without them)")
        for bucket in self._buckets.values():
            bucket.bound, bucket.graphs = None, {}

    def _once(self, reason: str, message: str) -> None:
        if reason not in self._said:
            self._said.add(reason)
            log.info("decoder steps run without a CUDA graph where %s", message)

    def device_values(self) -> list:
        """Every persistent buffer of every bucket: its device buffers, and the host total the
        kernel reads where it is (a binding copies neither; tests stand in for a device with these)."""
        return [v for b in self._buckets.values() for v in b.values.values()]

    def bucket(self, rows: int) -> Bucket:
        """The bucket of a batch of ``rows``, its buffers allocated on first use."""
        b = bucket_for(self.sizes, rows)
        if b not in self._buckets:
            self._buckets[b] = self._allocate(b)
        return self._buckets[b]

    def _allocate(self, b: int) -> Bucket:
        host = {
            "ids": np.full((b, 1), self.pad_id, np.int64),
            "positions": np.zeros((b, 1), np.int64),
            "seqlens": np.zeros(b, np.int32),
            "total": np.ones((), np.int32),
        }
        device, device_id = self.placement.device, getattr(self.placement, "device_id", 0)
        # total_sequence_length is read on the host by GroupQueryAttention, on every provider
        values = {"total": ort.OrtValue.ortvalue_from_numpy(host["total"])}
        logits = np.empty((b, self.vocab), np.float32) if device is None and self.vocab else None
        for name, array in host.items():
            if name == "total":
                continue
            if device is None:
                values[name] = ort.OrtValue.ortvalue_from_numpy(array)  # shares the array's memory
            else:  # memory of its own: written by update_inplace, never by the host array
                values[name] = ort.OrtValue.ortvalue_from_shape_and_type(
                    array.shape, array.dtype.type, device, device_id
                )
                values[name].update_inplace(array)
        if logits is not None:
            values["logits"] = ort.OrtValue.ortvalue_from_numpy(logits)
        elif self.vocab:
            values["logits"] = ort.OrtValue.ortvalue_from_shape_and_type((b, self.vocab), np.float32, device, device_id)
        return Bucket(b, host, values, logits)

    def step(self, cache, input_ids: np.ndarray, attention: bool, before_run) -> tuple[np.ndarray, np.ndarray | None]:
        """One step of ``cache``'s batch (B rows) at its bucket: logits (B, V) float32 and, when
        ``attention``, the step's attention (B, 1, L). ``before_run`` is called right before the run."""
        B = cache.rows
        bucket = self.bucket(B)
        past, cross, src_mask = bucket_tensors(cache, bucket.rows)  # may replace buffers: read the version after
        if bucket.bound != (cache.version, id(cache), attention):
            self._bind(bucket, past, cross, src_mask, attention)
            bucket.bound = (cache.version, id(cache), attention)
        graph_id = self._graph_id(bucket, int(cache.total), attention)
        self._write_inputs(bucket, cache, input_ids, graph=graph_id is not None and graph_id >= 0)
        options = None if graph_id is None else self._graph_options(graph_id)
        before_run()
        self.decoder.run_with_iobinding(bucket.binding, options)
        outputs = bucket.binding.get_outputs() if attention or bucket.logits is None else None
        weights = np.array(outputs[1].numpy()[:B]) if attention else None  # (B, 1, L), bound after the logits
        if bucket.logits is not None:
            return bucket.logits[:B], weights  # (B, V) a view of the bound buffer, rewritten by every step
        return np.array(outputs[0].numpy()[:B]), weights  # device: a host copy

    def _write_inputs(self, bucket: Bucket, cache, input_ids: np.ndarray, graph: bool = False) -> None:
        """This step's ids, positions, lengths and total into the bucket's buffers, padding rows
        past the batch (no cached token, the pad token). A step that runs a graph gets the buffers'
        capacity as its total (module docstring)."""
        B, host = cache.rows, bucket.host
        positions, seqlens, total = cache.step_inputs()
        host["ids"][:B] = input_ids
        host["ids"][B:] = self.pad_id
        host["positions"][:B] = positions
        host["positions"][B:] = 0
        host["seqlens"][:B] = seqlens
        host["seqlens"][B:] = 0
        host["total"][...] = bucket.capacity if graph else total
        if self.placement.device is not None:  # the same device memory, its contents replaced
            for name in ("ids", "positions", "seqlens"):
                bucket.values[name].update_inplace(host[name])

    def _bind(self, bucket: Bucket, past: list, cross: list, src_mask, attention: bool) -> None:
        """Bind the bucket's buffers and the cache's tensors (each past buffer as its present too)."""
        io, binding, keep = self.io, self.decoder.io_binding(), []

        def value(t):
            if isinstance(t, np.ndarray):  # a host view: an OrtValue sharing its memory, kept alive
                keep.append(ort.OrtValue.ortvalue_from_numpy(t))
                return keep[-1]
            return t

        names = [
            (io.input_ids, "ids"),
            (io.positions, "positions"),
            (io.seqlens, "seqlens"),
            (io.total_length, "total"),
        ]
        bound = [(name, bucket.values[key]) for name, key in names]
        bound += [(io.src_mask, value(src_mask)), *((n, value(t)) for n, t in zip(io.cross, cross))]
        for name, v in bound:
            binding.bind_ortvalue_input(name, v)
        if "logits" in bucket.values:
            binding.bind_ortvalue_output(io.logits, bucket.values["logits"])
        else:
            binding.bind_output(io.logits, "cpu")
        if attention:
            binding.bind_output(io.attention, "cpu")  # (b, 1, L): its width follows the cross K/V
        for past_name, present_name, t in zip(io.past, io.present, past):
            v = value(t)
            binding.bind_ortvalue_input(past_name, v)
            binding.bind_ortvalue_output(present_name, v)  # the same buffer: written in place
            bound.append((past_name, v))
        bucket.binding, bucket.keep = binding, keep
        bucket.addresses = tuple((name, v.data_ptr(), tuple(v.shape())) for name, v in bound)
        pasts = set(io.past)
        bucket.capacity = next((shape[2] for name, _, shape in bucket.addresses if name in pasts), 0)

    def _graph_id(self, bucket: Bucket, total: int, attention: bool) -> int | None:
        """The run's graph id: the bucket's graph, captured on its current addresses, or -1 (a run
        without one); None where the session has no graphs."""
        if not self.graphs:
            return None
        if attention:
            self._once("attention", "the attention output is asked for (a host output as wide as the sources)")
            return -1
        if total <= 1:
            return -1  # every row at its first token (the first-prompt path)
        graph = bucket.graphs.pop(bucket.addresses, None)
        if graph is None:
            if self.captures >= MAX_CAPTURES:
                self._once("captures", f"{MAX_CAPTURES} graphs were captured already (buffers kept being replaced)")
                return -1
            if len(bucket.graphs) >= GRAPHS_PER_BUCKET:
                self._release(bucket, next(iter(bucket.graphs)))
            graph, self._next_graph = self._next_graph, self._next_graph + 1
            self.captures += 1
        bucket.graphs[bucket.addresses] = graph  # the most recently run last
        return graph

    def _release(self, bucket: Bucket, addresses: tuple) -> None:
        """The graph of the layout the bucket ran least recently: released, to keep
        :data:`GRAPHS_PER_BUCKET`; those buffers, if they come back, are captured again."""
        graph = bucket.graphs.pop(addresses)
        release = getattr(self.decoder, "release_captured_graph", None)
        if release is not None:
            try:
                release(graph)
            except Exception:  # noqa: BLE001 - a provider that cannot release keeps it; the id is not reused
                log.debug("graph %d not released", graph, exc_info=True)
        self._options.pop(graph, None)
        log.debug("step bucket %d: graph %d released", bucket.rows, graph)

    def _graph_options(self, graph_id: int) -> ort.RunOptions:
        if graph_id not in self._options:
            options = ort.RunOptions()
            options.add_run_config_entry(GRAPH_ID, str(graph_id))
            self._options[graph_id] = options
        return self._options[graph_id]
