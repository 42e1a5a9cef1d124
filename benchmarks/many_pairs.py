"""Many language pairs within a memory budget: a repository of 24 translation models
(one model directory copied under 24 names, each with its own language pair in model.json),
served lazily with ``--max-loaded-models 4`` (and ``--min-resident-seconds 0``, so a model is
unloaded as soon as another needs its room).

Measured, side by side in one run on the same repository:

- ``cold``: the first request of a pair whose model is not loaded (index -> load -> translate),
  against the same request once the model is loaded (``warm``);
- ``round-robin``: ``--clients`` clients, each sending its texts to the next of the 24 pairs in
  turn, for ``--seconds``: texts/s under the 4-model budget (every request then finds its model
  unloaded: the working set is 6 times the budget), against a server that loads all 24 at start
  (``eager``) under the same load; the server's peak RSS for each;
- ``hot4``: the same over 4 of the pairs only, a working set the budget holds.

``attnserve-bench many-pairs [--quick] [--out DIR]``: results as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from attnserve.contract.manifest import MANIFEST_NAME

from .common import add_common_arguments, machine, write_results
from .launch import start_server, wait_ready

log = logging.getLogger(__name__)

# 24 models: English to and from 12 languages; fr -> de (and every other X -> Y) only by pivot.
LANGUAGES = ("de", "fr", "es", "it", "pt", "nl", "sv", "pl", "cs", "da", "fi", "ro")
PAIRS = tuple((s, t) for x in LANGUAGES for s, t in (("en", x), (x, "en")))
TEXTS = ("Monday, March 3, 2025 at 3:45 PM", "more than 1,500 miles", "on 12 May 2024", "at 7:30 AM")


def pair_repo(base_dir: Path, out: Path, pairs: tuple[tuple[str, str], ...] = PAIRS) -> list[str]:
    """Copies of the translation model directory ``base_dir`` under ``out``, one per pair: its files
    linked, its model.json rewritten with the copy's name and languages (the sha256 of every file
    stays true: the files are the same). Returns the model names."""
    manifest = json.loads((base_dir / MANIFEST_NAME).read_text())
    names = []
    for source, target in pairs:
        name = f"mt-{source}-{target}"
        model_dir = out / name
        model_dir.mkdir(parents=True, exist_ok=True)
        for fname in manifest["files"]:
            link = model_dir / fname
            if not link.exists():
                link.symlink_to((base_dir / fname).resolve())
        if (base_dir / "verification.npz").exists() and not (model_dir / "verification.npz").exists():
            (model_dir / "verification.npz").symlink_to((base_dir / "verification.npz").resolve())
        copy = dict(manifest, name=name)
        copy["languages"] = {
            "source": [source],
            "target": [target],
            "tokens": {},
            "default_source": source,
            "default_target": target,
        }
        (model_dir / MANIFEST_NAME).write_text(json.dumps(copy, indent=2))
        names.append(name)
    return names


def _base_model() -> Path:
    from attnserve.server.shared.locations import bundled_model_repo

    repo = bundled_model_repo()
    if repo is None or not (repo / "translator-en-de").is_dir():
        raise SystemExit("the bundled translator-en-de is missing (models/repo in a checkout)")
    return repo / "translator-en-de"


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


@contextlib.contextmanager
def _server(repo: Path, flags: list[str], threads: int) -> Iterator[tuple[str, int, float]]:
    """A server process on ``repo`` -> (address, pid, seconds from launch to SERVING)."""
    started = time.perf_counter()
    proc, address = start_server(repo, threads=threads, max_batch=8, extra=flags)
    try:
        asyncio.run(wait_ready(address, proc))
        yield address, proc.pid, time.perf_counter() - started
    finally:
        proc.terminate()
        proc.wait(30)


def run(repo: Path, args: argparse.Namespace) -> dict:
    results: dict = {"pairs": len(PAIRS), "budget": args.budget, "clients": args.clients, "seconds": args.seconds}
    # --min-resident-seconds 0: the round robin measures what a load per request costs, not waits for room
    lazy = ["--max-loaded-models", str(args.budget), "--max-tokens-in-flight", "4096", "--min-resident-seconds", "0"]
    eager = ["--load-models", "eager", "--max-tokens-in-flight", "4096"]
    for label, flags in (("lazy", lazy), ("eager", eager)):
        with _server(repo, flags, args.threads) as (address, pid, start_s):
            results[f"{label}_start_s"] = round(start_s, 2)
            results[f"{label}_start_rss_mb"] = round(_rss_kb(pid) / 1024, 1)
            if label == "lazy":
                results.update(_cold_and_warm(address, args.quick))
            results.update({f"{label}_{k}": v for k, v in _round_robin(address, pid, args, PAIRS).items()})
            hot = _round_robin(address, pid, args, PAIRS[: args.budget])  # a working set the budget holds
            results.update({f"{label}_hot{args.budget}_{k}": v for k, v in hot.items()})
    results["throughput_lazy_vs_eager"] = round(results["lazy_texts_per_s"] / results["eager_texts_per_s"], 3)
    hot = f"hot{args.budget}_texts_per_s"
    results[f"throughput_hot{args.budget}_lazy_vs_eager"] = round(results[f"lazy_{hot}"] / results[f"eager_{hot}"], 3)
    return results


def _cold_and_warm(address: str, quick: bool) -> dict:
    """The first request of a pair (its model loads) and the same request again (loaded)."""
    from attnserve.client import Client

    cold, warm = [], []
    with Client(address, timeout=120.0, retries=0) as client:
        for source, target in PAIRS[: 2 if quick else 8]:
            for times in (cold, warm):
                t0 = time.perf_counter()
                client.translate([TEXTS[0]], source_language=source, target_language=target)
                times.append((time.perf_counter() - t0) * 1e3)
    return {
        "cold_first_request_ms_p50": round(statistics.median(cold), 1),
        "warm_request_ms_p50": round(statistics.median(warm), 1),
        "cold_first_request_ms": [round(c, 1) for c in cold],
    }


def _round_robin(address: str, pid: int, args: argparse.Namespace, pairs: tuple[tuple[str, str], ...]) -> dict:
    """``args.clients`` clients, each sending TEXTS to the next of ``pairs`` in turn, for ``args.seconds``."""
    from attnserve.client import Client

    done, stop, peak = [0] * args.clients, threading.Event(), [0]

    def client_loop(i: int) -> None:
        with Client(address, timeout=120.0, retries=0) as client:
            k = i
            while not stop.is_set():
                source, target = pairs[k % len(pairs)]
                client.translate(list(TEXTS), source_language=source, target_language=target)
                done[i] += len(TEXTS)
                k += args.clients

    threads = [threading.Thread(target=client_loop, args=(i,), daemon=True) for i in range(args.clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    while time.perf_counter() - t0 < args.seconds:
        peak[0] = max(peak[0], _rss_kb(pid))
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(120)
    elapsed = time.perf_counter() - t0
    return {"texts_per_s": round(sum(done) / elapsed, 2), "texts": sum(done), "peak_rss_mb": round(peak[0] / 1024, 1)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser)  # --threads: each server's intra-op threads; --repeats, --no-plot unused
    parser.add_argument("--budget", type=int, default=4, help="--max-loaded-models of the lazy server")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=30.0, help="of each round-robin load per server")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.quick:
        args.seconds = min(args.seconds, 3.0)
    info = machine()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="many-pairs-", dir=args.work_dir) as tmp:
        repo = Path(tmp) / "repo"
        pair_repo(_base_model(), repo)
        results = run(repo, args)
    results["machine"] = info
    print(json.dumps({k: v for k, v in results.items() if k != "machine"}, indent=1))
    write_results(args.out, "many_pairs", results, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
