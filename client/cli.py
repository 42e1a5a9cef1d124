"""``attnserve-client``: translate, classify, list models and check health from a shell.

    attnserve-client translate "Monday, March 3, 2025"
    attnserve-client translate --stream "Monday, March 3, 2025"
    attnserve-client translate --format html - < page.html
    attnserve-client translate --glossary terms.tsv --keep Weblate "Monday with Weblate"
    attnserve-client translate-file examples/memo.docx --to de
    attnserve-client translate --alignments --attention-map map.png "Monday, March 3, 2025"
    attnserve-client classify digit.png
    attnserve-client models
    attnserve-client pairs
    attnserve-client health

``--json`` prints machine-readable output. Exit codes: 0 ok, 1 the call failed (or
health is not SERVING), 2 usage.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnserve.protos.attnserve.v1 import inference_pb2 as pb

from . import DEFAULT_ADDRESS, AttnServeError, Client, job_cli, read_glossary, unsigned_max
from .attention_map import draw_attention_map


def _unsigned(message: Any, field: str) -> Callable[[str], int]:
    """An argparse type for an option sent as ``message``'s unsigned ``field``: out of its range
    is a usage error naming the option and the range, not protobuf's traceback."""
    limit = unsigned_max(message, field)
    assert limit is not None, f"{field} is not unsigned"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not 0 <= value <= limit:
            raise argparse.ArgumentTypeError(f"expected an integer from 0 to {limit}, got {text!r}")
        return value

    return parse


def _hint_dash_texts(parser: argparse.ArgumentParser) -> None:
    """argparse reads a text such as "-5°C" as an unknown option and then misses the texts:
    its error says where such a text goes."""
    error = parser.error

    def hinted(message: str):
        if "texts" in message:
            message += ' (a text that starts with "-" goes after "--": attnserve-client translate -- "-5°C")'
        error(message)

    parser.error = hinted  # type: ignore[method-assign]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnserve-client", description="Talk to an attnserve server.")
    parser.add_argument("--address", default=DEFAULT_ADDRESS, help=f"server HOST:PORT (default {DEFAULT_ADDRESS})")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--timeout", type=float, default=None, help="deadline per call in seconds (default 30; translate-file 600)"
    )
    parser.add_argument("--retries", type=int, default=3, help="retries on UNAVAILABLE (default 3)")
    parser.add_argument(
        "--token",
        default=os.environ.get("ATTNSERVE_TOKEN"),
        help="bearer token for a server that requires one (default: env ATTNSERVE_TOKEN)",
    )
    parser.add_argument("--tls-ca", type=Path, default=None, help="PEM CA certificate: connect with TLS")
    parser.add_argument("--tls-cert", type=Path, default=None, help="PEM client certificate (mutual TLS)")
    parser.add_argument("--tls-key", type=Path, default=None, help="PEM key of --tls-cert")
    sub = parser.add_subparsers(dest="command", required=True)

    tr = sub.add_parser("translate", help="translate one or more texts")
    tr.add_argument("texts", nargs="+", help="texts to translate (documents: lines and sentences); - reads stdin")
    _hint_dash_texts(tr)
    tr.add_argument(
        "--format",
        choices=("text", "html", "markdown"),
        default="text",
        help="html: keep tags, attributes and entities, translate the text; markdown: keep its structure, "
        "code and link targets (default: text)",
    )
    tr.add_argument("--model", default="", help="model name (default: the only translation model)")
    tr.add_argument("--stream", action="store_true", help="print text as it is generated (one text)")
    tr.add_argument("--beam-size", type=_unsigned(pb.DecodingOptions, "beam_size"), default=1)
    tr.add_argument("--num-hypotheses", type=_unsigned(pb.DecodingOptions, "num_hypotheses"), default=1)
    tr.add_argument("--length-penalty", type=float, default=None)
    tr.add_argument("--max-new-tokens", type=_unsigned(pb.DecodingOptions, "max_new_tokens"), default=0)
    tr.add_argument("--temperature", type=float, default=0.0, help="> 0 samples")
    tr.add_argument("--top-k", type=_unsigned(pb.DecodingOptions, "top_k"), default=0)
    tr.add_argument("--top-p", type=float, default=None)
    tr.add_argument("--seed", type=_unsigned(pb.DecodingOptions, "seed"), default=None)
    tr.add_argument("--source-language", default="", help="source language: the model's code or ISO 639-1")
    tr.add_argument(
        "--target-language",
        default="",
        help="target language: the model's code (deu_Latn, fra) or ISO 639-1 (de); without --model it picks the model",
    )
    tr.add_argument("--target-prefix", default="", help="text every translation starts with")
    tr.add_argument(
        "--glossary",
        type=Path,
        default=None,
        metavar="FILE.tsv",
        help="terms spelled verbatim in the translation: lines 'source<TAB>target', or 'source' alone to keep it",
    )
    tr.add_argument("--keep", action="append", default=[], metavar="TERM", help="a term left as it is (repeatable)")
    tr.add_argument("--scores", action="store_true", help="print scores and the quality score")
    tr.add_argument(
        "--quality", action="store_true", help="print each translation's quality score (0..1: how likely it is right)"
    )
    tr.add_argument("--token-ids", action="store_true", help="print token ids")
    tr.add_argument(
        "--alignments", action="store_true", help="print each sentence's word alignment, i-j pairs as fast_align"
    )
    tr.add_argument(
        "--attention-map",
        type=Path,
        default=None,
        metavar="FILE.png",
        help="draw the cross-attention of the first sentence (source words x target words) as a PNG",
    )

    tf = sub.add_parser(
        "translate-file",
        help="translate a file (.txt .md .html .srt .docx .pptx .odt .odp .epub .pdf) keeping its layout",
    )
    tf.add_argument("file", type=Path, help="the file to translate; its extension picks the format")
    tf.add_argument("--to", required=True, dest="target_language", help="target language (ISO 639-1 or the model's)")
    tf.add_argument("--from", default="auto", dest="source_language", help="source language (default: auto)")
    tf.add_argument("--out", type=Path, default=None, help="where to write it (default: NAME.<to>.EXT beside it)")
    tf.add_argument("--model", default="", help="model name (default: the one the languages pick)")
    tf.add_argument("--quiet", action="store_true", help="no progress bar")
    tf.add_argument("--job", action="store_true", help="as a job on the server: resumable, re-attach with 'job ID'")
    job_cli.add_parser(sub)

    cl = sub.add_parser("classify", help="classify image files")
    cl.add_argument("images", nargs="+", help="image files (PNG, JPEG, ...)")
    cl.add_argument("--model", default="", help="model name (default: the only classification model)")
    cl.add_argument("--top-k", type=_unsigned(pb.ClassifyRequest, "top_k"), default=3)

    sub.add_parser("models", help="list the served models and the language pairs they translate")
    sub.add_parser("pairs", help="list the language pairs translated, directly and through the pivot language")
    he = sub.add_parser("health", help="health of the server or of one model (exit 1 unless SERVING)")
    he.add_argument("service", nargs="?", default="", help="model name ('' = the whole server)")
    return parser


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=lambda o: dataclasses.asdict(o)))


def _translate(client: Client, args: argparse.Namespace) -> int:
    options = dict(
        beam_size=args.beam_size,
        num_hypotheses=args.num_hypotheses,
        length_penalty=args.length_penalty,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        return_scores=args.scores,
        return_token_ids=args.token_ids,
        source_language=args.source_language,
        target_language=args.target_language,
        target_prefix=args.target_prefix,
        format=args.format,
    )
    if args.glossary is not None:
        try:
            options["glossary"] = read_glossary(args.glossary)
        except ValueError as exc:
            print(f"attnserve-client: error: --glossary {exc}", file=sys.stderr)
            return 2
    options["keep"] = args.keep
    aligned = args.alignments or args.attention_map is not None
    if "-" in args.texts:
        stdin = sys.stdin.read()
        args.texts = [stdin if text == "-" else text for text in args.texts]
    if args.stream:
        if len(args.texts) != 1:
            print("attnserve-client: error: --stream takes one text", file=sys.stderr)
            return 2
        if aligned:
            print("attnserve-client: error: --alignments and --attention-map need whole translations, not --stream",
                  file=sys.stderr)  # fmt: skip
            return 2
        chunks = []
        for chunk in client.translate_stream(args.texts[0], args.model, **options):
            chunks.append(chunk)
            if args.json:
                print(json.dumps(dataclasses.asdict(chunk)), flush=True)
            else:
                print(chunk.delta, end="", flush=True)
        if not args.json:
            print(f"\n[{chunks[-1].finish_reason if chunks else '?'}]" if sys.stdout.isatty() else "")
        return 0
    results = client.translate(
        args.texts, args.model, alignments=aligned, quality=args.quality or args.scores, **options
    )
    if args.attention_map is not None:
        sentences = results[0].hypotheses[0].alignments
        if not sentences:
            print("attnserve-client: error: the first text has no sentence to draw", file=sys.stderr)
            return 1
        try:
            draw_attention_map(sentences[0], args.attention_map)
        except ValueError as exc:
            print(f"attnserve-client: error: --attention-map: {exc}", file=sys.stderr)
            return 1
    if args.json:
        _print_json([dataclasses.asdict(r) | {"text": r.text} for r in results])
        return 0
    limit = f"--max-new-tokens {args.max_new_tokens}" if args.max_new_tokens else "the model's max target length"
    for result in results:
        for i, hyp in enumerate(result.hypotheses):
            extra = []
            if hyp.score is not None:
                extra.append(f"score={hyp.score:.4f} logprob={hyp.logprob:.4f}")
            if args.token_ids:
                extra.append(f"ids={hyp.token_ids}")
            notes = [" ".join(extra)] if extra else []
            if hyp.finish_reason == "length":  # the text stops short: say so, and at which limit
                notes.append(f"cut at {limit}")
            if i == 0 and result.quality is not None:
                notes.append(_quality_note(result.quality))
            prefix = f"[{i}] " if len(result.hypotheses) > 1 else ""
            print(prefix + hyp.text + (f"  ({'; '.join(notes)})" if notes else ""))
            if args.alignments:
                for alignment in hyp.alignments:  # one line per sentence, as fast_align writes them
                    print(alignment.pharaoh())
    return 0


def _quality_note(quality) -> str:
    note = f"quality {quality.score:.2f}"
    if quality.low:
        return note + ", below the server's --min-quality"
    return note + ", likely wrong" if quality.likely_wrong else note


class ProgressBar:
    """``[#####.....] 120/240 sentences`` on stderr, redrawn in place; silent when stderr is not a
    terminal or ``quiet`` (tqdm is not a dependency of the client)."""

    WIDTH = 30

    def __init__(self, label: str, quiet: bool = False) -> None:
        self.label, self.on = label, not quiet and sys.stderr.isatty()

    def __call__(self, done: int, total: int) -> None:
        if not self.on:
            return
        filled = self.WIDTH * done // total if total else self.WIDTH
        bar = "#" * filled + "." * (self.WIDTH - filled)
        print(f"\r{self.label} [{bar}] {done}/{total} sentences", end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.on:
            print(file=sys.stderr)


def _translate_file(client: Client, args: argparse.Namespace) -> int:
    if not args.file.is_file():
        print(f"attnserve-client: error: {args.file}: no such file", file=sys.stderr)
        return 2
    out = args.out or args.file.with_name(f"{args.file.stem}.{args.target_language}{args.file.suffix}")
    if args.job:
        return job_cli.submit(client, args, out)
    bar = ProgressBar(args.file.name, args.quiet or args.json)
    try:
        done = client.translate_file(
            args.file, args.target_language, args.source_language, args.model, progress=bar, timeout=args.timeout
        )
    finally:
        bar.close()
    out.write_bytes(done.content)
    if args.json:
        _print_json(dataclasses.asdict(done) | {"content": None, "out": str(out)})
    else:
        print(f"{out} ({done.characters:,} characters, {done.sentences:,} sentences, {done.model})")
    return 0


def _classify(client: Client, args: argparse.Namespace) -> int:
    try:
        images = [open(path, "rb").read() for path in args.images]  # noqa: SIM115 - tiny files, read at once
    except OSError as exc:
        print(f"attnserve-client: error: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    results = client.classify(images, args.model, top_k=args.top_k)
    if args.json:
        _print_json([{"file": path, **dataclasses.asdict(r)} for path, r in zip(args.images, results)])
        return 0
    for path, result in zip(args.images, results):
        labels = ", ".join(f"{lab.label} {lab.probability:.3f}" for lab in result.labels)
        print(f"{path}: {labels}")
    return 0


def _models(client: Client, args: argparse.Namespace) -> int:
    models = client.list_models()
    if args.json:
        _print_json(models)
        return 0
    for m in models:
        state = "ready" if m.ready else f"NOT READY: {m.error}"
        parts = [m.kind, m.provider, m.precision, f"attention {m.attention}"] if m.ready else [m.kind]
        detail = ", ".join(p for p in parts if p)  # no provider until loaded
        print(f"{m.name}  ({detail})  {state}")
        if m.domain:
            print(f"  domain: {m.domain}")
        if m.source_languages or m.target_languages:
            sources, targets = (", ".join(codes) or "-" for codes in (m.source_languages, m.target_languages))
            print(f"  languages: {sources} -> {targets}")
        if m.ready and not m.loaded:
            print("  not loaded: loads on its first request")
    pairs = client.language_pairs()
    if pairs:
        print("language pairs:")
        _print_pairs(pairs)
    return 0


def _print_pairs(pairs: list) -> None:
    for p in pairs:
        via = f"  (through {p.pivot_language}: {' then '.join(p.models)})" if p.pivot_language else f"  ({p.models[0]})"
        print(f"  {p.source} -> {p.target}{via}")


def _pairs(client: Client, args: argparse.Namespace) -> int:
    pairs = client.language_pairs()
    if args.json:
        _print_json(pairs)
    else:
        _print_pairs(pairs)
    return 0


def _health(client: Client, args: argparse.Namespace) -> int:
    status = client.health(args.service)
    if args.json:
        _print_json({"service": args.service, "status": status})
    else:
        print(status)
    return 0 if status == "SERVING" else 1


COMMANDS = {
    "translate": _translate,
    "translate-file": _translate_file,
    "classify": _classify,
    "models": _models,
    "pairs": _pairs,
    "health": _health,
    "job": job_cli.run,
}
DEFAULT_TIMEOUT_S = {"translate-file": 600.0}  # a file takes longer than a call of a few texts


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.timeout is None:
        args.timeout = DEFAULT_TIMEOUT_S.get(args.command, 30.0)

    try:
        tls = {
            key: path.read_bytes()
            for key, path in (
                ("root_certificates", args.tls_ca),
                ("certificate_chain", args.tls_cert),
                ("private_key", args.tls_key),
            )
            if path is not None
        }
        with Client(args.address, timeout=args.timeout, retries=args.retries, token=args.token, **tls) as client:
            return COMMANDS[args.command](client, args)
    except OSError as exc:
        print(f"attnserve-client: error: {exc}", file=sys.stderr)
        return 1
    except AttnServeError as exc:
        if args.json:
            print(json.dumps({"error": {"code": exc.code.name, "message": exc.details}}))
        print(f"attnserve-client: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
