"""Prometheus metrics (prometheus-client), one registry per server so tests can run several.

attnserve_requests_total{model,method,status}      requests by gRPC status name, whatever the protocol;
                                                   model: a model of the repository, or "-" for a call no
                                                   served model answered (none named, or a name not served)
                                                   method: attnserve.v1's RPC ("Translate"), KServe v2 over
                                                   gRPC "kserve.<RPC>", over HTTP "kserve.http.<operation>"
attnserve_request_latency_seconds{model,method}    handler latency
attnserve_queue_time_seconds{model}                batcher / decode-admission wait
attnserve_batch_size{model}                        images per onnxruntime call; rows per decode step
attnserve_shared_run_rows{model}                   --shared-classifier: rows of the session host's run each of
                                                   this worker's batches was part of (the workers' batches merged)
attnserve_tokens_generated_total{model}            translation tokens
attnserve_active_sequences{model}                  rows in the decode batch
attnserve_kv_cache_bytes{model}                    decoder self-attention cache + cross K/V
attnserve_kv_cache_capacity_tokens{model}          tokens each decode row's self-attention cache holds now
                                                   (in-place cache: its capacity, doubled when a row outgrows
                                                   it; left-padded: the longest row's length)
attnserve_kv_cache_row_bytes{model}                bytes one decode row holds at that capacity (self + cross)
attnserve_tokens_in_flight{model}                  admitted source + max new tokens
attnserve_queued_items{model}                      images or texts waiting
attnserve_request_sentences{model}                 sentences (segments) of a translation request, all texts
attnserve_request_characters{model}                characters of a translation request, all texts
                                                   (queue time of translations and these two: recorded by the
                                                   translation service, the same for every door)
attnserve_translation_cache_hits_total{model}      sentences answered by the translation cache (registered by
attnserve_translation_cache_misses_total{model}    service/translation_cache.py on this registry), sentences
attnserve_translation_cache_bytes{model}           looked up and decoded, the bytes it holds, entries dropped
attnserve_translation_cache_evictions_total{model} to stay within --translation-cache-mb
attnserve_inflight_requests                        handlers running
attnserve_model_loads_total{model,outcome}         model loads (outcome ok | failed), at start, on demand and by reloads
attnserve_model_load_seconds{model}                time to load a model (sessions, warm-up, engine start)
attnserve_model_evictions_total{model}             models unloaded to make room in the memory budget
attnserve_loaded_model_bytes{model}                a loaded model's bytes in the budget (0 when unloaded)
                                                   (model: only models of the repository's index)
attnserve_unauthenticated_total{method}            calls refused for a missing or wrong bearer token
attnserve_rate_limited_total{door,reason}          calls refused past a client's request rate; door: the method
                                                   label's protocol (libretranslate, deepl, kserve.http, kserve,
                                                   v1, ...), reason: requests_per_minute, requests_per_hour,
                                                   requests_per_day, or banned (--ban-after-refusals)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SENTENCE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
CHARACTER_BUCKETS = (16, 64, 256, 1024, 4096, 16384, 65536, 262144)


class WatchedBatcher(Protocol):
    """What the metrics read of an image engine's batch queue (``images.batching.BatchQueue``)."""

    on_batch: Callable[[int, list[float]], None] | None
    queued: int


class WatchedClassifier(Protocol):
    batcher: WatchedBatcher


class WatchedEngine(Protocol):
    """What the metrics read of a translation engine (``translation.TranslationEngine``): its
    gauges at scrape time and its ``on_step`` hook, called after every decoder step."""

    on_step: Callable[[int, int], None] | None
    active_sequences: int
    kv_cache_bytes: int
    kv_cache_capacity: int
    kv_cache_row_bytes: int
    tokens_in_flight: int
    queued: int


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._add_request_series(self.registry)
        self._add_decoding_series(self.registry)
        self._add_model_series(self.registry)
        self._http: Any = None
        # Labelled children of each (model, method, status) seen: labels() takes a lock and builds
        # a key on every call. The label values are bounded (models of the repository or "-").
        self._call_series: dict[tuple[str, str, str], tuple[Any, Any]] = {}

    def _add_request_series(self, r: CollectorRegistry) -> None:
        """Calls: their count by status, latency, queueing, batch sizes, request sizes, authentication."""
        self.requests = Counter("attnserve_requests", "requests by status", ["model", "method", "status"], registry=r)
        self.latency = Histogram(
            "attnserve_request_latency_seconds",
            "handler latency",
            ["model", "method"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_time = Histogram(
            "attnserve_queue_time_seconds",
            "time waiting to be batched / admitted",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.shared_run_rows = Histogram(
            "attnserve_shared_run_rows",
            "--shared-classifier: rows of the session host's run that each of this worker's batches was part of",
            ["model"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "attnserve_batch_size",
            "items per inference call / rows per decode step",
            ["model"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.request_sentences = Histogram(
            "attnserve_request_sentences",
            "sentences of a translation request (all its texts)",
            ["model"],
            buckets=SENTENCE_BUCKETS,
            registry=r,
        )
        self.request_characters = Histogram(
            "attnserve_request_characters",
            "characters of a translation request (all its texts)",
            ["model"],
            buckets=CHARACTER_BUCKETS,
            registry=r,
        )
        self.inflight = Gauge("attnserve_inflight_requests", "handlers running", registry=r)
        self.unauthenticated = Counter(
            "attnserve_unauthenticated", "calls without a valid bearer token", ["method"], registry=r
        )
        self.rate_limited = Counter(
            "attnserve_rate_limited", "calls refused past a client's request rate", ["door", "reason"], registry=r
        )

    def _add_decoding_series(self, r: CollectorRegistry) -> None:
        """The decode engines: tokens generated, rows, KV cache bytes, the admitted budget, queues."""
        self.tokens = Counter("attnserve_tokens_generated", "tokens generated", ["model"], registry=r)
        self.active_sequences = Gauge("attnserve_active_sequences", "rows in the decode batch", ["model"], registry=r)
        self.kv_cache_bytes = Gauge("attnserve_kv_cache_bytes", "bytes held by KV caches", ["model"], registry=r)
        self.kv_cache_capacity = Gauge(
            "attnserve_kv_cache_capacity_tokens", "tokens each decode row's cache holds", ["model"], registry=r
        )
        self.kv_cache_row_bytes = Gauge(
            "attnserve_kv_cache_row_bytes", "bytes one decode row holds at the cache's capacity", ["model"], registry=r
        )
        self.tokens_in_flight = Gauge("attnserve_tokens_in_flight", "admitted token budget", ["model"], registry=r)
        self.queued = Gauge("attnserve_queued_items", "images or texts waiting", ["model"], registry=r)

    def _add_model_series(self, r: CollectorRegistry) -> None:
        """The model repository: loads, their time, evictions, bytes held in the memory budget."""
        self.model_loads = Counter("attnserve_model_loads", "model loads", ["model", "outcome"], registry=r)
        self.model_load_seconds = Histogram(
            "attnserve_model_load_seconds", "time to load a model", ["model"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.model_evictions = Counter(
            "attnserve_model_evictions", "models unloaded to make room", ["model"], registry=r
        )
        self.loaded_model_bytes = Gauge(
            "attnserve_loaded_model_bytes", "a loaded model's bytes in the memory budget", ["model"], registry=r
        )

    def call_done(self, model: str, method: str, status: str, seconds: float) -> None:
        """One finished call: attnserve_requests_total and its latency."""
        series = self._call_series.get((model, method, status))
        if series is None:
            series = (self.requests.labels(model, method, status), self.latency.labels(model, method))
            self._call_series[(model, method, status)] = series
        series[0].inc()
        series[1].observe(seconds)

    def watch_classifier(self, name: str, classifier: WatchedClassifier) -> None:
        batcher = classifier.batcher
        batch_size, queue_time = self.batch_size.labels(name), self.queue_time.labels(name)

        def on_batch(size: int, queue_s: list[float]) -> None:
            batch_size.observe(size)
            for q in queue_s:
                queue_time.observe(q)

        batcher.on_batch = on_batch
        self.queued.labels(name).set_function(lambda: batcher.queued)
        if hasattr(session := getattr(classifier, "session", None), "on_run"):  # a RemoteSession
            session.on_run = self.shared_run_rows.labels(name).observe

    def watch_engine(self, name: str, engine: WatchedEngine) -> None:
        """Wire a translation engine's observability properties and ``on_step`` hook."""
        tokens, batch = self.tokens.labels(name), self.batch_size.labels(name)

        def on_step(rows: int, generated: int) -> None:  # called by the engine after every decoder step
            batch.observe(rows)
            tokens.inc(generated)

        engine.on_step = on_step
        self.active_sequences.labels(name).set_function(lambda: engine.active_sequences)
        self.kv_cache_bytes.labels(name).set_function(lambda: engine.kv_cache_bytes)
        self.kv_cache_capacity.labels(name).set_function(lambda: engine.kv_cache_capacity)
        self.kv_cache_row_bytes.labels(name).set_function(lambda: engine.kv_cache_row_bytes)
        self.tokens_in_flight.labels(name).set_function(lambda: engine.tokens_in_flight)
        self.queued.labels(name).set_function(lambda: engine.queued)

    def unwatch(self, name: str) -> None:
        """An unloaded model: its engine's gauges go (their callbacks would keep it in memory)."""
        gauges = (self.active_sequences, self.kv_cache_bytes, self.kv_cache_capacity, self.kv_cache_row_bytes)
        for gauge in (*gauges, self.tokens_in_flight, self.queued):
            try:
                gauge.remove(name)
            except KeyError:
                pass

    def value(self, name: str, **labels: str) -> float:
        """One sample's current value (0 if absent): for tests and logs."""
        return self.registry.get_sample_value(name, labels) or 0.0

    def start_http(self, host: str, port: int) -> int:
        """Serve /metrics on ``host:port`` (0 = any free port); returns the port."""
        try:
            server, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise OSError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc} (see --metrics-port)") from exc
        self._http = server
        return server.server_port

    def stop_http(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
