"""The model runner: the encoder and decoder sessions and everything fed to them.

Graph input and output names come from the model's manifest (``ModelSpec.encoder_io`` /
``decoder_io``, read by :mod:`attnserve.contract`), never spelled here. The decoder step
feeds the :class:`~.cache.KVCache` as it is: numpy arrays to the session on the host
(through :func:`~.sessions.direct_run`: the C++ session's ``run`` for a CPU
``InferenceSession``; outputs come back as zero-copy arrays, and ``present`` is fed back as
``past`` untouched), or, with device placement (CUDA), the cache's ``OrtValue`` s bound with io
binding, ``present`` left on the device and only the logits brought to the host.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import onnxruntime as ort

from attnserve.contract.graph_io import SCREEN_ARGMAX, SCREEN_IDS, screen_flag

from .buckets import BucketSteps
from .cache import KVCache, NewRows, Placement
from .jobs import Job
from .options import EngineSettings
from .sessions import ModelSpec, direct_run
from .slot_cache import InPlaceCache


class EncodedRow(Sequence[np.ndarray]):
    """A job's cross K/V from an encoder run: 2 per layer, (H, length, D), views of row ``row``
    of the run's outputs, taken when read (a job that joins with its run's rows as they are
    never reads them)."""

    __slots__ = ("outputs", "row", "length")

    def __init__(self, outputs: list[np.ndarray], row: int, length: int) -> None:
        self.outputs, self.row, self.length = outputs, row, length

    def __len__(self) -> int:
        return len(self.outputs)

    def __getitem__(self, i: int) -> np.ndarray:  # type: ignore[override]  # layers by index only
        return self.outputs[i][self.row, :, : self.length]


class _Session:
    """A runner's ``encoder`` / ``decoder`` session. Setting it also sets the call that runs it
    (``_encoder_run`` / ``_decoder_run``, :func:`~.sessions.direct_run`), so a session swapped in
    (a test's wrapper, say) is the one that runs."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, runner, owner: type | None = None):
        return self if runner is None else runner.__dict__[self.name]

    def __set__(self, runner, session) -> None:
        runner.__dict__[self.name] = session
        runner.__dict__[f"_{self.name}_run"] = direct_run(session)


class ModelRunner:
    """Runs the encoder on newcomers and the decoder one step on the whole batch.

    ``before_run`` is called right before every model run, its inputs ready: the scheduler hands
    out the results gathered so far there, while onnxruntime is about to run without the GIL
    (see ``DecodeScheduler.__init__``). ``settings.step_buckets``: an in-place decoder's steps at
    fixed batch sizes up to ``settings.max_active_sequences`` (:mod:`.buckets`).
    """

    encoder = _Session()
    decoder = _Session()

    def __init__(
        self,
        encoder,
        decoder,
        spec: ModelSpec,
        placement: Placement,
        before_run: Callable[[], None] = lambda: None,
        settings: EngineSettings | None = None,
    ) -> None:
        self.encoder, self.decoder, self.spec, self.placement = encoder, decoder, spec, placement
        self.before_run = before_run
        self.cross_names = list(spec.encoder_io.cross)
        io = spec.decoder_io
        self.past_names, self.decoder_cross = list(io.past), list(io.cross)
        self.output_names = [io.logits, *io.present]
        # The step's alignment-layer attention (B, 1, L), fetched while some row keeps it
        # (``want_attention``, set by the scheduler at each boundary) and the graph returns it.
        self.has_attention = bool(io.attention)
        self.want_attention = False
        self.attention: np.ndarray | None = None
        # Encoder runs by source length: measured on CPU, where a run costs rows x length. On a
        # device a run's fixed cost (kernel launches) weighs more and padding less, and this is
        # not measured there: one run per boundary.
        self.split_runs = placement.device is None
        self._bound: tuple | None = None  # (cache.version, id(cache), attention, screen_ids) of the binding
        self._step_feeds: list[tuple[str, np.ndarray]] = []  # the in-place step's host inputs, by name
        self.vocab_size = decoder_vocab(decoder, io.logits) or (spec.vocab_size if spec.screen_vocab else 0)
        # Set by the scheduler at each boundary: nothing but each row's argmax is read from the
        # steps, so a decoder that screens its vocabulary (its screen flag) is told to, on the host.
        self.screen = False
        self._screen_flag = np.zeros((), np.bool_)  # the fed value, bound once with the in-place binding
        self._screens: tuple[object, str | None] = (None, None)  # (decoder, the screen flag it takes)
        self.screen_ids: np.ndarray | None = None  # the step's argmax (B,) int64, where the decoder screened it
        self.buckets = None
        if settings is not None and settings.step_buckets != "off" and io.in_place:
            rows, graphs = settings.max_active_sequences, settings.step_buckets == "cuda-graphs"
            self.buckets = BucketSteps(decoder, spec, placement, self.vocab_size, rows, graphs)

    # --- encoder ---------------------------------------------------------------------

    def encode(self, jobs: Sequence[Job]) -> list[np.ndarray] | None:
        """Encoder runs over ``jobs``, grouped by source length (:func:`length_runs`) so that a
        short text is not padded to the longest one; each job keeps its cross K/V,
        ``job.encoded``: 2 per layer (H, Lj, D).

        Returns the outputs, 2 per layer (n, H, L, D), row i = ``jobs[i]``, right-padded, when
        one run took every job in the given order; None when there were several runs. With
        device placement (CUDA) every job goes in one run. ``job.encoded`` is an
        :class:`EncodedRow`: its rows are sliced only when read.
        """
        runs = length_runs([job.source_tokens for job in jobs]) if self.split_runs else [range(len(jobs))]
        outputs = [self._encode_run([jobs[i] for i in rows]) for rows in runs]
        return outputs[0] if len(outputs) == 1 else None

    def _encode_run(self, jobs: list[Job]) -> list[np.ndarray]:
        t0 = time.perf_counter()
        L = max(job.source_tokens for job in jobs)
        src, src_mask = _source_ids(jobs, L, self.spec.pad_id), _source_mask(jobs, L)  # (n, L) each
        io = self.spec.encoder_io
        keep = [i for i, job in enumerate(jobs) if job.options.return_memory]
        names = self.cross_names + [io.memory] if keep else self.cross_names
        self.before_run()
        cross = self._encoder_run(names, {io.src_ids: src, io.src_mask: src_mask})  # (n, H, L, D) each
        if keep:
            *cross, memory = cross  # memory (n, L, C)
            for i in keep:
                jobs[i].memory = memory[i, : jobs[i].source_tokens].copy()  # (Lj, C)
        seconds = time.perf_counter() - t0
        for i, job in enumerate(jobs):
            job.encoded = EncodedRow(cross, i, job.source_tokens)
            job.encode_s = seconds
        return cross

    def new_rows(self, jobs: list[Job], run: tuple[list[np.ndarray], list[Job]] | None) -> NewRows:
        """The rows ``jobs`` (all encoded) bring into the batch (:func:`new_rows`)."""
        return new_rows(self.spec, len(self.cross_names), jobs, run)

    # --- decoder ---------------------------------------------------------------------

    def step(self, cache: KVCache | InPlaceCache, input_ids: np.ndarray) -> np.ndarray:
        """input_ids: (B, 1) int64 -> logits (B, V) float32; the cache advances one step. When the
        decoder screened the step and returned each row's argmax, that is ``screen_ids`` (B,) and
        the logits are (B, 1), its logit (export/screen_vocab.py); else ``screen_ids`` is None."""
        self.screen_ids = None
        if cache.in_place:
            return self._step_in_place(cache, input_ids)
        positions, self_mask = cache.step_inputs()
        io = self.spec.decoder_io
        if self.placement.device is None:
            feeds = {
                io.input_ids: input_ids,
                io.positions: positions,
                io.self_mask: self_mask,
                io.src_mask: cache.src_mask,
            }
            feeds.update(zip(self.past_names, cache.past))
            feeds.update(zip(self.decoder_cross, cache.cross))
            if self.takes_screen:
                feeds[self._screens[1]] = np.array(self.screen)
            attention, ids = self.want_attention and self.has_attention, self.ids_screened
            names = [*self.output_names, io.attention] if attention else [*self.output_names]
            names += [SCREEN_IDS] if ids else []
            self.before_run()
            outputs = self._decoder_run(names, feeds)
            if ids:
                *outputs, self.screen_ids = outputs
            if attention:
                *outputs, self.attention = outputs
            cache.advance(outputs[1:])
            return outputs[0]
        self_mask = np.ascontiguousarray(self_mask)  # a column slice of the cache's buffer
        binding = self.decoder.io_binding()
        for name, array in ((io.input_ids, input_ids), (io.positions, positions), (io.self_mask, self_mask)):
            binding.bind_cpu_input(name, array)
        binding.bind_ortvalue_input(io.src_mask, cache.src_mask)
        for name, value in zip(self.past_names + self.decoder_cross, cache.past + cache.cross):
            binding.bind_ortvalue_input(name, value)
        binding.bind_output(io.logits, "cpu")
        for name in self.output_names[1:]:
            binding.bind_output(name, self.placement.device, self.placement.device_id)
        attention = self.want_attention and self.has_attention
        if attention:
            binding.bind_output(io.attention, "cpu")
        self.before_run()
        self.decoder.run_with_iobinding(binding)
        outputs = binding.get_outputs()
        if attention:
            *outputs, last = outputs
            self.attention = np.array(last.numpy())
        cache.advance(list(outputs[1:]))
        return np.array(outputs[0].numpy())  # a copy: the view would not keep the OrtValue alive

    def _step_in_place(self, cache: InPlaceCache, input_ids: np.ndarray) -> np.ndarray:
        """One step of an in-place decoder: everything bound once per layout (:meth:`_bind`), the
        step only writes its tokens into the bound ids and runs; GroupQueryAttention writes each
        row's new key/value into the cache's buffers."""
        cache.reserve()  # grows the capacity (a copy) only when a row would write past it
        attention = self.want_attention and self.has_attention
        if self.buckets is not None:
            if self.buckets.decoder is not self.decoder:  # a session swapped in
                self.buckets.use(self.decoder)
            logits, weights = self.buckets.step(cache, input_ids, attention, self.before_run)
            cache.advance()
            if attention:
                self.attention = weights
            return logits
        ids = self.ids_screened
        if self._bound != (cache.version, id(cache), attention, ids):
            self._bind(cache, attention, ids)
        self._ids[:] = input_ids  # (B, 1) into the bound buffer
        self._screen_flag[...] = self.screen  # read only where bound (:meth:`_bind`)
        if self.placement.device is not None:
            # onnxruntime copies a host input to the device that reads it when the input is bound,
            # not at each run: on a device the step's inputs are bound again, with this step's values
            for name, array in self._step_feeds:
                self._binding.bind_cpu_input(name, array)
        self.before_run()
        self.decoder.run_with_iobinding(self._binding)
        cache.advance()
        if attention:  # bound right after the logits (:meth:`_bind`)
            self.attention = np.array(self._binding.get_outputs()[1].numpy())  # (B, 1, L)
        if ids:
            self.screen_ids = self._ids_out.copy()  # (B,) the scheduler keeps it as the next input
        if self._logits is not None:
            return self._logits  # (B, V), or (B, 1) when screened: the bound buffer, rewritten by every step
        return np.array(self._binding.get_outputs()[0].numpy())  # device: a host copy

    def _bind(self, cache: InPlaceCache, attention: bool, ids: bool) -> None:
        """Bind the step's inputs and outputs: each past buffer as its present too (one
        ``OrtValue``), host arrays the cache updates in place (positions, seqlens_k, total), and on
        the host a logits buffer; rebuilt when the cache replaces one of them (``cache.version``).
        On a device the host arrays are bound again at every step (:meth:`_step_in_place`): the
        binding copies a host input to the device when it is bound, so a value bound once would
        stay the one it had then. ``attention``: the step's attention output is bound too, on the
        host, right after the logits; ``ids``: the screened argmax, into a host buffer, last."""
        io, device = self.spec.decoder_io, self.placement.device
        binding = self.decoder.io_binding()
        B = cache.rows
        self._ids = np.empty((B, 1), np.int64)
        positions, seqlens, total = cache.step_inputs()
        self._step_feeds = [(io.input_ids, self._ids), (io.positions, positions), (io.seqlens, seqlens)]
        self._step_feeds.append((io.total_length, total))
        host = [*self._step_feeds, (io.src_mask, cache.src_mask)]
        if self.takes_screen:
            host.append((self._screens[1], self._screen_flag))
        keep = []  # the host OrtValues share the arrays' memory: keep them alive with the binding
        for name, array in host:
            value = ort.OrtValue.ortvalue_from_numpy(array) if isinstance(array, np.ndarray) else array
            keep.append(value)
            binding.bind_ortvalue_input(name, value)
        for name, t in zip(self.decoder_cross, cache.cross):
            value = ort.OrtValue.ortvalue_from_numpy(t) if isinstance(t, np.ndarray) else t
            keep.append(value)
            binding.bind_ortvalue_input(name, value)
        width = 1 if ids else self.vocab_size  # screened: each row's best logit
        if device is None and width:
            self._logits = np.empty((B, width), np.float32)
            keep.append(ort.OrtValue.ortvalue_from_numpy(self._logits))
            binding.bind_ortvalue_output(io.logits, keep[-1])
        else:
            self._logits = None
            binding.bind_output(io.logits, "cpu")
        if attention:
            binding.bind_output(io.attention, "cpu")  # (B, 1, L): its width follows the cross K/V
        if ids:
            self._ids_out = np.empty(B, np.int64)
            keep.append(ort.OrtValue.ortvalue_from_numpy(self._ids_out))
            binding.bind_ortvalue_output(SCREEN_IDS, keep[-1])
        for past, present, t in zip(io.past, io.present, cache.past):
            value = ort.OrtValue.ortvalue_from_numpy(t) if isinstance(t, np.ndarray) else t
            keep.append(value)
            binding.bind_ortvalue_input(past, value)
            binding.bind_ortvalue_output(present, value)  # the same buffer: written in place
        self._binding, self._keep, self._bound = binding, keep, (cache.version, id(cache), attention, ids)

    @property
    def takes_screen(self) -> bool:
        """The decoder has a screen flag (``screen_argmax``, or ``screen_vocab`` where the argmax
        stays in the logits) for the engine's never-generated ids and runs on the host (the
        device paths and the step buckets never feed it: it stays false there)."""
        if self._screens[0] is not self.decoder:
            overridable = getattr(self.decoder, "get_overridable_initializers", list)()
            usable = self.placement.device is None and self.spec.screen_vocab
            self._screens = (self.decoder, screen_flag(i.name for i in overridable) if usable else None)
        return self._screens[1] is not None

    @property
    def ids_screened(self) -> bool:
        """This step is screened and the decoder returns each row's argmax (``screen_ids``)."""
        return self.screen and self.takes_screen and self._screens[1] == SCREEN_ARGMAX


def new_rows(spec, tensors: int, jobs: list[Job], run: tuple[list[np.ndarray], list[Job]] | None) -> NewRows:
    """The rows ``jobs`` (all encoded) bring into the batch, ``tensors`` cross K/V tensors each.
    ``run``: the encoder run that just happened (outputs, its jobs in row order); when ``jobs``
    are its first rows in order, its outputs are used without a copy."""
    n, L = len(jobs), max(job.source_tokens for job in jobs)
    if run is not None and run[1][:n] == jobs:
        outputs = run[0]
        if outputs[0].shape[0] == n and outputs[0].shape[2] == L:  # the run was exactly these rows
            cross = list(outputs)
        else:
            cross = [c[:n, :, :L] for c in outputs]  # (n, H, L, D) each; contiguous unless the run was longer
    else:
        H, D = spec.num_heads, spec.head_dim
        cross = [np.zeros((n, H, L, D), np.float32) for _ in range(tensors)]
        for i, job in enumerate(jobs):
            for c, rows in zip(cross, job.encoded):
                c[i, :, : job.source_tokens] = rows  # (H, Lj, D)
    src_mask = _source_mask(jobs, L)  # (n, L); the cache's own
    for job in jobs:
        job.encoded = None  # the cache holds it from here on
    lengths = np.array([job.source_tokens for job in jobs], dtype=np.int64)
    return NewRows(cross, src_mask, lengths)


def decoder_vocab(decoder, logits: str) -> int:
    """The decoder's vocabulary size, from its logits output's shape (0 when not static)."""
    for spec in getattr(decoder, "get_outputs", list)():
        if spec.name == logits and spec.shape and isinstance(spec.shape[-1], int):
            return spec.shape[-1]
    return 0


def _source_ids(jobs: Sequence[Job], L: int, pad_id: int) -> np.ndarray:
    """The jobs' source ids, right-padded to ``L``: (n, L) int64. One source (a one-text
    request, the common case) is its ids as they are: filling padded rows took ~30 us of a
    batch-1 request on the caches its last decoder run left (benchmarks/README.md)."""
    if len(jobs) == 1:
        return jobs[0].src_ids[None, :]
    src = np.full((len(jobs), L), pad_id, dtype=np.int64)
    for i, job in enumerate(jobs):
        src[i, : job.source_tokens] = job.src_ids
    return src


def _source_mask(jobs: Sequence[Job], L: int) -> np.ndarray:
    """1 over each job's source tokens, 0 over its padding: (n, L) int32, a new array."""
    if len(jobs) == 1:
        return np.ones((1, L), dtype=np.int32)
    mask = np.zeros((len(jobs), L), dtype=np.int32)
    for i, job in enumerate(jobs):
        mask[i, : job.source_tokens] = 1
    return mask


# What one more encoder run costs, in source tokens' worth of encoder work: onnxruntime's and
# our per-run overhead. Measured on mt-small, 1 thread: a run costs ~0.1 ms + 24 us per
# (row x padded position), nearly linear in rows x length, so the overhead is ~5 positions;
# larger models have a larger per-position cost and the same overhead.
RUN_COST_TOKENS = 16


def length_runs(lengths: Sequence[int], run_cost: int = RUN_COST_TOKENS) -> list[list[int]]:
    """Indices of ``lengths`` split into encoder runs: sorted by length, cut where the padding a
    run would spend on its shorter rows costs more than another run (``run_cost`` positions).

    An encoder run's cost is about rows x its longest length, so one run over a mix of short
    and long sources spends most of its work on padding (160 texts of 9 and 41 tokens: 6,560
    positions in one run, 2,720 in two). The cuts minimise the total positions plus
    ``run_cost`` per run (dynamic programming over the distinct lengths). Sources of a length
    stay together; one run keeps the given order.
    """
    if not lengths:
        return []
    if min(lengths) == max(lengths):  # one length (one text, say): nothing to cut
        return [list(range(len(lengths)))]
    distinct, counts = np.unique(np.asarray(lengths, dtype=np.int64), return_counts=True)
    upto = np.concatenate([[0], np.cumsum(counts)])  # rows shorter than distinct[g]: upto[g]
    best = np.zeros(len(distinct) + 1)  # best[g]: cheapest cost of the first g lengths
    cut = np.zeros(len(distinct) + 1, dtype=np.int64)  # where the last run of best[g] starts
    for g in range(1, len(distinct) + 1):
        # a last run over lengths a..g-1 costs run_cost + (rows in it) x its longest length
        costs = best[:g] + run_cost + (upto[g] - upto[:g]) * distinct[g - 1]
        cut[g] = int(np.argmin(costs))
        best[g] = costs[cut[g]]
    bounds, g = [], len(distinct)
    while g:
        bounds.append((int(upto[cut[g]]), int(upto[g])))
        g = int(cut[g])
    if len(bounds) == 1:
        return [list(range(len(lengths)))]
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    return [order[a:b] for a, b in reversed(bounds)]
