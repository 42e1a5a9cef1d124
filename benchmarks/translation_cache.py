"""A 50-page .docx translated twice through ``/translate_file``: the second pass with the
translation cache (``--translation-cache-mb``, on by default) against the first, and a server
with the cache off against both.

The .docx is ``attnserve-bench files``' (``--pages`` pages of about 2,500 characters of the
example phrases, each paragraph's first number changed so that few sentences repeat, every fourth
paragraph in three runs with a bold middle, so its sentences keep their steps' attention for the
runs' placement). A live ``attnserve-server`` per contender (subprocesses on 127.0.0.1, HTTP on)
serves the bundled translator; each round starts a new server with the cache on (an empty cache)
and sends the file twice:

- ``first pass, cache on``: every sentence a miss, decoded and kept;
- ``second pass, cache on``: the same file again, every sentence a hit;
- ``cache off``: the same file on a server started with ``--translation-cache-mb 0``.

Reported: the medians of the rounds, second / first (the target is <= 0.2x), first / cache off
(what looking up and keeping costs a pass of misses), the hits and misses the server counted, and
whether the three translated files' paragraphs are the same (cache off changes no output).

    python -m benchmarks.translation_cache        # or: attnserve-bench translation-cache
    python -m benchmarks.translation_cache --quick
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time
import urllib.request
from typing import Any

from .common import (
    add_common_arguments,
    add_model_dir_argument,
    header,
    linked_repo,
    machine,
    shown_path,
    table,
    write_results,
)
from .documents import COMMITTED, MODEL, document
from .files import PAGE_CHARS, distinct, docx, paragraphs_of, translate_file
from .launch import free_port, start_server, wait_ready

NAME = "translation-cache"
FIRST, SECOND, OFF = "first pass, cache on", "second pass, cache on", "cache off"
WARM_UP = docx(["The file workers start with this one."])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.translation_cache", description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--pages", type=int, default=None, help="pages of about 2,500 characters (default 50)")
    add_model_dir_argument(parser, COMMITTED)
    return parser


def counted(metrics_port: int) -> dict[str, float]:
    """The cache's hits and misses as the server's /metrics says (all models together)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    out = {}
    for what in ("hits", "misses"):
        found = re.findall(rf"^attnserve_translation_cache_{what}_total\{{[^}}]*\}} (\S+)$", text, re.M)
        out[what] = sum(float(v) for v in found)
    return out


def serving(repo, threads: int, limits: list[str], cache_mb: int) -> tuple[Any, str, int]:
    """(process, HTTP base URL, metrics port) of a server started and ready."""
    http, metrics = free_port(), free_port()
    extra = ["--http-port", str(http), "--metrics-port", str(metrics), "--translation-cache-mb", str(cache_mb)]
    proc, address = start_server(repo, threads, 32, extra=[*extra, *limits])
    asyncio.run(wait_ready(address, proc))
    return proc, f"http://127.0.0.1:{http}", metrics


def timed(fn) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def run(args: argparse.Namespace) -> dict[str, Any]:
    repo = linked_repo(args.work_dir / "documents-repo", MODEL, args.model_dir)
    pages = args.pages or (2 if args.quick else 50)
    rounds = args.repeats or (1 if args.quick else 3)
    paragraphs = distinct([line for line in document(pages * PAGE_CHARS).splitlines() if line.strip()])
    data = docx(paragraphs)
    chars = sum(len(p) for p in paragraphs)
    info = machine()
    header(f"translation cache: a {pages}-page .docx ({chars:,} characters, {len(paragraphs)} paragraphs)", info, 1)
    limits = ["--max-file-chars", str(chars + len(paragraphs) + 1), "--file-timeout-seconds", "0"]
    seconds: dict[str, list[float]] = {FIRST: [], SECOND: [], OFF: []}
    counts, same = [], True
    off_proc, off_base, _ = serving(repo, args.threads, limits, 0)
    try:
        translate_file(off_base, WARM_UP)
        for _ in range(rounds):
            proc, base, metrics = serving(repo, args.threads, limits, 64)
            try:
                translate_file(base, WARM_UP)  # the file workers and routes warm, the cache not
                before = counted(metrics)
                first_s, first = timed(lambda: translate_file(base, data))  # noqa: B023
                after_first = counted(metrics)
                second_s, second = timed(lambda: translate_file(base, data))  # noqa: B023
                after_second = counted(metrics)
            finally:
                proc.terminate()
                proc.wait(30)
            off_s, off = timed(lambda: translate_file(off_base, data))
            for name, s in ((FIRST, first_s), (SECOND, second_s), (OFF, off_s)):
                seconds[name].append(s)
            passes = ((before, after_first), (after_first, after_second))
            counts.append([{k: b[k] - a[k] for k in b} for a, b in passes])  # [first, second]: hits, misses
            same = same and paragraphs_of(first) == paragraphs_of(second) == paragraphs_of(off)
    finally:
        off_proc.terminate()
        off_proc.wait(30)
    median = {name: sorted(s)[len(s) // 2] for name, s in seconds.items()}
    rows = [[name, f"{median[name]:.2f}", f"{median[name] / median[FIRST]:.3f}x"] for name in seconds]
    print(table(["contender", "median s", "vs first pass"], rows))
    ratio, overhead = median[SECOND] / median[FIRST], median[FIRST] / median[OFF]
    print(f"second / first: {ratio:.3f}x (target <= 0.2x); first (misses kept) / cache off: {overhead:.3f}x")
    print(f"hits and misses per round: {counts}; the three files' paragraphs the same: {same}")
    assert same, "the cache changed a translation"
    return {
        "machine": info,
        "model_dir": shown_path(args.model_dir),
        "pages": pages,
        "characters": chars,
        "paragraphs": len(paragraphs),
        "threads": args.threads,
        "rounds": rounds,
        "seconds": seconds,
        "median_s": median,
        "second_over_first": ratio,
        "first_over_cache_off": overhead,
        "counts": counts,
        "outputs_identical": same,
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    write_results(args.out, NAME, run(args), args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
