"""The translation engine: validation, tokenization and the asyncio face of the decode scheduler.

Handlers call :meth:`TranslationEngine.translate` or :meth:`TranslationEngine.stream`;
both tokenize on the event loop (microseconds), hand jobs to the
:class:`~.scheduler.DecodeScheduler` thread and await results that it posts back with
``call_soon_threadsafe``: the loop never blocks on onnxruntime. Cancelling the awaiting
task (a client cancel or a gRPC deadline) or closing a stream flags the jobs, and
their rows leave the decode batch at the next step boundary.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from tokenizers import Tokenizer

from attnserve.contract.manifest import Manifest
from attnserve.server.documents import DocumentLimits
from attnserve.server.errors import InvalidRequest, ShuttingDown

from .cache import placement_for
from .detok import IncrementalDetokenizer
from .jobs import CollectSink, FutureSink, Job, StreamSink
from .options import DecodeOptions, EngineSettings, Hypothesis, StreamEvent, TranslationResult
from .scheduler import DecodeScheduler
from .sessions import model_spec

MAX_LENGTH_PENALTY = 10.0


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
        self.tokenizer = Tokenizer.from_file(str(Path(model_dir) / manifest.tokenizer.file))
        self.max_source_len = int(manifest.limits["max_source_len"])
        self.max_target_len = int(manifest.limits["max_target_len"])
        self.vocab_size = int(manifest.config.get("vocab_size", self.tokenizer.get_vocab_size()))
        self._scheduler = DecodeScheduler(encoder, decoder, self.spec, settings, placement_for(decoder))
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

    # --- validation ------------------------------------------------------------------

    def validate(self, texts: list[str], options: DecodeOptions) -> None:
        """Cheap checks of a request; raises InvalidRequest with a message a person can act on."""
        self._prepare(texts, options)

    def _check_options(self, options: DecodeOptions) -> int:
        """Validate ``options``; returns the effective max_new_tokens."""
        s = self.settings
        if not 1 <= options.beam_size <= s.max_beam_size:
            raise InvalidRequest(f"beam_size must be in 1..{s.max_beam_size}, got {options.beam_size}")
        if options.beam_size > s.max_active_sequences:
            raise InvalidRequest(
                f"beam_size {options.beam_size} needs {options.beam_size} batch rows; this server runs at most "
                f"{s.max_active_sequences}"
            )
        if not 1 <= options.num_hypotheses <= options.beam_size:
            raise InvalidRequest(
                f"num_hypotheses must be in 1..beam_size ({options.beam_size}), got {options.num_hypotheses}"
            )
        if not 0 <= options.max_new_tokens <= self.max_target_len:
            raise InvalidRequest(
                f"max_new_tokens must be in 0..{self.max_target_len} (0 = the model's limit, "
                f"{self.max_target_len}), got {options.max_new_tokens}"
            )
        # |length_penalty| <= 10 keeps len ** length_penalty finite at every target length (found by
        # tests/reliability/test_fuzz.py: 1e30 overflowed inside the decoder step, an INTERNAL).
        if not (math.isfinite(options.length_penalty) and abs(options.length_penalty) <= MAX_LENGTH_PENALTY):
            raise InvalidRequest(
                f"length_penalty must be in -{MAX_LENGTH_PENALTY:g}..{MAX_LENGTH_PENALTY:g} "
                f"(1.0 = average log-probability per token), got {options.length_penalty}"
            )
        if not (math.isfinite(options.temperature) and options.temperature >= 0):
            raise InvalidRequest(f"temperature must be >= 0 (0 = greedy), got {options.temperature}")
        if not 0 < options.top_p <= 1:
            raise InvalidRequest(f"top_p must be in (0, 1] (1 = off), got {options.top_p}")
        if options.top_k < 0:
            raise InvalidRequest(f"top_k must be >= 0 (0 = off), got {options.top_k}")
        if options.seed is not None and options.seed < 0:
            raise InvalidRequest(f"seed must be >= 0, got {options.seed}")
        if options.sampling and options.beam_size > 1:
            raise InvalidRequest(
                f"sampling (temperature {options.temperature}) works with beam_size 1 only, got {options.beam_size}"
            )
        max_new = options.max_new_tokens or self.max_target_len
        self._check_prefix(options, max_new)
        return max_new

    def _check_prefix(self, options: DecodeOptions, max_new: int) -> None:
        """Forced prefix ids: known, not special, no longer than the output; hide_prefix within them."""
        prefix = options.prefix_ids
        if len(prefix) > max_new:
            raise InvalidRequest(
                f"the forced target prefix is {len(prefix)} tokens, more than max_new_tokens ({max_new})"
            )
        special = {self.spec.pad_id: "padding", self.spec.bos_id: "start", self.spec.eos_id: "end"}
        for i, tok in enumerate(prefix):
            if not (isinstance(tok, int) and 0 <= tok < self.vocab_size):
                raise InvalidRequest(
                    f"prefix token {i} is {tok!r}; this model's token ids are 0..{self.vocab_size - 1}"
                )
            if tok in special:
                raise InvalidRequest(
                    f"prefix token {i} is the model's {special[tok]} token ({tok}); it cannot be forced"
                )
        if not 0 <= options.hide_prefix <= len(prefix):
            raise InvalidRequest(
                f"hide_prefix must be in 0..{len(prefix)} (the forced prefix's length), got {options.hide_prefix}"
            )

    def _prepare(self, texts: list[str], options: DecodeOptions) -> tuple[list[list[int]], int]:
        """Validate and tokenize; returns (source ids per text, max_new_tokens)."""
        limit = self.settings.max_texts_per_request
        if not texts:
            raise InvalidRequest("no texts to translate")
        if len(texts) > limit:
            raise InvalidRequest(f"{len(texts)} texts in one request; the limit is {limit}: split the request")
        # Characters first: a 1 MB text is refused before it is read, let alone tokenised.
        DocumentLimits(self.settings.max_text_chars, self.settings.max_request_chars).check(texts)
        max_new = self._check_options(options)
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise InvalidRequest(f"text {i} is empty")
        ids = [enc.ids for enc in self.tokenizer.encode_batch(list(texts))]
        budget = self.settings.max_tokens_in_flight
        for i, src in enumerate(ids):
            if len(src) > self.max_source_len:
                raise InvalidRequest(
                    f"text {i} is {len(src)} tokens long after tokenization; this model takes at most "
                    f"{self.max_source_len}: shorten or split it"
                )
            need = options.beam_size * (len(src) + max_new)
            if need > budget:
                raise InvalidRequest(
                    f"text {i} needs {need} tokens in flight (beam_size {options.beam_size} x ({len(src)} source + "
                    f"{max_new} new tokens)); this server allows {budget}: lower max_new_tokens or beam_size"
                )
        return ids, max_new

    def _check_accepting(self) -> None:
        if not self._accepting:
            raise ShuttingDown(
                "the translation engine is shutting down" if self._started else "the translation engine is not running"
            )

    # --- requests --------------------------------------------------------------------

    async def translate(self, texts: list[str], options: DecodeOptions) -> list[TranslationResult]:
        """One result per text, in order (see the module docstring for cancellation)."""
        self._check_accepting()
        sources, max_new = self._prepare(texts, options)
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in sources]
        jobs = [
            Job(src, options, max_new, self.spec.eos_id, FutureSink(self._scheduler.outbox, loop, future, self._result))
            for src, future in zip(sources, futures)
        ]
        self._scheduler.submit(jobs)
        try:
            done, pending = await asyncio.wait(futures, return_when=asyncio.FIRST_EXCEPTION)
        except BaseException:  # cancelled (client cancel, deadline): free the rows
            self._abandon(jobs, futures)
            raise
        if pending:  # one failed: the rest is abandoned with it
            self._abandon(jobs, futures)
        errors = [f.exception() for f in futures if f.done() and not f.cancelled()]  # retrieves every error
        for error in errors:
            if error is not None:
                raise error
        return [future.result() for future in futures]

    def _abandon(self, jobs: list[Job], futures: list[asyncio.Future]) -> None:
        self._scheduler.cancel(jobs)
        for future in futures:
            future.cancel()

    def _result(self, job: Job) -> TranslationResult:
        """Built on the scheduler thread when a job completes."""
        hide = job.options.hide_prefix
        hypotheses = [
            Hypothesis(
                text=self.tokenizer.decode(h.tokens[hide:], skip_special_tokens=True),
                token_ids=list(h.tokens[hide:]),
                logprob=float(h.logprob),
                score=float(h.score),
                finish_reason=h.finish_reason,
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
        )

    async def stream(self, text: str, options: DecodeOptions) -> AsyncIterator[StreamEvent]:
        """Token-by-token translation of one text (greedy or sampling); see the module docstring."""
        if options.beam_size > 1:
            raise InvalidRequest(f"streaming works with beam_size 1 (greedy or sampling), got {options.beam_size}")
        self._check_accepting()
        sources, max_new = self._prepare([text], options)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        job = Job(sources[0], options, max_new, self.spec.eos_id, StreamSink(self._scheduler.outbox, loop, queue))
        self._scheduler.submit([job])
        detok = IncrementalDetokenizer(self.tokenizer)
        hidden = options.hide_prefix  # leading forced tokens the stream does not show
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                token_id, finish_reason = item
                if hidden:
                    hidden -= 1
                    if finish_reason is not None:  # max_new_tokens ran out inside the hidden prefix
                        yield StreamEvent("", None, finish_reason)
                        return
                    continue
                delta = detok.push(token_id)
                if finish_reason is not None:
                    yield StreamEvent(delta + detok.flush(), token_id, finish_reason)
                    return
                yield StreamEvent(delta, token_id, None)
        finally:
            if not job.finished:
                self._scheduler.cancel([job])
