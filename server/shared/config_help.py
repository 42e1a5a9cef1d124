"""The longer help texts of :class:`.config.Settings`' fields (``--help``, docs/cli.md's table),
kept here so the settings read one to a line."""

STEP_BUCKETS_HELP = (
    "an in-place decoder's steps at fixed batch sizes (1, 2, 4, ... --max-active-sequences) into persistent "
    "buffers: on; cuda-graphs: also replayed as CUDA graphs on --provider cuda (off: padding rows cost compute "
    "on the CPU; on an H200 graphs made a step 1.5-1.9x faster on mt-small, slower at opus-mt's shape at batch 32)"
)
LANGUAGE_DETECTION_HELP = (
    "source 'auto' and /detect of the LibreTranslate routes, among the served languages: langid (built in: the "
    "script, then py3langid), lingua (more accurate on short texts: pip install 'attnserve[detect]'), auto "
    "(lingua when installed, else langid), or off"
)
SHARED_MEMORY_HELP = (
    "KServe gRPC: Triton's system shared memory extension (tensors read and written in place in regions of "
    "/dev/shm objects clients register): system, only where every client reaching the gRPC port is trusted "
    "with this host's /dev/shm; off: its RPCs answer UNIMPLEMENTED"
)
RATE_HELP = (
    "requests one client (its bearer token, else its IP address) may send a {period}, counted together by the "
    "processes of --workers N; health, metrics, listings and the web page are not counted; past it "
    "429 / RESOURCE_EXHAUSTED with Retry-After (0 = unlimited)"
)
BAN_HELP = (
    "refusals past its request rates, one forgiven every --ban-seconds, at which a client is banned: refused "
    "every counted request for --ban-seconds (LibreTranslate's --req-flood-threshold; 0 = no ban)"
)
QUOTA_HELP = (
    "characters one client (its bearer token, else its IP address) may have translated a calendar month (UTC), "
    "texts and files through every door; past it 429 / RESOURCE_EXHAUSTED, DeepL's 456; a token's own in "
    "--auth-token-file (0 = unlimited)"
)

SHARED_CLASSIFIER_HELP = (
    "with --workers N: the classification models run in one more process, which every worker sends its batches "
    "to and which runs those that arrive together as one (one session per model: on a GPU, one CUDA context)"
)
FILE_MEMORY_HELP = (
    "memory a file worker may take for one file over its size at start; past it the file gets 413 (0 = no limit)"
)
PARSE_MEMORY_HELP = (
    "memory the process parsing large JSON bodies (KServe REST infer, one at a time) may take for one body over "
    "its size at start; past it the request gets 413 (0 = no limit)"
)
