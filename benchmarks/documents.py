"""A document in one request against its sentences one request each.

A live ``attnserve-server`` (a subprocess on 127.0.0.1) serves the bundled translator
(``translator-en-de``, its committed model directory ``models/repo``). The document is ~10,000
characters of its example phrases (``examples/sentences.tsv``) on lines, some lines holding
two sentences, with blank lines. Contenders, taking turns one round each (``interleaved``):

- ``document``: one ``Translate`` call with the whole text: the server splits it and decodes
  every sentence together in the continuous batcher;
- ``sentences, one call each``: the same sentences (as the server splits them), one
  ``Translate`` call per sentence, one after another (a client that splits the text itself);
- ``sentences, N calls in flight``: the same calls from N client threads at once.

Reported: characters of the document per second (median round) and the ratios.

    python -m benchmarks.documents            # or: attnserve-bench documents
    python -m benchmarks.documents --quick
"""

from __future__ import annotations

import argparse
import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .common import add_common_arguments, header, interleaved, linked_repo, machine, table, write_results
from .launch import start_server, wait_ready

NAME = "documents"
MODEL = "translator-en-de"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "sentences.tsv"
COMMITTED = Path(__file__).resolve().parent.parent / "models" / "repo" / MODEL


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.documents", description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--chars", type=int, default=None, help="document size in characters (default 10000)")
    parser.add_argument("--clients", type=int, default=16, help="client threads of the concurrent contender")
    return parser


def document(chars: int) -> str:
    """Example phrases on lines until ``chars`` characters: every third line holds two sentences
    (the first ends with a period), every seventh is blank."""
    english = [line.split("\t")[0] for line in EXAMPLES.read_text(encoding="utf-8").splitlines()[1:]]
    sentences = [e for e in english if e.endswith(".")]
    lines: list[str] = []
    i = 0
    while sum(len(line) + 1 for line in lines) < chars:
        if i % 7 == 6:
            lines.append("")
        elif i % 3 == 0:
            lines.append(f"{sentences[i % len(sentences)]} {english[i % len(english)]}")
        else:
            lines.append(english[i % len(english)])
        i += 1
    return "\n".join(lines)[:chars].rsplit("\n", 1)[0] + "\n"


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tokenizers import Tokenizer

    from attnserve.client import Client
    from attnserve.server.documents import DocumentSplitter, TokenBudget

    # the committed model directory, what make serve serves
    repo = linked_repo(args.work_dir / "documents-repo", MODEL, COMMITTED)
    chars = args.chars or (2_000 if args.quick else 10_000)
    repeats = args.repeats or (1 if args.quick else 5)
    text = document(chars)
    tokenizer = Tokenizer.from_file(str(repo / MODEL / "tokenizer.json"))
    prepared = DocumentSplitter(TokenBudget(tokenizer, 64)).split(text)
    sentences = list(prepared.sources)
    info = machine()
    header(f"documents: one {len(text):,}-character document ({len(sentences)} sentences)", info, args.threads)
    proc, address = start_server(repo, args.threads, 32)
    try:
        asyncio.run(wait_ready(address, proc))
        with Client(address, timeout=600.0) as client, ThreadPoolExecutor(args.clients) as pool:
            runs = {
                "document": lambda: client.translate(text, MODEL)[0].text,
                "sentences, one call each": lambda: [client.translate(s, MODEL)[0].text for s in sentences],
                f"sentences, {args.clients} calls in flight": lambda: list(
                    pool.map(lambda s: client.translate(s, MODEL)[0].text, sentences)
                ),
            }
            timings, values = interleaved(runs, repeats)
    finally:
        proc.terminate()
        proc.wait(30)
    translated, one_each, in_flight = values.values()
    # the same sentence translations, whether they came as one document or one request each
    assert prepared.document.join(one_each) == translated == prepared.document.join(in_flight)
    rates = {name: len(text) / t.median for name, t in timings.items()}
    base = rates["document"]
    rows = [[name, f"{t.median:.2f}", round(rates[name]), f"{base / rates[name]:.2f}x"] for name, t in timings.items()]
    print(table(["contender", "median s", "characters/s", "document / this"], rows))
    return {
        "machine": info,
        "characters": len(text),
        "sentences": len(sentences),
        "threads": args.threads,
        "clients": args.clients,
        "repeats": repeats,
        "timings": {name: t.to_json() for name, t in timings.items()},
        "characters_per_s": rates,
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = run(args)
    write_results(args.out, NAME, result, args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
