"""What word alignments cost a request (issue 34): the same translations with and without them.

A live ``attnserve-server`` (a subprocess on 127.0.0.1) serves the bundled translator's committed
model directory. The texts are its example phrases (``examples/sentences.tsv``); contenders,
taking turns one round each (``interleaved``):

- ``batch, off`` / ``batch, alignments``: every phrase in one ``Translate`` request, without and
  with ``return_alignments`` (one aligner run over all of them);
- ``one each, off`` / ``one each, alignments``: one request per phrase, one after another (an
  aligner run per request: the latency a single caller sees);
- ``html, tags placed``: the phrases in html with their second word in ``<b>``, so every
  sentence is aligned to place its tag (what html costs with an aligner; no alignments returned).

Reported: sentences per second (median round) and each contender against its ``off``.

    python -m benchmarks.alignments            # or: attnserve-bench alignments
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from .common import add_common_arguments, header, interleaved, linked_repo, machine, table, write_results
from .server import start_server, wait_ready

NAME = "alignments"
MODEL = "translator-en-de"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "sentences.tsv"
COMMITTED = Path(__file__).resolve().parent.parent / "models" / "repo" / MODEL


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.alignments", description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument(
        "--model-dir",
        type=Path,
        default=COMMITTED,
        help="the translator's model directory (default: the committed one; another export of it, to compare)",
    )
    return parser


def phrases() -> list[str]:
    lines = EXAMPLES.read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[0] for line in lines if line.strip() and not line.startswith("#")]


def tagged(text: str) -> str:
    """The phrase in html with its second word in <b> (the first when it has one word)."""
    words = text.split(" ")
    k = 1 if len(words) > 1 else 0
    return " ".join([*words[:k], f"<b>{words[k]}</b>", *words[k + 1 :]])


def run(args: argparse.Namespace) -> dict[str, Any]:
    from attnserve.client import Client

    repo = linked_repo(args.work_dir / "alignments-repo", MODEL, args.model_dir)
    repeats = args.repeats or (1 if args.quick else 7)
    texts = phrases()
    html = [tagged(t) for t in texts]
    info = machine()
    header(f"alignments: {len(texts)} phrases, with and without word alignments", info, args.threads)
    proc, address = start_server(repo, args.threads, 32)
    try:
        asyncio.run(wait_ready(address, proc))
        with Client(address, timeout=600.0) as client:

            def each(alignments: bool) -> list[str]:
                return [client.translate(t, MODEL, alignments=alignments)[0].text for t in texts]

            runs = {
                "batch, off": lambda: [r.text for r in client.translate(texts, MODEL)],
                "batch, alignments": lambda: [r.text for r in client.translate(texts, MODEL, alignments=True)],
                "one each, off": lambda: each(False),
                "one each, alignments": lambda: each(True),
                "html, tags placed": lambda: [r.text for r in client.translate(html, MODEL, format="html")],
            }
            timings, values = interleaved(runs, repeats)
    finally:
        proc.terminate()
        proc.wait(30)
    assert values["batch, off"] == values["batch, alignments"] == values["one each, alignments"]  # same text
    rates = {name: len(texts) / t.median for name, t in timings.items()}
    base = {name: rates["batch, off" if name.startswith(("batch", "html")) else "one each, off"] for name in rates}
    rows = [[name, f"{t.median * 1e3:.1f}", round(rates[name]), f"{rates[name] / base[name]:.2f}x"]
            for name, t in timings.items()]  # fmt: skip
    print(table(["contender", "median ms", "sentences/s", "vs off"], rows))
    return {
        "machine": info,
        "model_dir": str(args.model_dir),
        "sentences": len(texts),
        "threads": args.threads,
        "repeats": repeats,
        "timings": {name: t.to_json() for name, t in timings.items()},
        "sentences_per_s": rates,
        "html_sample": values["html, tags placed"][:3],
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    write_results(args.out, NAME, run(args), args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
