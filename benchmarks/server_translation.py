"""Translation serving under load: continuous batching vs static batches run to completion.

Two live ``attnserve-server`` subprocesses on 127.0.0.1 serve the same random Marian-shaped
translator (``benchmarks/translators.py``: the end token can never win, so every text gets
exactly its ``max_new_tokens``), one with ``--translation-batching continuous`` and one with
``static`` (queued texts start only when every row of the running batch has finished;
a finished row still leaves the batch at once, so static batches pay no padding rows,
only the wait), both with the same ``--max-active-sequences``. A mixed workload of short and long texts
(short: few source words and few new tokens; long: many of both) arrives by a Poisson
process with a fixed seed, the same schedule for both servers, at each offered rate. Every
text is one TranslateStream call: time to first token (TTFT) is send -> first chunk,
latency is send -> last chunk, and tokens/s is the generated tokens over the time from the
first arrival to the last completion. The two servers take turns, one round each. The
engine in process (no gRPC, every text submitted at once, both batching modes taking
turns) gives the schedulers' own ratio at saturation, free of the load generator.

With ``--workers N``, a third server runs continuous batching in N worker processes
(``attnserve-server --workers N``: N schedulers, N GILs, one port) and takes its turn beside
the other two; the client then spreads its streams over ``--channels`` connections (the
kernel gives each connection to one worker). Every row also gets its ratio to the engine in
process (continuous), the issue-18 headline: the server's tokens/s over the engine's own; and
its ratio to the engine in process given the same texts at the same times (``translate`` calls,
no gRPC), which leaves out what the arrival process costs (a batch that fills and drains) and
keeps what serving costs.

    python -m benchmarks.server --workloads translation       # or: attnserve-bench server ...
    python -m benchmarks.server --workloads translation --rates 64 --rounds 2 --workers 2
    python -m benchmarks.server --workloads translation --quick
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .common import header, machine, pyplot, save_plot, table, write_results

NAME = "server-translation"
LEFT_PADDED = " (left-padded cache)"
SERVERS = ("continuous", "static")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("translation workload")
    group.add_argument("--mt-preset", default=None, help="translator preset served (default mt-small; quick mt-tiny)")
    group.add_argument(
        "--rates", type=float, nargs="+", default=None, help="offered texts/s, Poisson (default 8 16 32 64)"
    )
    group.add_argument("--mt-requests", type=int, default=None, help="texts per rate and round (default 160; quick 12)")
    group.add_argument(
        "--rounds", type=int, default=None, help="rounds per rate, servers taking turns (default 3; quick 1)"
    )
    group.add_argument("--short-tokens", type=int, default=None, help="new tokens of a short text (default 16)")
    group.add_argument("--long-tokens", type=int, default=None, help="new tokens of a long text (default 128)")
    group.add_argument("--short-source", type=int, default=None, help="source words of a short text (default 8)")
    group.add_argument("--long-source", type=int, default=None, help="source words of a long text (default 40)")
    group.add_argument("--long-share", type=float, default=0.25, help="share of long texts (default 0.25)")
    group.add_argument("--max-rows", type=int, default=None, help="--max-active-sequences of both servers (32)")
    group.add_argument("--seed", type=int, default=0, help="seed of arrivals, lengths and texts")
    group.add_argument(
        "--left-padded",
        action="store_true",
        help="in process, also both batching modes on the left-padded cache (directories exported before the "
        "in-place cache), taking turns with the others",
    )
    group.add_argument(
        "--rpc",
        choices=["stream", "unary"],
        default="stream",
        help="TranslateStream (TTFT measured by the client; default) or Translate (TTFT as the server reports it)",
    )
    group.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=[],
        metavar="N",
        help="also serve with continuous batching in N worker processes (attnserve-server --workers N), per N",
    )
    group.add_argument(
        "--channels",
        type=int,
        default=None,
        help="client connections per server, streams spread round-robin (default 1; 4 x the most workers with "
        "--workers, so that every worker gets connections)",
    )


def settle(args: argparse.Namespace) -> None:
    q = args.quick
    defaults = dict(
        mt_preset="mt-tiny" if q else "mt-small",
        rates=[40.0] if q else [8.0, 16.0, 32.0, 64.0],
        mt_requests=12 if q else 160,
        rounds=1 if q else 3,
        short_tokens=4 if q else 16,
        long_tokens=16 if q else 128,
        short_source=4 if q else 8,
        long_source=12 if q else 40,
        max_rows=8 if q else 32,
    )
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    check_workers(args)
    if args.channels is None:
        args.channels = 4 * max(args.workers) if args.workers else 1


def check_workers(args: argparse.Namespace) -> None:
    if any(n < 2 for n in args.workers) or (args.channels is not None and args.channels < 1):
        raise SystemExit("--workers takes counts >= 2 (1 is the plain server itself); --channels >= 1")


def server_names(args: argparse.Namespace) -> dict[str, list[str]]:
    """Server name -> its extra attnserve-server flags: continuous, static, and one per ``--workers N``."""
    names = {name: ["--translation-batching", name] for name in SERVERS}
    for n in args.workers:
        names[f"continuous, {n} workers"] = ["--translation-batching", "continuous", "--workers", str(n)]
    return names


@dataclass(frozen=True)
class Arrival:
    at_s: float  # since the first arrival
    text: str
    new_tokens: int
    long: bool


def workload(args: argparse.Namespace, rate: float, vocab: int) -> list[Arrival]:
    """``args.mt_requests`` texts, Poisson arrivals at ``rate``/s; the same seed at every rate
    gives the same texts and lengths, only the gaps scale."""
    rng = np.random.default_rng(args.seed)
    n = args.mt_requests
    gaps = rng.exponential(1.0, n)
    at = np.concatenate([[0.0], np.cumsum(gaps[1:])]) / rate  # (n,) seconds
    long = rng.random(n) < args.long_share
    out = []
    for t, is_long in zip(at.tolist(), long.tolist()):
        words = rng.integers(4, vocab, args.long_source if is_long else args.short_source)
        text = " ".join(f"t{i}" for i in words)
        out.append(Arrival(t, text, args.long_tokens if is_long else args.short_tokens, is_long))
    return out


async def replay(
    address: str, model: str, arrivals: list[Arrival], unary: bool = False, channels: int = 1
) -> dict[str, Any]:
    """Send every arrival as a TranslateStream (``unary``: a Translate) at its time, over ``channels``
    connections in turn; per-text TTFT, latency and tokens."""
    import grpc

    from attnserve.protos.attnserve.v1 import inference_pb2 as pb
    from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc

    def request(a: Arrival) -> pb.TranslateRequest:
        options = pb.DecodingOptions(max_new_tokens=a.new_tokens, return_token_ids=True)
        return pb.TranslateRequest(model=model, texts=[a.text], options=options)

    # A connection of its own per channel (grpc would share one per target), so that the kernel can
    # hand each one to a different worker process of an ``attnserve-server --workers N``.
    own = [("grpc.use_local_subchannel_pool", 1)]
    opened = [grpc.aio.insecure_channel(address, options=own) for _ in range(channels)]
    try:
        stubs = [pb_grpc.InferenceServiceStub(channel) for channel in opened]
        for stub in stubs:  # warm-up: every connection and handler
            async for _ in stub.TranslateStream(request(arrivals[0])):
                pass
        t0 = time.perf_counter()

        async def one(i: int, a: Arrival) -> dict[str, Any]:
            stub = stubs[i % len(stubs)]
            await asyncio.sleep(max(0.0, t0 + a.at_s - time.perf_counter()))
            sent = time.perf_counter()
            first, tokens = None, 0
            if unary:  # TTFT as the server measured it (submitted -> first token)
                (translation,) = (await stub.Translate(request(a))).translations
                first, tokens = (
                    sent + translation.timing.first_token_ms / 1000,
                    len(translation.hypotheses[0].token_ids),
                )
            else:
                async for chunk in stub.TranslateStream(request(a)):
                    first = first or time.perf_counter()
                    tokens += len(chunk.token_ids)
            done = time.perf_counter()
            late = sent - t0 - a.at_s
            return {"late_s": late, "ttft_s": first - sent, "latency_s": done - sent, "done": done, "tokens": tokens}

        texts = await asyncio.gather(*(one(i, a) for i, a in enumerate(arrivals)))
        for a, t in zip(arrivals, texts):
            t["expected"], t["long"] = a.new_tokens, a.long
    finally:
        for channel in opened:
            await channel.close()
    wall = max(t["done"] for t in texts) - t0
    return {"texts": texts, "wall_s": wall}


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Median tokens/s over rounds; latency percentiles over every text of every round."""
    texts = [t for r in rounds for t in r["texts"]]
    ttft = 1000 * np.array([t["ttft_s"] for t in texts])
    latency = 1000 * np.array([t["latency_s"] for t in texts])
    short = 1000 * np.array([t["latency_s"] for t in texts if not t["long"]])
    per_round = [sum(t["tokens"] for t in r["texts"]) / r["wall_s"] for r in rounds]
    return {
        "texts": len(texts),
        "exact_token_counts": all(t["tokens"] == t["expected"] for t in texts),
        "tokens_per_s": float(np.median(per_round)),
        "tokens_per_s_rounds": per_round,
        "ttft_p50_ms": float(np.percentile(ttft, 50)),
        "ttft_p95_ms": float(np.percentile(ttft, 95)),
        "latency_p50_ms": float(np.percentile(latency, 50)),
        "latency_p95_ms": float(np.percentile(latency, 95)),
        "short_latency_p95_ms": float(np.percentile(short, 95)) if len(short) else None,
        "client_late_max_ms": 1000 * max(t["late_s"] for t in texts),
        "wall_s_rounds": [r["wall_s"] for r in rounds],
    }


def in_process(args: argparse.Namespace, model_dir: Path, schedules: dict[float, list[Arrival]]) -> dict[str, Any]:
    """Median tokens/s of the engine itself, no gRPC, every text submitted at once, per batching mode
    (the two engines take turns, ``args.rounds`` rounds after a warm-up each): the schedulers' own ratio.
    ``same_arrivals``: per rate, the continuous engine given the texts at their ``schedules`` times,
    as the servers get them (``translate`` calls; tokens over first arrival -> last completion), so
    that a server's ratio to it leaves out what the arrival process itself costs."""
    from attnserve.contract.manifest import load_manifest
    from attnserve.server.service.limits import prepare
    from attnserve.server.translation import DecodeOptions, EngineSettings, TranslationEngine
    from attnserve.server.translation.sessions import load_translation_sessions

    at_once = [dataclasses.replace(a, at_s=0.0) for a in next(iter(schedules.values()))]  # same texts at any rate
    dirs = {name: (name, model_dir) for name in SERVERS}
    if args.left_padded:  # the same weights, exported with the layout before the in-place cache
        dirs.update({f"{name}{LEFT_PADDED}": (name, left_padded_dir(args)) for name in SERVERS})

    async def session() -> dict[str, float]:
        engines = {}
        for name, (batching, path) in dirs.items():
            manifest = load_manifest(path)
            enc, dec = load_translation_sessions(path, manifest, intra_op_threads=args.threads)
            settings = EngineSettings(
                max_active_sequences=args.max_rows, max_queue_size=len(at_once), batching=batching
            )
            engines[name] = TranslationEngine(path, manifest, enc, dec, settings)
            engines[name].warmup()
            await engines[name].start()

        async def replayed(engine: TranslationEngine, schedule: list[Arrival]) -> float:
            """Tokens/s of ``schedule``'s texts submitted at their times (tokens over first
            arrival -> last completion)."""
            t0 = time.perf_counter()

            async def one(a: Arrival) -> int:
                delay = t0 + a.at_s - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                options = DecodeOptions(max_new_tokens=a.new_tokens, return_scores=False)
                (result,) = await engine.translate(prepare(engine, [a.text], options))
                return len(result.hypotheses[0].token_ids)

            tokens = sum(await asyncio.gather(*(one(a) for a in schedule)))
            return tokens / (time.perf_counter() - t0)

        runs: dict[str, list[float]] = {name: [] for name in engines}
        for engine in engines.values():
            await replayed(engine, at_once)
        for _ in range(args.rounds):
            for name, engine in engines.items():
                runs[name].append(await replayed(engine, at_once))
        same: dict[float, list[float]] = {rate: [] for rate in schedules}
        for _ in range(args.rounds):
            for rate, schedule in schedules.items():
                same[rate].append(await replayed(engines["continuous"], schedule))
        for engine in engines.values():
            await engine.stop(1.0)
        out: dict[str, Any] = {name: float(np.median(r)) for name, r in runs.items()}
        out["same_arrivals"] = {rate: float(np.median(r)) for rate, r in same.items()}
        return out

    return asyncio.run(session())


def left_padded_dir(args: argparse.Namespace) -> Path:
    """The benchmark translator exported with ``--kv-cache left-padded`` (reused when present)."""
    from .translators import bench_translator, export_translator

    out = args.work_dir / f"{args.mt_preset}-fp32-left-padded"
    return export_translator(bench_translator(args.mt_preset), out, args.mt_preset, kv_cache="left-padded")


def model_repo(args: argparse.Namespace) -> tuple[Path, Path, str, int]:
    """A repository holding the benchmark translator; returns (repo, model dir, model name, vocabulary size).

    The model directory is the decode benchmark's export (same path and cache key), reused when present.
    """
    from attnserve.contract.manifest import load_manifest

    from .translators import bench_translator, export_translator

    name = f"{args.mt_preset}-fp32"
    model_dir = export_translator(bench_translator(args.mt_preset), args.work_dir / name, args.mt_preset)
    repo = args.work_dir / f"server-mt-repo-{args.mt_preset}"
    repo.mkdir(parents=True, exist_ok=True)
    if not (repo / name).exists():
        (repo / name).symlink_to(model_dir.resolve(), target_is_directory=True)
    manifest = load_manifest(model_dir)
    return repo, model_dir, manifest.name, int(manifest.config["vocab_size"])


def run(args: argparse.Namespace) -> dict[str, Any]:
    from .decode import vars_of
    from .launch import start_server, wait_ready

    settle(args)
    q = args.quick
    info = machine()
    title = (
        f"server: translation, {args.mt_preset}, {args.provider}, {args.mt_requests} texts per rate "
        f"({100 * args.long_share:.0f}% long: {args.long_source} words -> {args.long_tokens} tokens, else "
        f"{args.short_source} -> {args.short_tokens}), at most {args.max_rows} rows{' (quick)' if q else ''}"
    )
    header(title, info, args.threads)
    repo, model_dir, model, vocab = model_repo(args)
    extra = ["--max-active-sequences", str(args.max_rows), "--max-translation-queue", str(args.mt_requests + 1)]
    procs = {
        name: start_server(repo, args.threads, 1, args.provider, [*extra, *flags])
        for name, flags in server_names(args).items()
    }
    schedules = {rate: workload(args, rate, vocab) for rate in args.rates}
    rounds: dict[tuple[float, str], list[dict[str, Any]]] = {}
    try:

        async def session() -> None:
            for proc, address in procs.values():
                await wait_ready(address, proc)
            for rate, arrivals in schedules.items():
                for _ in range(args.rounds):
                    for name, (_, address) in procs.items():  # interleaved: the two servers take turns
                        got = await replay(address, model, arrivals, args.rpc == "unary", args.channels)
                        rounds.setdefault((rate, name), []).append(got)

        asyncio.run(session())
    finally:
        for proc, _ in procs.values():
            proc.terminate()
        for proc, _ in procs.values():
            proc.wait(30)
    mean_tokens = float(np.mean([a.new_tokens for a in next(iter(schedules.values()))]))
    rows = []
    for (rate, name), got in rounds.items():
        rows.append({"rate": rate, "offered_tokens_per_s": rate * mean_tokens, "server": name, **summary(got)})
    for r in rows:
        peer = next(x for x in rows if x["rate"] == r["rate"] and x["server"] == "static")
        r["ratio_to_static"] = r["tokens_per_s"] / peer["tokens_per_s"]
    direct = in_process(args, model_dir, schedules)
    for r in rows:  # the server against its own engine without gRPC (the headline figure at saturation)
        r["ratio_to_in_process"] = r["tokens_per_s"] / direct["continuous"]
        r["engine_same_arrivals_tokens_per_s"] = direct["same_arrivals"][r["rate"]]
        r["ratio_to_engine_same_arrivals"] = r["tokens_per_s"] / direct["same_arrivals"][r["rate"]]
    print(
        table(
            ["texts/s", "offered tok/s", "batching", "tok/s", "TTFT p50 ms", "TTFT p95 ms", "p50 ms", "p95 ms"]
            + ["short p95 ms", "vs static", "vs in-process", "vs engine, same arrivals"],
            [
                [r["rate"], r["offered_tokens_per_s"], r["server"], r["tokens_per_s"], r["ttft_p50_ms"]]
                + [r["ttft_p95_ms"], r["latency_p50_ms"], r["latency_p95_ms"], r["short_latency_p95_ms"] or 0.0]
                + [f"{r['ratio_to_static']:.2f}x", f"{r['ratio_to_in_process']:.2f}x"]
                + [f"{r['ratio_to_engine_same_arrivals']:.2f}x"]
                for r in rows
            ],
        )
    )
    ratio = direct["continuous"] / direct["static"]
    print(
        f"in-process engine, all {args.mt_requests} texts at once: continuous {direct['continuous']:,.0f} tok/s, "
        f"static {direct['static']:,.0f} tok/s ({ratio:.2f}x); continuous on each rate's arrival schedule: "
        + ", ".join(f"{rate:g}/s {tps:,.0f} tok/s" for rate, tps in direct["same_arrivals"].items())
    )
    if args.left_padded:
        c, s = direct[f"continuous{LEFT_PADDED}"], direct[f"static{LEFT_PADDED}"]
        print(f"  the same with the left-padded cache: continuous {c:,.0f} tok/s, static {s:,.0f} tok/s ({c / s:.2f}x)")
    late = max(r["client_late_max_ms"] for r in rows)
    print(
        f"exactly the requested tokens in every text: {all(r['exact_token_counts'] for r in rows)}; "
        f"load generator at most {late:.0f} ms behind its schedule"
    )
    result = {"benchmark": NAME, "settings": vars_of(args), "machine": info, "model": model, "rows": rows}
    result["mean_new_tokens"] = mean_tokens
    result["in_process_tokens_per_s"] = direct
    if not args.no_plot:
        result["plot"] = str(plot(rows, direct, args))
    write_results(args.out, NAME, result, q)
    return result


def plot(rows: list[dict[str, Any]], direct: dict[str, Any], args: argparse.Namespace) -> Path:
    plt = pyplot()
    fig, (tput, ttft) = plt.subplots(1, 2, figsize=(10, 4))
    names = list(dict.fromkeys(r["server"] for r in rows))
    colors = {name: f"C{i}" for i, name in enumerate(names)}
    for name in names:
        sel = [r for r in rows if r["server"] == name]
        rates, c = [r["rate"] for r in sel], colors[name]
        tput.plot(rates, [r["tokens_per_s"] for r in sel], marker="o", color=c, label=f"{name} batching")
        ttft.plot(rates, [r["ttft_p95_ms"] for r in sel], marker="o", color=c, label=f"{name}: p95")
        ttft.plot(rates, [r["ttft_p50_ms"] for r in sel], marker=".", ls=":", color=c, label=f"{name}: p50")
    offered = sorted({(r["rate"], r["offered_tokens_per_s"]) for r in rows})
    tput.plot([o[0] for o in offered], [o[1] for o in offered], ls="--", color="gray", label="offered")
    for name in SERVERS:
        tput.axhline(direct[name], ls=":", color=colors[name], label=f"in-process {name}, all at once")
    same = sorted(direct["same_arrivals"].items())
    tput.plot(
        [r for r, _ in same], [v for _, v in same], marker="x", ls=":", color="black", label="in-process, same arrivals"
    )
    for ax in (tput, ttft):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("offered texts/s (Poisson)")
        ax.legend(fontsize=8)
    tput.set_ylabel("generated tokens/s")
    ttft.set_ylabel("time to first token, ms")
    ttft.set_yscale("log")
    fig.suptitle(
        f"{args.mt_preset}, {100 * args.long_share:.0f}% long ({args.long_tokens} tokens), "
        f"else {args.short_tokens}; at most {args.max_rows} rows",
        fontsize=9,
    )
    path = save_plot(fig, args.out, NAME, args.quick)
    return path
