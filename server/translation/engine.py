"""The translation engine: the asyncio face of the decode scheduler.

The translation service calls it (``server/service/sentence_pipeline.py``): :meth:`TranslationEngine.prepare`
turns a checked request's token ids into a :class:`~.prepared.Prepared` on the event loop, then
:meth:`~TranslationEngine.stream`, its one entry, hands its jobs to the
:class:`~.scheduler.DecodeScheduler` thread and yields the events that it posts back with
``call_soon_threadsafe``: the loop never blocks on onnxruntime. Each text's last event carries its
whole result; :meth:`~TranslationEngine.translate` is that stream drained. Cancelling the awaiting
task (a client cancel or a gRPC deadline) or closing a stream flags the jobs, and their rows leave
the decode batch at the next step boundary.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

from tokenizers import Tokenizer

from attnserve.contract.deadline import Deadline
from attnserve.contract.manifest import Manifest

from ..shared.errors import ShuttingDown
from .cache import placement_for
from .detok import IncrementalDetokenizer
from .jobs import CollectSink, Gather, Job, StreamSink, stream_swap
from .options import DecodeOptions, EngineSettings, Hypothesis, StreamEvent, TranslationResult
from .prepared import ModelLimits, Prepared, measure
from .scheduler import DecodeScheduler
from .sessions import keeps_step_attention, model_spec


class TranslationEngine:
    """Continuous-batching translation over an encoder and a decoder session (see the module docstring)."""

    def __init__(
        self,
        model_dir: Path,
        manifest: Manifest,
        encoder,
        decoder,
        settings: EngineSettings | None = None,
    ) -> None:
        self.manifest = manifest
        self.settings = settings = settings or EngineSettings()
        self.spec = model_spec(manifest)
        placement = placement_for(decoder)
        # it can keep its steps' attention (keeps_step_attention: on the CPU only)
        self.step_attention = keeps_step_attention(manifest, "cuda" if placement.device == "cuda" else "cpu")
        self.tokenizer = Tokenizer.from_file(str(Path(model_dir) / manifest.tokenizer.file))
        self.max_source_len = int(manifest.limits["max_source_len"])
        self.max_target_len = int(manifest.limits["max_target_len"])
        vocab_size = int(manifest.config.get("vocab_size", self.tokenizer.get_vocab_size()))
        self.limits = ModelLimits(settings, self.spec, self.max_source_len, self.max_target_len, vocab_size)
        self._scheduler = DecodeScheduler(encoder, decoder, self.spec, settings, placement)
        self._accepting = False
        self._started = False

    # --- observability -------------------------------------------------------------

    @property
    def active_sequences(self) -> int:
        return self._scheduler.active_sequences

    @property
    def queued(self) -> int:
        return self._scheduler.queued

    @property
    def kv_cache_bytes(self) -> int:
        return self._scheduler.kv_cache_bytes

    @property
    def kv_cache_capacity(self) -> int:
        """Tokens each row's self-attention cache holds now (in place: the buffer's capacity)."""
        cache = self._scheduler.cache
        return cache.capacity if cache.rows else 0

    @property
    def kv_cache_row_bytes(self) -> int:
        """Bytes one row of the batch holds at that capacity (self-attention and cross K/V)."""
        cache = self._scheduler.cache
        return cache.row_bytes if cache.rows else 0

    @property
    def tokens_in_flight(self) -> int:
        return self._scheduler.tokens_in_flight

    @property
    def tokens_generated_total(self) -> int:
        return self._scheduler.tokens_generated_total

    @property
    def steps_total(self) -> int:
        return self._scheduler.steps_total

    @property
    def on_step(self) -> Callable[[int, int], None] | None:
        """Called on the scheduler thread after each step with (rows, tokens generated); keep it cheap."""
        return self._scheduler.on_step

    @on_step.setter
    def on_step(self, callback: Callable[[int, int], None] | None) -> None:
        self._scheduler.on_step = callback

    # --- lifecycle -----------------------------------------------------------------

    def warmup(self) -> float:
        """One short translation on the calling thread (before :meth:`start`); returns seconds."""
        if self._started:
            raise RuntimeError("warmup() runs before start()")
        t0 = time.perf_counter()
        ids = self.tokenizer.encode("warm up").ids[: self.max_source_len] or [self.spec.eos_id]
        sink = CollectSink()
        options = DecodeOptions(max_new_tokens=min(4, self.max_target_len))
        self._scheduler.run_until_idle([Job(ids, options, options.max_new_tokens, self.spec.eos_id, sink)])
        if sink.error is not None:
            raise sink.error
        self._scheduler.steps_total = self._scheduler.tokens_generated_total = 0
        return time.perf_counter() - t0

    async def start(self) -> None:
        self._scheduler.start()
        self._started = self._accepting = True

    async def stop(self, grace_s: float) -> None:
        """Refuse new work; let in-flight work finish within ``grace_s``; fail the rest with ShuttingDown."""
        self._accepting = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while not self._scheduler.idle and loop.time() < deadline:
            await asyncio.sleep(0.005)
        self._scheduler.close(ShuttingDown("the server shut down before this translation finished"))
        await loop.run_in_executor(None, self._scheduler.join)

    # --- requests --------------------------------------------------------------------

    def prepare(
        self,
        texts: Sequence[str],
        options: DecodeOptions,
        tokenised: Sequence[Sequence[int]] | None = None,
        max_new_tokens: int | None = None,
    ) -> Prepared:
        """A request checked by the translation service (``service/limits.py``) as :meth:`translate`
        and :meth:`stream` take it: the texts and options are trusted, only their tokens are
        measured (``requests.measure``, InvalidRequest). ``tokenised``: the texts' ids from this
        engine's tokenizer already (a document's sentences: the splitter measured them), not
        redone; ``max_new_tokens``: the effective one the service's check returned (None: the
        options', else the model's limit)."""
        if tokenised is None:
            tokenised = [enc.ids for enc in self.tokenizer.encode_batch(list(texts))]
        elif len(tokenised) != len(texts):
            raise ValueError(f"{len(tokenised)} token id lists for {len(texts)} texts")
        max_new = max_new_tokens if max_new_tokens is not None else options.max_new_tokens or self.max_target_len
        sources = [list(options.source_prefix_ids) + list(src) for src in tokenised]
        measure(self.limits, sources, options, max_new)
        return Prepared(sources, options, max_new)

    def _check_accepting(self) -> None:
        if not self._accepting:
            raise ShuttingDown(
                "the translation engine is shutting down" if self._started else "the translation engine is not running"
            )

    def _job(self, src: list[int], prepared: Prepared, sink, deadline: Deadline | None) -> Job:
        at = None if deadline is None else deadline.perf_counter()  # the scheduler's clock
        per_token = self.spec.cache_bytes_per_token
        return Job(
            src,
            prepared.options,
            prepared.max_new_tokens,
            self.spec.eos_id,
            sink,
            deadline=at,
            bytes_per_token=per_token,
        )

    async def translate(self, prepared: Prepared, deadline: Deadline | None = None) -> list[TranslationResult]:
        """One result per text of ``prepared`` (:meth:`prepare`), in order: :meth:`stream` drained,
        its texts' last events' results (as TGI's ``generate`` drains ``generate_stream``)."""
        return [event.result async for event in self.stream(prepared, deadline, tokens=False)]

    async def stream(
        self, prepared: Prepared, deadline: Deadline | None = None, tokens: bool = True
    ) -> AsyncIterator[StreamEvent]:
        """The engine's one entry: the events of ``prepared``'s texts (:meth:`prepare`), each text's
        last one carrying its whole result (``StreamEvent.result``: what :meth:`translate` returns
        for it) and its ``index``. ``tokens`` and one text of a one-row search (greedy, sampling):
        its tokens as they are generated, then its last event; otherwise (beams, several texts, or
        ``tokens`` off) only the texts' last events, in order, once the last text finishes: the
        request costs the event loop one wake-up however many texts it has.

        ``deadline``: the scheduler fails the texts still unfinished then with DeadlineExceeded,
        waiting or decoding, and frees their rows (None: no deadline of the engine's own). Cancelling
        the awaiting task or closing the stream frees their rows at the next step boundary."""
        self._check_accepting()
        if tokens and len(prepared.sources) == 1 and prepared.options.beam_size == 1:
            async for event in self._tokens(prepared, deadline):
                yield event
            return
        for index, result in enumerate(await self._results(prepared, deadline)):
            best = result.hypotheses[0]
            ids, written = tuple(best.token_ids), tuple(best.written_ids)
            last = StreamEvent(best.text, ids, best.finish_reason, result.queue_ms, written, result=result, index=index)
            yield dataclasses.replace(last, memory=result.memory, attention=result.attention)

    async def _results(self, prepared: Prepared, deadline: Deadline | None) -> list[TranslationResult]:
        """Every text's result, in order, from one future the scheduler settles when the last finishes."""
        future = asyncio.get_running_loop().create_future()
        gather = Gather(self._scheduler.outbox, future, self._result, len(prepared.sources))
        jobs = [self._job(src, prepared, sink, deadline) for src, sink in zip(prepared.sources, gather.sinks)]
        self._scheduler.submit(jobs)
        try:
            return await future
        except BaseException:  # a text failed (the rest is abandoned with it) or the caller was cancelled
            self._scheduler.cancel([job for job in jobs if not job.done])  # their rows leave at the next boundary
            raise

    def _result(self, job: Job) -> TranslationResult:
        """Built when a job completes (a gathered request's on the scheduler thread)."""
        hide, kept = job.options.hide_prefix, job.attention  # kept: what the steps kept of their attention
        hypotheses = [
            Hypothesis(
                text=self.tokenizer.decode(h.tokens[hide:], skip_special_tokens=True),
                token_ids=list(h.tokens[hide:]),
                logprob=float(h.logprob),
                score=float(h.score),
                finish_reason=h.finish_reason,
                written_ids=list(h.written[hide:]) if h.written is not None else [],
                attention=kept.of(h.tokens if h.written is None else h.written) if kept is not None else None,
            )
            for h in job.result()
        ]
        return TranslationResult(
            hypotheses=hypotheses,
            source_tokens=job.source_tokens,
            queue_ms=1000 * (job.t_admit - job.t_submit),
            encode_ms=1000 * job.encode_s,
            decode_ms=1000 * (job.t_done - job.t_admit),
            first_token_ms=1000 * (job.t_first - job.t_submit),
            memory=job.memory,
        )

    async def _tokens(self, prepared: Prepared, deadline: Deadline | None) -> AsyncIterator[StreamEvent]:
        """One text's events as its tokens come (see :meth:`stream`); the last carries its result."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        interval_s = self.settings.stream_interval_ms / 1e3
        o = prepared.options
        sink = StreamSink(self._scheduler.outbox, loop, queue, interval_s, o.hide_prefix, stream_swap(o))
        job = self._job(prepared.sources[0], prepared, sink, deadline)
        self._scheduler.submit([job])
        detok = IncrementalDetokenizer(self.tokenizer)
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                token_ids, finish_reason = item[:2]  # shown tokens only: the sink drops the hidden prefix
                delta = detok.push(token_ids) if token_ids else ""
                if finish_reason is not None:  # the job has left the batch: its result is complete
                    result = self._result(job)
                    written = item[2] if len(item) > 2 else ()  # the ids fed, where surrogates were swapped out
                    last = StreamEvent(delta + detok.flush(), tuple(token_ids), finish_reason, result.queue_ms, written)
                    yield dataclasses.replace(last, memory=job.memory, attention=result.attention, result=result)
                    return
                yield StreamEvent(delta, tuple(token_ids), None)
        finally:
            if not job.done:
                self._scheduler.cancel([job])
