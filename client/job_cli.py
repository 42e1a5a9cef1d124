"""``attnserve-client translate-file --job`` and ``attnserve-client job ID``: a file translated
as a job on the server, its progress printed as it runs; ``job ID`` re-attaches to it (from
another shell, or after the server restarted) and writes the file once it is done."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from . import AttnServeError
from .cli_errors import fail

if TYPE_CHECKING:
    from . import Client
    from .jobs import FileJob

RETRY_S = 1.0  # between two re-attaches while the server restarts


def add_parser(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:
    job = sub.add_parser(
        "job", parents=parents, help="follow a file job (translate-file --job) and write its file once done"
    )
    job.add_argument("id", help="the job's id, as translate-file --job printed it")
    job.add_argument(
        "--out", type=Path, default=None, help="where to write it (default: NAME.<to>.EXT here, never over a file)"
    )
    job.add_argument("--cancel", action="store_true", help="cancel the job instead")
    job.add_argument("--quiet", action="store_true", help="no progress line")


def printable(path: str | Path) -> str:
    """A file name as printed: one that is not UTF-8 (a Latin-1 ``caf\\xe9.txt``) with its bytes
    escaped, since stdout cannot encode the surrogates Python reads them as."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _line(job: FileJob) -> str:
    if not job.total and not job.done:  # its file not yet read: no count to show
        return f"job {job.id}: {job.status}"
    left = f", about {job.remaining_s:.0f} s left" if job.remaining_s is not None else ""
    total = job.total if job.total or not job.done else "?"  # done before the file is split to its end
    return f"job {job.id}: {job.status} {job.done}/{total} sentences{left}"


def follow(client: Client, job_id: str, out: Path | None, quiet: bool, as_json: bool) -> int:
    """Watches the job to its end (re-attaching while its server restarts), then writes its file.
    On a terminal its line is redrawn in place as it goes; elsewhere (a log) only its last line
    and each loss of the server are written, one line each."""
    shown = not quiet and not as_json
    live = shown and sys.stderr.isatty()
    unreachable = False  # told already, for this loss of the server
    while True:
        try:
            job = client.jobs.get(job_id)
            unreachable = False
            if job.finished:
                break
            for job in client.jobs.watch(job_id, timeout=24 * 3600.0):
                if live:
                    print("\r" + _line(job), end="", file=sys.stderr, flush=True)
            if job.finished:
                break
        except AttnServeError as exc:  # the server went away: the job waits in its state folder
            if exc.code != grpc.StatusCode.UNAVAILABLE:
                raise
            if shown and not unreachable:
                lost = f"job {job_id}: the server is unreachable; retrying (Ctrl+C to stop)"
                print("\r" + lost if live else lost, end="" if live else "\n", file=sys.stderr, flush=True)
            unreachable = True
        time.sleep(RETRY_S)
    if shown:
        print(("\r" if live else "") + _line(job), file=sys.stderr)
    if job.status != "done":
        message = f"job {job.id} {job.status}" + (f": {job.error}" if job.error else "")
        return fail(as_json, message, 1, code=f"JOB_{job.status.upper()}")  # stdout is for the file's name
    done = client.jobs.result(job_id)
    target = out or Path(Path(done.filename).name or f"{job_id}.out")
    try:  # a name the server chose never replaces a file the user has: only --out may
        with target.open("wb" if out else "xb") as file:
            file.write(done.content)
    except FileExistsError:
        said = f"{printable(target)} exists; not overwritten: name the file to write with --out"
        return fail(as_json, f"{said} (attnserve-client job {job_id} --out FILE)", 1)
    if as_json:
        print(json.dumps(dataclasses.asdict(job) | {"out": str(target)}))
    else:
        print(f"{printable(target)} ({job.total:,} sentences, {job.reused:,} reused from an interrupted run)")
    return 0


def submit(client: Client, args: argparse.Namespace, out: Path) -> int:
    job = client.jobs.submit(args.file, args.target_language, args.source_language, args.model)
    # on stderr with --json too: the id is what follows the job after a Ctrl+C or a lost shell
    print(f"job {job.id} (re-attach with: attnserve-client job {job.id})", file=sys.stderr, flush=True)
    args.following = job.id  # named by the line a Ctrl+C prints
    return follow(client, job.id, out, args.quiet, args.json)


def run(client: Client, args: argparse.Namespace) -> int:
    if args.cancel:
        job = client.jobs.cancel(args.id)
        print(json.dumps(dataclasses.asdict(job)) if args.json else _line(job))
        return 0
    args.following = args.id
    return follow(client, args.id, args.out, args.quiet, args.json)
