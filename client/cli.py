"""``attnserve-client``: translate, classify, list models and check health from a shell.

    attnserve-client translate "Monday, March 3, 2025"
    attnserve-client translate --stream "Monday, March 3, 2025"
    attnserve-client translate --format html - < page.html
    attnserve-client translate --glossary terms.tsv --keep Weblate "Monday with Weblate"
    attnserve-client translate --to de --from en "Monday, March 3, 2025"
    attnserve-client translate-file examples/memo.docx --to de
    attnserve-client translate --alignments --attention-map map.png "Monday, March 3, 2025"
    attnserve-client classify digit.png
    attnserve-client models
    attnserve-client pairs
    attnserve-client health

``--json`` prints machine-readable output; the global options (``--address``, ``--timeout``,
``--json``, ``--token``, ...) go before or after the subcommand. Exit codes: 0 ok, 1 the call failed (or
health is not SERVING), 2 usage, 130 Ctrl+C, 141 a closed pipe (``| head``).
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import dataclasses
import json
import os
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import grpc

from . import AttnServeError, Client, classify_cli, job_cli, read_glossary
from .attention_map import draw_attention_map
from .cli_errors import fail
from .cli_parser import build_parser, refuse_non_utf8


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=lambda o: dataclasses.asdict(o)))


def _translate(client: Client, args: argparse.Namespace) -> int:
    options = _translate_options(args)
    if args.glossary is not None:
        try:
            options["glossary"] = read_glossary(args.glossary)
        except ValueError as exc:
            return fail(args.json, f"--glossary {exc}")
        except OSError as exc:  # a usage error naming the option, not '[Errno 2] ...', exit 1
            return fail(args.json, f"--glossary {job_cli.printable(args.glossary)}: {exc.strerror}")
    if args.attention_map is not None and (unwritable := _unwritable(args.attention_map)):  # before the call
        return fail(args.json, f"--attention-map {job_cli.printable(args.attention_map)}: {unwritable}")
    aligned = args.alignments or args.attention_map is not None
    if "-" in args.texts:
        try:
            stdin = _read_stdin()
        except ValueError as exc:
            return fail(args.json, str(exc))
        if not stdin.strip():  # `translate - < /dev/null`: a script's empty input, not a blank translation
            return fail(args.json, "stdin is empty: nothing to translate")
        args.texts = [stdin if text == "-" else text for text in args.texts]
    blank = next((i for i, text in enumerate(args.texts, 1) if not text.strip()), None)
    if blank is not None:  # `translate "$UNSET"`, as stdin above
        return fail(args.json, f"argument texts: text {blank} is empty: nothing to translate")
    if args.stream:
        return _translate_stream(client, args, options, aligned)
    results = client.translate(
        args.texts, args.model, alignments=aligned, quality=args.quality or args.scores, **options
    )
    if args.attention_map is not None:
        sentences = results[0].hypotheses[0].alignments
        if not sentences:
            return fail(args.json, "the first text has no sentence to draw", 1)
        try:
            draw_attention_map(sentences[0], args.attention_map)
        except ValueError as exc:
            return fail(args.json, f"--attention-map: {exc}", 1)
    if args.json:
        _print_json([dataclasses.asdict(r) | {"text": r.text} for r in results])
    else:
        _print_translations(results, args)
    return 0


def _read_stdin() -> str:
    """stdin's text: UTF-8, or UTF-16 after its byte-order mark (Notepad's "Unicode", PowerShell's
    redirection); a ValueError naming the byte for other bytes. Its last line's end is print's:
    not translated into a blank line."""
    data = (
        sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode(errors="surrogateescape")
    )
    encoding = "utf-16" if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else "utf-8-sig"
    try:
        return data.decode(encoding).removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError as exc:
        said = "UTF-16 (its byte-order mark) but" if encoding == "utf-16" else "not UTF-8:"
        raise ValueError(f"stdin is {said} byte {exc.start} is 0x{data[exc.start]:02x}") from None


def _translate_options(args: argparse.Namespace) -> dict[str, Any]:
    """The translate call's keyword arguments, from the flags."""
    return dict(
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
        keep=args.keep,
    )


def _translate_stream(client: Client, args: argparse.Namespace, options: dict[str, Any], aligned: bool) -> int:
    """``--stream``: one text, its translation printed as it arrives (JSON: one chunk a line)."""
    if len(args.texts) != 1:
        return fail(args.json, "--stream takes one text")
    if aligned:
        return fail(args.json, "--alignments and --attention-map need whole translations, not --stream")
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


def _print_translations(results: list, args: argparse.Namespace) -> None:
    """Each hypothesis on a line, with its scores, ids, a cut by the length limit and the quality
    as the flags ask; ``--alignments``: a Pharaoh line per sentence after it."""
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
        # a total of 0 with sentences done: the file is still being split, its total not known yet
        filled = self.WIDTH * done // total if total else (0 if done else self.WIDTH)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        of = total if total or not done else "?"
        print(f"\r{self.label} [{bar}] {done}/{of} sentences", end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.on:
            print(file=sys.stderr)


def _translate_file(client: Client, args: argparse.Namespace) -> int:
    if not args.file.is_file():
        what = "a folder, not a file" if args.file.is_dir() else "no such file"
        return fail(args.json, f"{job_cli.printable(args.file)}: {what}")
    out = args.out or args.file.with_name(f"{args.file.stem}.{args.target_language}{args.file.suffix}")
    unwritable = _unwritable(out)
    if args.out is None and out.exists():  # a name the client chose never replaces a file the user has
        unwritable = "exists; not overwritten: name the file to write with --out (--out FILE, this one to replace it)"
    if unwritable:  # said before the translation, not after minutes of it
        return fail(args.json, f"{job_cli.printable(out)}: {unwritable}")
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
        print(f"{job_cli.printable(out)} ({done.characters:,} characters, {done.sentences:,} sentences, {done.model})")
    return 0


def _unwritable(out: Path) -> str:
    """Why the translation could not be written to ``out`` ("" if it can)."""
    folder = out.parent
    try:  # a name too long for the file system raises (ENAMETOOLONG) where it would be False
        if out.is_dir():
            return "a folder, not a file"
        if not folder.is_dir():
            return f"no such folder: {job_cli.printable(folder)}"
        if not os.access(out if out.exists() else folder, os.W_OK):
            return "not writable" if out.exists() else f"cannot write in {job_cli.printable(folder)}"
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""


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
    "classify": classify_cli.classify,
    "models": _models,
    "pairs": _pairs,
    "health": _health,
    "job": job_cli.run,
}
DEFAULT_TIMEOUT_S = {"translate-file": 600.0}  # a file takes longer than a call of a few texts


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    refuse_non_utf8(parser, args)
    if (args.tls_cert is None) != (args.tls_key is None):  # gRPC aborts the process on half a pair
        parser.error("--tls-cert and --tls-key go together (mutual TLS): give both")
    if args.timeout is None:
        args.timeout = DEFAULT_TIMEOUT_S.get(args.command, 30.0)
    on_main_thread = threading.current_thread() is threading.main_thread()  # signal handlers live there only
    previous = signal.signal(signal.SIGINT, lambda *_: _interrupted(args)) if on_main_thread else None
    try:
        return _run(args)
    finally:
        if previous is not None:  # None: a handler not set from Python, not one to put back
            signal.signal(signal.SIGINT, previous)


def _interrupted(args: argparse.Namespace) -> None:
    """Ctrl+C: one line and exit 130 (128 + SIGINT), at once. Not a KeyboardInterrupt: raised
    inside gRPC's call bookkeeping, it can leave a call the channel then waits for forever as it
    closes. A job followed goes on on the server: the line says how to follow it again."""
    said = "interrupted"
    if getattr(args, "following", None):
        said += f"; job {args.following} goes on on the server: attnserve-client job {args.following} follows it"
    with contextlib.suppress(Exception):  # a print the signal cut short cannot be flushed again
        sys.stdout.flush()
    os.write(2, (("\n" if sys.stderr.isatty() else "") + f"attnserve-client: {said}\n").encode())  # after ^C
    os._exit(130)


def _run(args: argparse.Namespace) -> int:
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
            code = COMMANDS[args.command](client, args)
        sys.stdout.flush()  # a pipe its reader closed shows here, not as a traceback at exit
        return code
    except BrokenPipeError:  # `attnserve-client models | head -1`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 141  # 128 + SIGPIPE, as a Unix tool the pipe ended says
    except OSError as exc:
        return fail(args.json, str(exc), 1)
    except AttnServeError as exc:
        return fail(args.json, exc.details, 1, code=exc.code.name, said=str(exc), hint=_hint(args, exc))


_TEXT_TOO_LONG = re.compile(r"text \d+ is [\d,]+ characters; this server takes at most [\d,]+ per text")
_SUFFIXES = {"text": ".txt", "html": ".html", "markdown": ".md"}


def _hint(args: argparse.Namespace, exc: AttnServeError) -> str:
    """A text over the server's --max-text-chars (a document piped in): translate-file takes it
    whole, split on the server, up to its --max-file-chars."""
    if args.command != "translate" or exc.code != grpc.StatusCode.INVALID_ARGUMENT:
        return ""
    if not _TEXT_TOO_LONG.match(exc.details):
        return ""
    name = "FILE" + _SUFFIXES.get(args.format, ".txt")
    to = f"--to {args.target_language}" if args.target_language else "--to LANG"
    return (
        f"translate-file takes a document longer than that (up to the server's --max-file-chars): save the "
        f"text as {name} and run attnserve-client translate-file {name} {to}"
    )


if __name__ == "__main__":
    sys.exit(main())
