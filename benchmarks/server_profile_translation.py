"""Where a live translation server spends its CPU per generated token: py-spy samples, grouped.

``python -m benchmarks.server_profile --workload translation`` (this module): one
``attnserve-server`` (continuous batching) serves the random translator of
``benchmarks.server_translation`` while its load generator replays the same mixed workload
(Poisson arrivals, every text a TranslateStream) at a rate above the server's capacity, and
``py-spy record`` samples every thread of the server. Each sample goes to one group by the
frames on its stack: onnxruntime's ``run``, the decode scheduler's own Python, the
scheduler posting results to the event loop, the stream handlers (detokenising, chunks),
gRPC and the event loop. The server's CPU per token (from ``/proc``) is set against the
CPU per token of the same engine in a fresh process of its own (as the server is), fed the
same texts all at once with no gRPC: the difference is what serving costs per token.

    python -m benchmarks.server_profile --workload translation --rates 256
    python -m benchmarks.server_profile --workload translation --quick
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import server_translation as st
from .common import header, in_fresh_process, machine, table, write_results

NAME = "server-profile-translation"

GROUPS = [
    # the engine calls the C++ session through sessions.direct_run (a lambda), other code Session.run;
    # an in-place decoder's step runs through io binding
    ("onnxruntime run", ("Session.run (onnxruntime", "direct_run.<locals>", "Session.run_with_iobinding (")),
    # call_soon_threadsafe writes to the loop's self-pipe: a system call that lets go of the GIL, so
    # these samples are mostly the scheduler thread waiting to get the GIL back from the event loop.
    ("scheduler -> event loop (call_soon_threadsafe, GIL wait)", ("Outbox.flush (", "_write_to_self (")),
    ("decode scheduler (Python)", ("server/translation/scheduler.py", "server/translation/cache.py")),
    (
        "doors and services: detokenise, chunks, request checks",
        ("server/translation/", "server/entry/app.py", "server/doors/", "server/service/", "server/documents"),
    ),
    (
        "metrics, interceptors",
        ("server/shared/metrics.py", "server/shared/security.py", "server/shared/calls.py", "prometheus"),
    ),
    ("gRPC aio + event loop (Cython and asyncio)", ("asyncio/", "grpc")),
]


def engine_cpu_us_per_token(args: argparse.Namespace, model_dir: Path, arrivals: list[st.Arrival]) -> float:
    """Process CPU microseconds per token of the engine alone (continuous batching, every text at once,
    after a warm-up pass): what the server's engine costs without serving. Run in a fresh process."""
    from attnserve.contract.manifest import load_manifest
    from attnserve.server.service.limits import prepare
    from attnserve.server.translation import DecodeOptions, EngineSettings, TranslationEngine
    from attnserve.server.translation.sessions import load_translation_sessions

    manifest = load_manifest(model_dir)

    async def session() -> float:
        enc, dec = load_translation_sessions(model_dir, manifest, intra_op_threads=args.threads)
        settings = EngineSettings(max_active_sequences=args.max_rows, max_queue_size=len(arrivals))
        engine = TranslationEngine(model_dir, manifest, enc, dec, settings)
        engine.warmup()
        await engine.start()

        async def once() -> int:
            calls = [
                engine.translate(
                    prepare(engine, [a.text], DecodeOptions(max_new_tokens=a.new_tokens, return_scores=False))
                )
                for a in arrivals
            ]
            return sum(len(r[0].hypotheses[0].token_ids) for r in await asyncio.gather(*calls))

        await once()
        cpu0 = time.process_time()
        tokens = sum([await once() for _ in range(max(1, args.rounds))])
        cpu = time.process_time() - cpu0
        await engine.stop(1.0)
        return 1e6 * cpu / tokens

    return asyncio.run(session())


def run(args: argparse.Namespace) -> dict[str, Any]:
    from .decode import vars_of
    from .launch import start_server, wait_ready
    from .pyspy import WAITING, parse_raw, process_cpu_seconds

    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(pyspy).exists():
        raise SystemExit("py-spy is not installed: pip install -e '.[bench]'")
    rate_given = args.rates is not None
    if args.quick and args.mt_requests is None:
        args.mt_requests = 160  # at the quick rate, tenths of a second busy: samples to group (12 gave none at times)
    st.settle(args)
    if not rate_given:
        args.rates = [1000.0] if args.quick else [256.0]  # above the server's capacity: saturated
    rate = args.rates[0]
    info = machine()
    header(
        f"server profile: translation, {args.mt_preset}, {rate:g} texts/s{' (quick)' if args.quick else ''}", info, 1
    )
    repo, model_dir, model, vocab = st.model_repo(args)
    arrivals = st.workload(args, rate, vocab)
    extra = ["--max-active-sequences", str(args.max_rows), "--max-translation-queue", str(len(arrivals) + 1)]
    proc, address = start_server(repo, args.threads, 1, args.provider, extra)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(args.keep_raw) if args.keep_raw else Path(tmp) / "profile.txt"

            async def session() -> dict[str, Any]:
                await wait_ready(address, proc)
                await st.replay(address, model, arrivals[: max(4, len(arrivals) // 8)])  # warm-up
                spy = subprocess.Popen(
                    [pyspy, "record", "--pid", str(proc.pid), "--rate", str(args.rate), "--format", "raw"]
                    + ["--nonblocking", "--output", str(raw)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
                await asyncio.sleep(0.5)  # py-spy attaches
                cpu0 = process_cpu_seconds(proc.pid)
                got = await st.replay(address, model, arrivals, args.rpc == "unary")
                cpu = process_cpu_seconds(proc.pid) - cpu0
                spy.send_signal(2)  # SIGINT: py-spy writes what it has and exits
                _, err = await asyncio.get_running_loop().run_in_executor(None, spy.communicate)
                if not raw.exists():
                    raise SystemExit(f"py-spy failed ({spy.returncode}): {err.decode(errors='replace').strip()[-400:]}")
                return {"replay": got, "server_cpu_s": cpu, "samples": parse_raw(raw.read_text(), GROUPS)}

            stats = asyncio.run(session())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    summary = st.summary([stats["replay"]])
    tokens = sum(t["tokens"] for t in stats["replay"]["texts"])
    server_us = 1e6 * stats["server_cpu_s"] / tokens
    engine_us = in_fresh_process(engine_cpu_us_per_token, args, model_dir, arrivals)
    counted = {k: v for k, v in stats["samples"].items() if k != WAITING}
    total = sum(counted.values()) or 1
    rows = [[k, n, f"{100 * n / total:.0f}%" if k in counted else ""] for k, n in stats["samples"].items()]
    print(table(["where (py-spy samples of the server)", "samples", "share"], rows))
    print(
        f"served {tokens} tokens at {summary['tokens_per_s']:,.0f} tok/s (TTFT p95 {summary['ttft_p95_ms']:.0f} ms); "
        f"server CPU {server_us:.0f} us per token (/proc), the engine alone {engine_us:.0f} us per token "
        f"-> serving costs {server_us - engine_us:.0f} us per token"
    )
    result = {
        "benchmark": NAME,
        "settings": vars_of(args),
        "machine": info,
        "served": summary,
        "tokens": tokens,
        "samples": stats["samples"],
        "shares": {k: n / total for k, n in counted.items()},
        "server_cpu_us_per_token": server_us,
        "engine_cpu_us_per_token": engine_us,
        "serving_cpu_us_per_token": server_us - engine_us,
    }
    write_results(args.out, NAME, result, args.quick)
    return result
