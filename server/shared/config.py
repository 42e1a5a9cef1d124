"""Server settings: one frozen dataclass whose fields carry their help text and whose
construction checks every value. :mod:`.config_sources` fills it from CLI flags, ``ATTNSERVE_*``
environment variables and an optional TOML or JSON config file.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .config_help import (
    BAN_HELP,
    FILE_MEMORY_HELP,
    LANGUAGE_DETECTION_HELP,
    PARSE_MEMORY_HELP,
    QUOTA_HELP,
    RATE_HELP,
    SHARED_CLASSIFIER_HELP,
    SHARED_MEMORY_HELP,
    STEP_BUCKETS_HELP,
)
from .locations import default_model_repo

PROVIDERS = ("auto", "cpu", "cuda")
LOG_LEVELS = ("debug", "info", "warning", "error")
TRANSLATION_BATCHING = ("continuous", "static")
DECODE_STEP_BUCKETS = ("off", "on", "cuda-graphs")
LANGUAGE_DETECTION = ("langid", "lingua", "auto", "off")
LOAD_MODELS = ("auto", "eager", "lazy")
QUALITY_ACTIONS = ("mark", "refuse")  # service/quality.py's
SHARED_MEMORY = ("off", "system")


class ConfigError(ValueError):
    """A setting with a bad value; the message names the setting and where it came from."""


def _setting(default: Any, help: str, **kw: Any) -> Any:
    meta = {"help": help, **kw}
    if callable(default):
        return field(default_factory=default, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Settings:
    # where and how
    model_repo: Path = _setting(
        default_model_repo,
        "model repository: one model directory (model.json) per folder; when not given and ./model-repo does not "
        "exist, the bundled models",
    )
    host: str = _setting("127.0.0.1", "address to listen on (0.0.0.0 for every interface)")
    port: int = _setting(50051, "gRPC port: attnserve.v1 and KServe v2 / Triton (0 = any free port)")
    http_port: int = _setting(
        8000, "HTTP port on the same host: KServe v2 REST, generate, LibreTranslate (0 = any free port, -1 = off)"
    )
    language_detection: str = _setting("langid", LANGUAGE_DETECTION_HELP, choices=LANGUAGE_DETECTION)
    glossary_dir: str = _setting(
        "",
        "folder of default glossaries (TSV: source<TAB>target, or source alone to keep it): <model name>.tsv "
        "for a model, <source>-<target>.tsv for a language pair; a request's terms extend and override them",
    )
    metrics_port: int = _setting(8002, "Prometheus metrics port on the same host (0 = any free port, -1 = off)")
    provider: str = _setting(
        "auto", "onnxruntime provider: auto (CUDA when usable, else CPU), cpu, cuda", choices=PROVIDERS
    )
    threads: int = _setting(0, "onnxruntime intra-op threads per session (0 = onnxruntime's default)")
    preprocess_threads: int = _setting(
        2,
        "threads of the off-loop work pool: decoding and resizing images, splitting long documents, language detection",
    )
    grace_seconds: float = _setting(10.0, "on SIGTERM/SIGINT: time in-flight requests get to finish")
    workers: int = _setting(
        1,
        "server processes sharing the gRPC and HTTP ports (SO_REUSEPORT), each with its own models, batchers and "
        "GIL; metrics get a worker label",
    )
    shared_classifier: bool = _setting(False, SHARED_CLASSIFIER_HELP)
    skip_bad_models: bool = _setting(False, "serve the good models when one fails to load (it is NOT_SERVING)")
    # many models within a memory budget (docs/operations.md, "Many models")
    load_models: str = _setting(
        "auto",
        "eager: load every model at start; lazy: index the repository at start and load a model on its first "
        "request; auto: lazy when --max-loaded-models or --model-memory-bytes is set, else eager",
        choices=LOAD_MODELS,
    )
    max_loaded_models: int = _setting(
        0, "models loaded at once (lazy): the least recently used idle one is unloaded to make room (0 = no limit)"
    )
    model_memory_bytes: int = _setting(
        0,
        "bytes loaded models may take together (lazy): each its files' sizes plus, for a translator, its KV-cache "
        "budget (--max-kv-cache-bytes, else --max-tokens-in-flight tokens); 0 = no limit",
    )
    pinned_models: str = _setting("", "comma-separated models loaded at start and never unloaded (lazy)")
    min_resident_seconds: float = _setting(
        2.0,
        "a loaded model is unloaded to make room only after this long without a request (its load counts as "
        "one), so requests rotating among more models than the budget holds wait for room rather than evict "
        "the models other clients keep using; a load first in line for this long drains the least recently used "
        "model loaded as long, busy or not, unloaded once its requests finish (lazy; 0 = no minimum)",
    )
    model_load_retry_seconds: float = _setting(
        30.0,
        "a model whose on-demand load failed answers UNAVAILABLE for this long, then the next request tries "
        "again where that unloads no other model; the wait doubles after each failure, and after "
        "--model-load-attempts failures it stays UNAVAILABLE until a reload; a change to its files ends the wait",
    )
    model_load_attempts: int = _setting(5, "failed on-demand loads before a model waits for a reload or new files")
    repository_poll_seconds: float = _setting(
        5.0,
        "how often the model repository is looked at for model directories renamed into it or replaced "
        "(attnserve-export pull installs so): they are loaded (or indexed, lazy) without a restart; 0 = only on "
        "SIGHUP, Reload or RepositoryModelLoad",
    )
    pivot_language: str = _setting(
        "en",
        "a pair no model serves directly is translated through this language when models reach it and leave it "
        "(source -> pivot -> target); '' = no pivoting",
    )
    min_quality: float = _setting(
        0.0,
        "translations whose quality score (0..1, per text: its worst sentence) is below this get "
        "--quality-action; every reply then carries its score (0 = off: scores only when a request asks)",
    )
    quality_action: str = _setting(
        "mark",
        "below --min-quality: mark (the reply flags the text) or refuse (INVALID_ARGUMENT naming the sentence "
        "and its score)",
        choices=QUALITY_ACTIONS,
    )
    log_level: str = _setting("info", "logging level: debug, info, warning or error", choices=LOG_LEVELS)
    access_log: bool = _setting(
        True,
        "one INFO line per request (door, route or RPC, client, model, status, ms, request and response bytes, "
        "request id; never the text)",
    )
    # limits of every request
    max_message_bytes: int = _setting(64 << 20, "largest gRPC message or HTTP request body received or sent")
    # classification
    max_images_per_request: int = _setting(64, "images in one Classify request")
    max_image_bytes: int = _setting(8 << 20, "encoded size of one image")
    max_image_pixels: int = _setting(25_000_000, "width x height of one image, checked before decoding")
    max_batch_size: int = _setting(32, "images in one onnxruntime call of the dynamic batcher")
    max_queue_delay_ms: float = _setting(
        0.0,
        "how long the oldest waiting image waits for a fuller batch (0: batch what arrived meanwhile)",
    )
    max_queue_size: int = _setting(256, "images waiting per model; beyond -> RESOURCE_EXHAUSTED")
    default_top_k: int = _setting(5, "labels per image when the request says top_k = 0")
    # translation (the decode engine's EngineSettings)
    max_active_sequences: int = _setting(64, "rows in a model's decode batch (each beam is a row)")
    max_tokens_in_flight: int = _setting(32768, "sum of source + max new tokens over admitted rows")
    max_kv_cache_bytes: int = _setting(
        0, "KV-cache bytes a model's admitted rows may reserve together (0: only --max-tokens-in-flight bounds it)"
    )
    max_translation_queue: int = _setting(256, "texts waiting for admission per model; beyond -> RESOURCE_EXHAUSTED")
    translation_batching: str = _setting(
        "continuous",
        "continuous: texts join the running decode batch at the next step; static: only when it has finished "
        "(about twice the time to first token; 12-30% more tokens/s at saturation on CPU only with a "
        "left-padded cache)",
        choices=TRANSLATION_BATCHING,
    )
    decode_step_buckets: str = _setting("off", STEP_BUCKETS_HELP, choices=DECODE_STEP_BUCKETS)
    stream_interval_ms: float = _setting(
        50.0,
        "a translation stream sends its new tokens at most this often: the first and the last at once, those in "
        "between gathered into one message (0: one message per token)",
    )
    max_beam_size: int = _setting(8, "largest beam_size a request may ask for")
    max_texts_per_request: int = _setting(64, "texts in one Translate request")
    max_text_chars: int = _setting(
        50_000, "characters in one text (a document: split into sentences; html markup counts); checked first"
    )
    max_request_chars: int = _setting(200_000, "characters in all texts of one Translate request; checked first")
    max_glossary_terms: int = _setting(256, "glossary terms one translation request may send (keep terms included)")
    max_glossary_term_chars: int = _setting(200, "characters of a glossary term's source or target")
    translation_cache_mb: int = _setting(64, "MiB of sentence translations each server process keeps, LRU (0 = off)")
    max_glossaries_per_key: int = _setting(100, "stored glossaries one api key (or the keyless server) keeps")
    max_stored_glossary_entries: int = _setting(5000, "entries of one stored glossary (glossary_id)")
    max_concurrent_rpcs: int = _setting(
        1024,
        "calls the server handles at once (gRPC and HTTP); beyond -> RESOURCE_EXHAUSTED. An HTTP call counts "
        "once its body has arrived",
    )
    max_request_pixels: int = _setting(
        100_000_000,
        "width x height of all images of one Classify request together, read from their headers before any is decoded",
    )
    http_header_timeout_s: float = _setting(
        30.0,
        "HTTP: seconds a connection has to send a whole request head (request line and headers), from when it "
        "opens or its previous answer went out; then it is closed (idle keep-alive connections too)",
    )
    http_body_timeout_s: float = _setting(
        60.0,
        "HTTP: seconds a request has to send its whole body once its head is in; then 408 and the connection closed",
    )
    request_timeout_seconds: float = _setting(
        60.0,
        "server-side time limit of every translation and classification request, on every door (LibreTranslate "
        "included); a client's shorter deadline or timeout wins; past it -> DEADLINE_EXCEEDED, its work dropped "
        "(0 = none)",
    )
    # files (LibreTranslate's /translate_file, attnserve.v1 TranslateFile; docs/operations.md)
    max_file_bytes: int = _setting(
        32 << 20,
        "size of one file to translate; a zip-based file (docx, pptx, xlsx, odt, odp, epub) unpacks to at most 4x",
    )
    max_file_chars: int = _setting(
        300_000, "characters of text in one file to translate (what the model reads; markup and layout not counted)"
    )
    max_aligned_runs: int = _setting(
        256,
        "runs with words (styled stretches) a file paragraph may have to be placed by word alignment; one with "
        "more gets its translation by proportion of words (the alignment placement costs words x runs)",
    )
    file_timeout_seconds: float = _setting(
        600.0, "server-side time limit of one file's translation (in place of --request-timeout-seconds; 0 = none)"
    )
    file_workers: int = _setting(
        2, "worker processes that read and write files (parsing, run placement, packing), off the server's process"
    )
    file_cpu_seconds: float = _setting(
        60.0, "CPU seconds one file may take to be read and written in its worker; past it the worker is killed (400)"
    )
    file_memory_bytes: int = _setting(2 << 30, FILE_MEMORY_HELP)
    parse_memory_bytes: int = _setting(2 << 30, PARSE_MEMORY_HELP)
    download_dir: str = _setting(
        "", "translated files waiting for download ('' = attnserve-downloads-<repository digest> in the temp dir)"
    )
    download_retention_s: float = _setting(3600.0, "seconds a translated file stays downloadable; then deleted")
    max_download_bytes: int = _setting(
        1 << 30,
        "translated files kept for download, in bytes on disk together (metadata included); the oldest are "
        "deleted to make room",
    )
    max_download_files: int = _setting(10_000, "translated files kept for download at once (the oldest go first)")
    public_url: str = _setting(
        "",
        "the server's public base URL (https://translate.example.org) for the links it hands out "
        "(translatedFileUrl); '' = from the request's Host header",
    )
    state_dir: str = _setting(
        "", "state folder (SQLite records, jobs' files), shared by --workers; '' = attnserve-state-<digest> in temp"
    )
    state_url: str = _setting("", "records shared by replicas: postgresql://USER:PASSWORD@HOST/DB ('' = --state-dir)")
    running_jobs: int = _setting(2, "file jobs translated at once by each server process; the rest wait queued")
    max_jobs: int = _setting(1000, "file jobs kept at once (queued, running or finished), all keys together")
    max_jobs_per_key: int = _setting(20, "file jobs one api key (or the keyless server) has queued or running at once")
    max_job_bytes_per_key: int = _setting(
        256 << 20, "bytes of one api key's job files (sent and translated) kept at once"
    )
    job_retention_s: float = _setting(
        86400.0,
        "seconds a file job and its result are kept after it was submitted (one still running then: after it ends); "
        "then deleted",
    )
    # access (docs/operations.md)
    tls_cert: str = _setting("", "PEM server certificate chain; with --tls-key serves TLS only")
    tls_key: str = _setting("", "PEM private key of --tls-cert")
    tls_client_ca: str = _setting("", "PEM CA bundle: require client certificates signed by it (mutual TLS)")
    auth_tokens: str = _setting("", "comma-separated bearer tokens (prefer the environment or a file)")
    auth_token_file: str = _setting("", "file of bearer tokens, one per line ('#' comments), their own rates and quota")
    requests_per_minute: int = _setting(0, RATE_HELP.format(period="minute"))
    requests_per_hour: int = _setting(0, RATE_HELP.format(period="hour"))
    requests_per_day: int = _setting(0, RATE_HELP.format(period="day"))
    ban_after_refusals: int = _setting(0, BAN_HELP)
    ban_seconds: float = _setting(600.0, "seconds a ban (--ban-after-refusals) lasts; one refusal is forgiven each")
    characters_per_month: int = _setting(0, QUOTA_HELP)
    enable_admin: bool = _setting(
        False, "serve the admin RPCs (Reload; KServe model load/unload); they need a token when tokens are set"
    )
    shared_memory: str = _setting("off", SHARED_MEMORY_HELP, choices=SHARED_MEMORY)

    def __post_init__(self) -> None:
        _check(self)

    @property
    def lazy(self) -> bool:
        """Models load on first use (``load_models`` lazy, or auto with a budget)."""
        budget = bool(self.max_loaded_models or self.model_memory_bytes)
        return self.load_models == "lazy" or (self.load_models == "auto" and budget)

    @property
    def pinned(self) -> tuple[str, ...]:
        return tuple(n.strip() for n in self.pinned_models.split(",") if n.strip())

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def _check(settings: Settings) -> None:
    """Every setting's value in range, and the combinations that cannot work: a ``ConfigError`` naming it."""
    for name, ok in _in_range(settings).items():
        if not ok:
            raise ConfigError(f"{name}: invalid value {getattr(settings, name)!r} ({_help(name)})")
    _check_combinations(settings)


def _in_range(settings: Settings) -> dict[str, bool]:
    """Whether each setting with a range or a set of values holds a valid one, by name."""
    checks = {
        "port": 0 <= settings.port <= 65535,
        "metrics_port": -1 <= settings.metrics_port <= 65535,
        "http_port": -1 <= settings.http_port <= 65535,
        "provider": settings.provider in PROVIDERS,
        "log_level": settings.log_level in LOG_LEVELS,
        "translation_batching": settings.translation_batching in TRANSLATION_BATCHING,
        "decode_step_buckets": settings.decode_step_buckets in DECODE_STEP_BUCKETS,
        "language_detection": settings.language_detection in LANGUAGE_DETECTION,
        "threads": settings.threads >= 0,
        "grace_seconds": settings.grace_seconds >= 0,
        "request_timeout_seconds": settings.request_timeout_seconds >= 0,
        "max_queue_delay_ms": settings.max_queue_delay_ms >= 0,
        "stream_interval_ms": settings.stream_interval_ms >= 0,
        "http_header_timeout_s": settings.http_header_timeout_s > 0,
        "http_body_timeout_s": settings.http_body_timeout_s > 0,
        "tls_key": bool(settings.tls_cert) == bool(settings.tls_key),
        "tls_client_ca": not settings.tls_client_ca or bool(settings.tls_cert),
        "workers": settings.workers >= 1,
        "max_kv_cache_bytes": settings.max_kv_cache_bytes >= 0,
        "load_models": settings.load_models in LOAD_MODELS,
        "max_loaded_models": settings.max_loaded_models >= 0,
        "model_memory_bytes": settings.model_memory_bytes >= 0,
        "model_load_retry_seconds": settings.model_load_retry_seconds >= 0,
        "min_resident_seconds": settings.min_resident_seconds >= 0,
        "repository_poll_seconds": settings.repository_poll_seconds >= 0,
        "file_timeout_seconds": settings.file_timeout_seconds >= 0,
        "download_retention_s": settings.download_retention_s > 0,
        "job_retention_s": settings.job_retention_s > 0,
        "min_quality": 0.0 <= settings.min_quality <= 1.0,
        "quality_action": settings.quality_action in QUALITY_ACTIONS,
        "shared_memory": settings.shared_memory in SHARED_MEMORY,
        "file_cpu_seconds": settings.file_cpu_seconds >= 1,
        "file_memory_bytes": settings.file_memory_bytes >= 0,
        "parse_memory_bytes": settings.parse_memory_bytes >= 0,
        "requests_per_minute": settings.requests_per_minute >= 0,
        "requests_per_hour": settings.requests_per_hour >= 0,
        "requests_per_day": settings.requests_per_day >= 0,
        "ban_after_refusals": settings.ban_after_refusals >= 0,
        "ban_seconds": settings.ban_seconds > 0,
        "characters_per_month": settings.characters_per_month >= 0,
        "translation_cache_mb": settings.translation_cache_mb >= 0,
        "public_url": not settings.public_url or settings.public_url.startswith(("http://", "https://")),
        "state_url": not settings.state_url or settings.state_url.startswith(("postgresql://", "postgres://")),
    }
    positive = (
        "preprocess_threads max_message_bytes max_images_per_request max_image_bytes max_image_pixels "
        "max_batch_size max_queue_size default_top_k max_active_sequences max_tokens_in_flight "
        "max_translation_queue max_beam_size max_texts_per_request max_text_chars max_request_chars "
        "max_concurrent_rpcs max_request_pixels max_glossary_terms max_glossary_term_chars"
        " max_file_bytes max_file_chars max_aligned_runs max_download_bytes model_load_attempts file_workers"
        " max_download_files running_jobs max_jobs max_jobs_per_key max_job_bytes_per_key"
        " max_glossaries_per_key max_stored_glossary_entries"
    ).split()
    checks.update({name: getattr(settings, name) >= 1 for name in positive})
    return checks


def _check_combinations(settings: Settings) -> None:
    """Settings valid alone that cannot work together."""
    if settings.workers > 1 and settings.enable_admin:
        raise ConfigError(
            "enable_admin: the admin RPCs act on the one worker that receives them, so they are refused with "
            f"workers = {settings.workers}; reload a multi-worker server with SIGHUP to its parent process"
        )

    if settings.shared_classifier and settings.workers < 2:
        raise ConfigError(
            "shared_classifier: it shares one process's classification sessions among worker processes; "
            f"with workers = {settings.workers} the server's one process runs them itself (set --workers 2 or more)"
        )

    if settings.workers > 1 and settings.shared_memory != "off":
        raise ConfigError(
            "shared_memory: each worker process keeps its own registered regions and a client's calls may "
            f"reach different workers, so it is refused with workers = {settings.workers}"
        )

    if settings.load_models == "eager" and (settings.max_loaded_models or settings.model_memory_bytes):
        raise ConfigError(
            "load_models: eager loads every model at start, so it takes no memory budget "
            "(--max-loaded-models, --model-memory-bytes); use lazy or auto"
        )


def _help(name: str) -> str:
    return next(f.metadata["help"] for f in fields(Settings) if f.name == name)
