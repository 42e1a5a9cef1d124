"""``attnserve-bench NAME [options]``: run one benchmark (same as ``python -m benchmarks.NAME``)."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = {
    "vit": "vit",
    "decode": "decode",
    "kv-cache": "kv_cache",
    "server": "server",
    "server-profile": "server_profile",
    "server-ceiling": "server_ceiling",
    "http-servers": "http_servers",
    "perf": "perf",
    "documents": "documents",
    "glossary": "glossary",
    "many-pairs": "many_pairs",
    "files": "files",
    "alignment-aer": "alignment_aer",
    "alignments": "alignments",
    "detect": "detect",
    "quality": "quality",
    "translation-cache": "translation_cache",
    "jobs": "jobs",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in BENCHMARKS:
        print(f"usage: attnserve-bench {{{','.join(BENCHMARKS)}}} [--quick] [options]  (NAME --help for options)")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(f"{__package__}.{BENCHMARKS[argv[0]]}")
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
