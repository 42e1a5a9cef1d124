"""What word alignments cost a request: the same translations with and without them.

A live ``attnserve-server`` (a subprocess on 127.0.0.1) serves the bundled translator's committed
model directory. The texts are its example phrases (``examples/sentences.tsv``); contenders,
taking turns one round each (``interleaved``):

- ``batch, off`` / ``batch, alignments``: every phrase in one ``Translate`` request, without and
  with ``return_alignments`` (one aligner run over all of them);
- ``one each, off`` / ``one each, alignments``: one request per phrase, one after another (an
  aligner run per request: the latency a single caller sees);
- ``html, tags placed``: the phrases in html with their second word in ``<b>``, so every
  sentence is aligned to place its tag (what html costs with an aligner; no alignments returned).

Each contender runs twice: on the directory as exported (its decoder returns each step's
attention, which the engine keeps: greedy alignments run no aligner graph) and, marked
``[aligner graph]``, on a second server with the same directory whose decoder goes without that
output (``common.without_step_attention_dir``: as exported before it), where the aligner graph
runs over the kept encoder outputs. Its ``off`` rows against the first's say what the output
costs requests that do not align.

Reported: sentences per second (median round) and each contender against its ``off``.

    python -m benchmarks.alignments            # or: attnserve-bench alignments
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from .common import (
    add_common_arguments,
    add_model_dir_argument,
    header,
    interleaved,
    linked_repo,
    machine,
    shown_path,
    table,
    without_step_attention_dir,
    write_results,
)
from .launch import start_server, wait_ready

NAME = "alignments"
MODEL = "translator-en-de"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "sentences.tsv"
COMMITTED = Path(__file__).resolve().parent.parent / "models" / "repo" / MODEL


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.alignments", description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    add_model_dir_argument(parser, COMMITTED)
    return parser


def phrases() -> list[str]:
    lines = EXAMPLES.read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[0] for line in lines if line.strip() and not line.startswith("#")]


def tagged(text: str) -> str:
    """The phrase in html with its second word in <b> (the first when it has one word)."""
    words = text.split(" ")
    k = 1 if len(words) > 1 else 0
    return " ".join([*words[:k], f"<b>{words[k]}</b>", *words[k + 1 :]])


GRAPH = " [aligner graph]"  # the contenders served by the decoder without step_attention
TEXTS = ("batch, off", "batch, alignments", "one each, alignments")  # contenders returning plain translations


def contenders(client, texts: list[str], html: list[str], mark: str) -> dict[str, Any]:
    """The five contenders of the module docstring on ``client``'s server, names ending in ``mark``."""

    def each(alignments: bool) -> list[str]:
        return [client.translate(t, MODEL, alignments=alignments)[0].text for t in texts]

    return {
        f"batch, off{mark}": lambda: [r.text for r in client.translate(texts, MODEL)],
        f"batch, alignments{mark}": lambda: [r.text for r in client.translate(texts, MODEL, alignments=True)],
        f"one each, off{mark}": lambda: each(False),
        f"one each, alignments{mark}": lambda: each(True),
        f"html, tags placed{mark}": lambda: [r.text for r in client.translate(html, MODEL, format="html")],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from attnserve.client import Client

    repo = linked_repo(args.work_dir / "alignments-repo", MODEL, args.model_dir)
    baseline = without_step_attention_dir(args.model_dir, args.work_dir / "alignments-baseline" / MODEL, MODEL)
    repeats = args.repeats or (1 if args.quick else 7)
    texts = phrases()
    html = [tagged(t) for t in texts]
    info = machine()
    header(f"alignments: {len(texts)} phrases, with and without word alignments", info, args.threads)
    servers = [start_server(path, args.threads, 32) for path in (repo, baseline.parent)]
    try:
        for proc, address in servers:
            asyncio.run(wait_ready(address, proc))
        with Client(servers[0][1], timeout=600.0) as steps, Client(servers[1][1], timeout=600.0) as graph:
            runs = {}
            for client, mark in ((steps, ""), (graph, GRAPH)):
                runs |= contenders(client, texts, html, mark)
            timings, values = interleaved(runs, repeats)
    finally:
        for proc, _ in servers:
            proc.terminate()
            proc.wait(30)
    assert len({tuple(values[f"{n}{mark}"]) for n in TEXTS for mark in ("", GRAPH)}) == 1  # the same translations
    assert values["html, tags placed"] == values[f"html, tags placed{GRAPH}"]  # tags placed alike
    rates = {name: len(texts) / t.median for name, t in timings.items()}
    rows = []
    for name, t in timings.items():
        off = ("batch, off" if name.startswith(("batch", "html")) else "one each, off") + (GRAPH * (GRAPH in name))
        rows.append([name, f"{t.median * 1e3:.1f}", round(rates[name]), f"{rates[name] / rates[off]:.2f}x"])
    print(table(["contender", "median ms", "sentences/s", "vs off"], rows))
    cost = {k: rates[k] / rates[f"{k}{GRAPH}"] for k in ("batch, off", "one each, off")}
    print("off, decoder with step_attention / without: " + ", ".join(f"{k} {v:.2f}x" for k, v in cost.items()))
    return {
        "machine": info,
        "model_dir": shown_path(args.model_dir),
        "sentences": len(texts),
        "threads": args.threads,
        "repeats": repeats,
        "timings": {name: t.to_json() for name, t in timings.items()},
        "sentences_per_s": rates,
        "off_with_over_without_step_attention": cost,
        "html_sample": values["html, tags placed"][:3],
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    write_results(args.out, NAME, run(args), args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
