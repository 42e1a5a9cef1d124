"""How soon a large file submitted as a job shows progress: a 200-page .docx to ``POST /jobs``,
the seconds until ``GET /jobs/{id}`` first reports a sentence done, on a server that has just
started (cold) and on the same server a moment later (warm, the peer).

The .docx is ``attnserve-bench files``' (``--pages`` pages of about 2,500 characters of the
example phrases, each paragraph's first number changed so that few sentences repeat, every
fourth paragraph in three runs). Each round starts a new ``attnserve-server`` (a subprocess on
127.0.0.1, HTTP on, its own state folder), waits until it serves (gRPC health) and ``--wait-s``
more, then submits the file and polls the job every 10 ms:

- ``cold``: the server's first file (what a restart or a new replica meets);
- ``warm``: the same file again on that server once the first job was cancelled.

Reported per contender: the medians over rounds of the seconds to the job's first sentence done
and to its total known (the whole file read and split; a large file's first sentences decode
while the rest is split, so its total may come later). **Target:** the first sentence done within
2 s of the submission, cold.

    python -m benchmarks.jobs        # or: attnserve-bench jobs
    python -m benchmarks.jobs --quick
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
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
from .files import PAGE_CHARS, distinct, docx, file_form, post
from .launch import free_port, start_server, wait_ready

NAME = "jobs"
COLD, WARM = "cold (the server's first file)", "warm (the same server, next file)"
POLL_S = 0.01


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.jobs", description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--pages", type=int, default=None, help="pages of about 2,500 characters (default 200)")
    parser.add_argument("--wait-s", type=float, default=0.0, help="seconds between the server serving and the submit")
    add_model_dir_argument(parser, COMMITTED)
    return parser


def submit(base: str, data: bytes) -> str:
    """``POST /jobs`` of ``data`` as a .docx (en -> de): the job's id."""
    return post(f"{base}/jobs", *file_form(data, "bench.docx"))["id"]


def job(base: str, job_id: str, method: str = "GET") -> dict[str, Any]:
    request = urllib.request.Request(f"{base}/jobs/{job_id}", method=method)
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())


def first_progress(base: str, data: bytes, limit_s: float = 300.0) -> tuple[float, float]:
    """(seconds to the job's first sentence done, seconds to its total known) from the
    submission; the job is cancelled then, so the server is idle for the next."""
    t0 = time.perf_counter()
    job_id = submit(base, data)
    done_at = total_at = None
    while time.perf_counter() - t0 < limit_s:
        seen = job(base, job_id)
        now = time.perf_counter() - t0
        if seen["done"] and done_at is None:
            done_at = now
        if seen["total"] and total_at is None:
            total_at = now
        if done_at is not None and total_at is not None:
            job(base, job_id, "DELETE")
            return done_at, total_at
        if seen["status"] not in ("queued", "running"):
            raise RuntimeError(f"the job ended without progress: {seen}")
        time.sleep(POLL_S)
    raise RuntimeError(f"no progress within {limit_s} s")


def one_round(repo, threads: int, limits: list[str], data: bytes, wait_s: float) -> dict[str, tuple[float, float]]:
    with tempfile.TemporaryDirectory() as state:
        http = free_port()
        extra = ["--http-port", str(http), "--state-dir", state, "--language-detection", "off", *limits]
        proc, address = start_server(repo, threads, 32, extra=extra)
        try:
            asyncio.run(wait_ready(address, proc))
            time.sleep(wait_s)
            base = f"http://127.0.0.1:{http}"
            cold = first_progress(base, data)
            return {COLD: cold, WARM: first_progress(base, data)}
        finally:
            proc.terminate()
            proc.wait(30)


def run(args: argparse.Namespace) -> dict[str, Any]:
    repo = linked_repo(args.work_dir / "documents-repo", MODEL, args.model_dir)
    pages = args.pages or (4 if args.quick else 200)
    rounds = args.repeats or (1 if args.quick else 5)
    paragraphs = distinct([line for line in document(pages * PAGE_CHARS).splitlines() if line.strip()])
    data = docx(paragraphs)
    chars = sum(len(p) for p in paragraphs)
    info = machine()
    header(f"file jobs: a {pages}-page .docx ({chars:,} characters, {len(paragraphs)} paragraphs)", info, 1)
    limits = ["--max-file-chars", str(chars + len(paragraphs) + 1)]
    seconds: dict[str, list[tuple[float, float]]] = {COLD: [], WARM: []}  # (first sentence done, total known)
    for _ in range(rounds):
        for name, pair in one_round(repo, args.threads, limits, data, args.wait_s).items():
            seconds[name].append(pair)
    median = {name: [sorted(p[i] for p in pairs)[len(pairs) // 2] for i in (0, 1)] for name, pairs in seconds.items()}
    rows = [[name, f"{done:.2f}", f"{total:.2f}"] for name, (done, total) in median.items()]
    print(table(["contender", "to its first sentence done s (median)", "to its total known s (median)"], rows))
    print(f"cold / warm, first sentence done: {median[COLD][0] / median[WARM][0]:.2f}x (target: cold <= 2 s)")
    return {
        "machine": info,
        "model_dir": shown_path(args.model_dir),
        "pages": pages,
        "characters": chars,
        "paragraphs": len(paragraphs),
        "threads": args.threads,
        "rounds": rounds,
        "wait_s": args.wait_s,
        "seconds": seconds,  # per contender, per round: (to the first sentence done, to the total known)
        "median_s": median,
        "cold_over_warm": median[COLD][0] / median[WARM][0],
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    write_results(args.out, NAME, run(args), args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
