"""Image classification: preprocessing in a thread pool, a dynamic batcher, one
onnxruntime call per batch off the event loop, softmax and top-k."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import onnxruntime as ort

from attnserve.contract import images
from attnserve.contract.manifest import Manifest

from ..shared.config import Settings
from ..shared.errors import InferenceFailed, InvalidRequest
from ..shared.remote_sessions import RemoteSession
from .batching import BatchQueue, BatchResult
from .preprocess import preprocess_image, rows_out_of_range, tensor_view, values_refusal

# Batches the batcher runs at once: one is assembled (copied, checked) while the other runs.
BATCHES_IN_FLIGHT = 2


class Dropped(Exception):
    """Preprocessing stopped because nobody waits for it any more (never reaches a client)."""


@dataclass(frozen=True)
class EncodedImage:
    data: bytes


@dataclass(frozen=True)
class RawTensor:
    shape: list[int]
    dtype: str  # "FP32", "FP16", ... (only FP32 is accepted)
    raw: bytes | memoryview | np.ndarray  # little-endian values, C-contiguous; read in place, never copied


ImageInput = EncodedImage | RawTensor


class Pixels(NamedTuple):
    """One image on its way to the batch: (C, H, W) float32, and whether its values are still
    to be checked (a raw tensor's are checked in its batch row, read once: ``values_refusal``)."""

    values: np.ndarray
    unchecked: bool


@dataclass(frozen=True)
class Refused:
    """An image of a batch whose values were refused: the reason, for its request alone."""

    reason: str


@dataclass(frozen=True)
class LabelScore:
    label: str
    index: int
    probability: float


@dataclass(frozen=True)
class ImageResult:
    probabilities: np.ndarray  # (K,) float32, one per label (KServe's PROBABILITIES)
    top_k: int
    names: list[str]  # the model's labels, K
    batch_size: int
    preprocess_ms: float
    queue_ms: float
    inference_ms: float

    @property
    def labels(self) -> list[LabelScore]:
        """The ``top_k`` most probable labels, most probable first: ranked when a door asks (a
        KServe reply of PROBABILITIES alone never does)."""
        return top_labels(self.probabilities, self.top_k, self.names)


def softmax(logits: np.ndarray) -> np.ndarray:
    """(B, K) float32 logits -> (B, K) probabilities, numerically stable."""
    shifted = logits - logits.max(axis=-1, keepdims=True)  # (B, K)
    exp = np.exp(shifted)  # (B, K)
    return exp / exp.sum(axis=-1, keepdims=True)


def top_indices(probs: np.ndarray, k: int) -> np.ndarray:
    """The indices of the ``k`` largest of ``probs`` (K,), largest first, ties lower index first:
    ``argsort(-probs, kind="stable")[:k]`` in O(K) for k much smaller than K."""
    K = len(probs)
    if k >= K:
        return np.argsort(-probs, kind="stable")  # (K,)
    if k == 1:  # argmax gives the first maximum, or the first NaN when there is one: then sort
        best = int(np.argmax(probs))
        if not np.isnan(probs[best]):
            return np.array([best])  # (1,)
    kth = np.partition(probs, K - k)[K - k]  # the k-th largest value
    above = np.flatnonzero(probs > kth)  # (< k,)
    top = np.concatenate([above, np.flatnonzero(probs == kth)[: k - len(above)]])  # (k,) unless NaN
    if len(top) != k:  # NaN probabilities compare false: the full sort places them
        return np.argsort(-probs, kind="stable")[:k]
    return top[np.lexsort((top, -probs[top]))]  # (k,) by probability, then index


def top_labels(probs: np.ndarray, k: int, labels: list[str]) -> list[LabelScore]:
    """The ``k`` most probable of ``probs`` (K,), highest first (ties: lower index first)."""
    top = top_indices(probs, k).tolist()  # k label indices
    values = probs[top].tolist()  # (k,) as Python floats
    return [LabelScore(labels[i], i, p) for i, p in zip(top, values)]


class ImageClassifier:
    """One classification model: its session, its batcher and its preprocessing."""

    def __init__(self, manifest: Manifest, session: ort.InferenceSession, settings: Settings) -> None:
        self.manifest = manifest
        self.name = manifest.name
        self.session = session
        self.settings = settings
        self.labels = list(manifest.labels or [])
        self.prep = manifest.preprocessing
        graph = manifest.graphs["model"]
        self.input_name, self.output_name = graph.inputs[0], graph.outputs[0]
        # Two batches in flight, one worker each: one is copied into its buffer and checked while
        # the other runs; the session runs one batch at a time (onnxruntime parallelises inside it).
        self._executor = ThreadPoolExecutor(max_workers=BATCHES_IN_FLIGHT, thread_name_prefix=f"ort-{self.name}")
        self._run_lock = threading.Lock()
        # The batches' inputs, (rows, C, H, W) float32 each, reused by the batches after them and
        # grown to the largest batch seen; a batch in flight holds one.
        self._buffers: list[np.ndarray] = []
        self.batcher: BatchQueue[Pixels, np.ndarray | Refused] = BatchQueue(
            self.name,
            self._run_batch,
            max_batch_size=settings.max_batch_size,
            max_queue_delay_ms=settings.max_queue_delay_ms,
            max_queue_size=settings.max_queue_size,
            max_in_flight=BATCHES_IN_FLIGHT,
        )

    def infer(self, pixels: np.ndarray) -> np.ndarray:
        """pixels (B, C, H, W) float32 -> probabilities (B, num_labels) float32. Sync."""
        with self._run_lock:
            (logits,) = self.session.run([self.output_name], {self.input_name: pixels})  # (B, K)
        if logits.shape != (pixels.shape[0], len(self.labels)):
            raise InferenceFailed(
                f"model {self.name}: output {self.output_name} has shape {list(logits.shape)}, "
                f"expected [{pixels.shape[0]}, {len(self.labels)}] (one row per image, one column per label)"
            )
        return softmax(logits.astype(np.float32))

    def warmup(self) -> float:
        """One batch of one zero image through the session; returns seconds."""
        start = time.perf_counter()
        size, channels = self.prep.image_size, self.prep.channels
        self.infer(np.zeros((1, channels, size, size), dtype=np.float32))
        return time.perf_counter() - start

    def infer_items(self, items: list[Pixels]) -> list[np.ndarray | Refused]:
        """B images -> B probabilities (K,), or Refused for a raw tensor whose values are refused.
        Sync: each image copied once into a batch buffer and the raw tensors' values checked
        there (a batch of one is read where it lies); one session run. A refused row runs as
        zeros, its result dropped."""
        if len(items) == 1:
            values, unchecked = items[0]
            if unchecked and (reason := values_refusal(values)) is not None:
                return [Refused(reason)]
            return [self.infer(values[None])[0]]  # (1, C, H, W), a view
        refused: list[str | None] = [None] * len(items)
        shape = (len(items), self.prep.channels, self.prep.image_size, self.prep.image_size)
        if isinstance(self.session, RemoteSession):  # assembled where the session host reads it: not copied again
            buffer = self.session.staging(shape)
        else:
            buffer = self._buffers.pop() if self._buffers else None
            if buffer is None or len(buffer) < len(items):
                buffer = np.empty(shape, np.float32)
        try:
            pixels = self._assemble(items, buffer[: len(items)])  # (B, C, H, W)
            rows = pixels.reshape(len(items), -1)  # (B, C*H*W), a view
            if any(unchecked for _, unchecked in items):
                for i in np.flatnonzero(rows_out_of_range(rows)).tolist():
                    if items[i].unchecked:
                        refused[i] = values_refusal(rows[i])
                        rows[i].fill(0.0)
            probs = self.infer(pixels)  # (B, K)
        finally:
            if not isinstance(self.session, RemoteSession):
                self._buffers.append(buffer)
        return [p if r is None else Refused(r) for p, r in zip(probs, refused)]

    @staticmethod
    def _assemble(items: list[Pixels], pixels: np.ndarray) -> np.ndarray:
        """The items' images, one row each of ``pixels`` (B, C, H, W), which it returns.

        The rows are copied holding the GIL (a memoryview assignment: one memcpy each): a numpy
        copy lets go of the GIL and takes it back for every row, and with the event loop busy on
        the other core each take-back waits its turn, which cost this thread a third of its time
        at the light model's ceiling (benchmarks/README.md, server-profile)."""
        dest = memoryview(pixels.reshape(len(items), -1)).cast("B")  # the rows' bytes, one after another
        width = pixels[0].nbytes
        for i, (values, _) in enumerate(items):
            if values.flags.c_contiguous:
                dest[i * width : (i + 1) * width] = memoryview(values).cast("B")
            else:
                np.copyto(pixels[i], values)
        return pixels

    async def _run_batch(self, items: list[np.ndarray]) -> list[np.ndarray]:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.infer_items, items)

    def prepare(self, inputs: list[ImageInput], dropped: threading.Event | None = None) -> list[Pixels]:
        """Decode every input -> (C, H, W) float32 each; a raw tensor's datatype, shape and size
        checked, its values left to its batch row. Sync: encoded images run in a thread pool.

        The request's images together may declare at most ``max_request_pixels`` (read from their
        headers first); ``dropped`` set (the caller's deadline passed, or it went away) stops the
        work before the next image."""
        self.check_pixels(inputs)
        out = []
        for i, item in enumerate(inputs):
            if dropped is not None and dropped.is_set():
                raise Dropped(f"dropped after {i} of {len(inputs)} images: the caller no longer waits")
            try:
                if isinstance(item, EncodedImage):
                    decoded = preprocess_image(
                        item.data,
                        self.prep,
                        max_pixels=self.settings.max_image_pixels,
                        max_bytes=self.settings.max_image_bytes,
                    )
                    out.append(Pixels(decoded, False))
                else:
                    out.append(Pixels(tensor_view(item.shape, item.dtype, item.raw, self.prep), True))
            except InvalidRequest as exc:
                raise InvalidRequest(f"images[{i}]: {exc}") from None
        return out

    def check_pixels(self, inputs: list[ImageInput]) -> None:
        """Decoding costs about the pixels decoded: 64 images of 25 megapixels each took 20 s."""
        limit = self.settings.max_request_pixels
        total = sum(images.declared_pixels(item.data) for item in inputs if isinstance(item, EncodedImage))
        if total > limit:
            raise InvalidRequest(
                f"the images of this request declare {total:,} pixels together; the limit is {limit:,} "
                "(--max-request-pixels): send them in several requests"
            )

    async def classify(self, inputs: list[ImageInput], top_k: int, pool: Executor) -> list[ImageResult]:
        """Preprocess in ``pool``, queue every image in the batcher, gather the results in order."""
        if not inputs:
            raise InvalidRequest("images is empty: send at least one image")
        if len(inputs) > self.settings.max_images_per_request:
            raise InvalidRequest(
                f"{len(inputs)} images in one request; the limit is {self.settings.max_images_per_request}"
            )
        start = time.perf_counter()
        if self.checks_inline(inputs):
            pixels = self.prepare(inputs)
        else:
            dropped = threading.Event()
            try:
                pixels = await asyncio.get_running_loop().run_in_executor(pool, self.prepare, inputs, dropped)
            except asyncio.CancelledError:  # past the deadline, or the client went away: stop decoding
                dropped.set()
                raise
        preprocess_ms = (time.perf_counter() - start) * 1000.0
        futures = self.batcher.submit_many(pixels)
        results: list[BatchResult] = [await futures[0]] if len(futures) == 1 else await asyncio.gather(*futures)
        for i, r in enumerate(results):
            if isinstance(r.value, Refused):
                raise InvalidRequest(f"images[{i}]: {r.value.reason}")
        k = min(top_k, len(self.labels))
        out = []
        for r in results:
            out.append(
                ImageResult(r.value, k, self.labels, r.batch_size, preprocess_ms, r.queue_s * 1e3, r.run_s * 1e3)
            )
        return out

    @staticmethod
    def checks_inline(inputs: list[ImageInput]) -> bool:
        """Raw tensors only: their checks read a few header fields, cheaper on the event loop than
        a hop to the pool and back (encoded images are decoded in the pool)."""
        return all(isinstance(item, RawTensor) for item in inputs)

    async def start(self) -> None:
        await self.batcher.start()

    async def stop(self, grace_s: float) -> None:
        await self.batcher.stop(grace_s)
        self._executor.shutdown(wait=False)
        if isinstance(self.session, RemoteSession):  # --shared-classifier: the host closes it with its last worker
            await asyncio.get_running_loop().run_in_executor(None, self.session.close)
