"""The argument parser of ``attnserve-client``: one vocabulary on every subcommand.

The global options (``--address``, ``--timeout``, ``--token``, ...) are accepted before the
subcommand and after it; the languages are ``--from``/``--to`` wherever a subcommand takes them,
with ``--source-language``/``--target-language`` as their long forms.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnserve.protos.attnserve.v1 import inference_pb2 as pb

from . import DEFAULT_ADDRESS, job_cli, unsigned_max


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


def _count(text: str) -> int:
    """``--retries``: an integer of 0 or more (-1 was taken, and meant 0)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer of 0 or more, got {text!r}")
    return value


# The server's ranges for the decoding floats (check_options in server/service/limits.py, which
# the client does not import: it pulls in the server), said as usage errors before the call.
MAX_LENGTH_PENALTY = 10.0  # limits.MAX_LENGTH_PENALTY


def _ranged(expected: str, accepts: Callable[[float], bool]) -> Callable[[str], float]:
    """An argparse type for a finite number that ``accepts``; else a usage error saying ``expected``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and accepts(value)):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


def _address(text: str) -> str:
    """``--address``: HOST:PORT, as gRPC dials it; a URL (``http://...``) is a usage error that says so."""
    if "://" in text:
        host = text.split("://", 1)[1].rstrip("/")
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, not a URL: {text!r} (gRPC's address: {host!r})")
    return text


def _seconds(text: str) -> float:
    """``--timeout``: a positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return value


def _pem_file(text: str) -> Path:
    """``--tls-*``: a file that is there, said at once as the option's, not as an OSError after parsing."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{'a folder, not a file' if path.is_dir() else 'no such file'}: {text!r}")
    return path


FILE_ARGUMENTS = ("images",)  # names of files: the system's bytes, whatever their encoding


def refuse_non_utf8(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """An argument sent to the server as text (a text, a model, a language, the token) that is not
    UTF-8 is a usage error naming it and the byte: protobuf cannot encode it. File names
    (``Path`` arguments and classify's images) stay the system's bytes."""
    for dest, value in vars(args).items():
        for text in value if isinstance(value, list) else [value]:
            if not isinstance(text, str) or dest in FILE_ARGUMENTS:
                continue
            raw = os.fsencode(text)
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                name = _argument_name(parser, args.command, dest)
                parser.error(f"argument {name}: not UTF-8: byte {exc.start} of {raw!r} is 0x{raw[exc.start]:02x}")


def _argument_name(parser: argparse.ArgumentParser, command: str, dest: str) -> str:
    """How the user wrote the argument ``dest`` of ``command`` (``--from``, ``texts``)."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for action in [*commands[command]._actions, *parser._actions]:
        if action.dest == dest:
            return action.option_strings[0] if action.option_strings else dest
    return dest


LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,3}(?:[_-][A-Za-z0-9]{2,8})*")  # de, fra, deu_Latn, pt-BR


def _language(text: str) -> str:
    """translate-file's ``--to``: a language code, as it goes into the written file's name
    (memo.de.docx); "" or "de/x" would name no file, or one in another folder."""
    if not LANGUAGE_CODE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected a language code (de, fra, deu_Latn, pt-BR), got {text!r}")
    return text


def _hint_dash_texts(parser: argparse.ArgumentParser) -> None:
    """argparse reads a text such as "-5°C" as an unknown option and then misses the texts:
    its error says where such a text goes."""
    error = parser.error

    def hinted(message: str):
        if "texts" in message:
            message += ' (a text that starts with "-" goes after "--": attnserve-client translate -- "-5°C")'
        error(message)

    parser.error = hinted  # type: ignore[method-assign]


def _global_options(parser: argparse.ArgumentParser, defaults: bool) -> None:
    """The options of every call. The top-level parser holds the defaults; each subcommand takes
    the same options with no default (``argparse.SUPPRESS``), so a value given after the
    subcommand replaces the one before it, and one not given there leaves it alone."""

    def default(value: Any) -> Any:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument(
        "--address",
        type=_address,
        default=default(DEFAULT_ADDRESS),
        help=f"server HOST:PORT (default {DEFAULT_ADDRESS})",
    )
    parser.add_argument("--json", action="store_true", default=default(False), help="machine-readable output")
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=default(None),
        help="deadline per call in seconds (default 30; translate-file 600; a year or more: none)",
    )
    parser.add_argument("--retries", type=_count, default=default(3), help="retries on UNAVAILABLE (default 3)")
    parser.add_argument(
        "--token",
        default=default(os.environ.get("ATTNSERVE_TOKEN")),
        help="bearer token for a server that requires one (default: env ATTNSERVE_TOKEN)",
    )
    parser.add_argument("--tls-ca", type=_pem_file, default=default(None), help="PEM CA certificate: connect with TLS")
    parser.add_argument("--tls-cert", type=_pem_file, default=default(None), help="PEM client certificate (mutual TLS)")
    parser.add_argument("--tls-key", type=_pem_file, default=default(None), help="PEM key of --tls-cert")


def add_languages(parser: argparse.ArgumentParser, source_default: str, target_required: bool) -> None:
    """``--from``/``--to`` (long forms ``--source-language``/``--target-language``), the same
    on every subcommand that takes languages."""
    parser.add_argument(
        "--from",
        "--source-language",
        dest="source_language",
        default=source_default,
        help=f"source language: the model's code or ISO 639-1 (default: {source_default or 'the model picks'})",
    )
    parser.add_argument(
        "--to",
        "--target-language",
        dest="target_language",
        required=target_required,
        type=_language if target_required else str,
        default="",
        help="target language: the model's code (deu_Latn, fra) or ISO 639-1 (de); without --model it picks the model",
    )


def _add_translate_parser(sub, common: argparse.ArgumentParser) -> None:
    """``translate``: texts, their format, decoding options, languages, glossary, and what to print."""
    tr = sub.add_parser("translate", parents=[common], help="translate one or more texts")
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
    tr.add_argument(
        "--length-penalty",
        type=_ranged(
            f"a number from -{MAX_LENGTH_PENALTY:g} to {MAX_LENGTH_PENALTY:g}", lambda v: abs(v) <= MAX_LENGTH_PENALTY
        ),
        default=None,
    )
    tr.add_argument("--max-new-tokens", type=_unsigned(pb.DecodingOptions, "max_new_tokens"), default=0)
    tr.add_argument(
        "--temperature", type=_ranged("a number of 0 or more", lambda v: v >= 0), default=0.0, help="> 0 samples"
    )
    tr.add_argument("--top-k", type=_unsigned(pb.DecodingOptions, "top_k"), default=0)
    tr.add_argument("--top-p", type=_ranged("a number above 0, at most 1", lambda v: 0 < v <= 1), default=None)
    tr.add_argument("--seed", type=_unsigned(pb.DecodingOptions, "seed"), default=None)
    add_languages(tr, source_default="", target_required=False)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnserve-client", description="Talk to an attnserve server.")
    _global_options(parser, defaults=True)
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, defaults=False)
    sub = parser.add_subparsers(dest="command", required=True)

    _add_translate_parser(sub, common)
    tf = sub.add_parser(
        "translate-file",
        parents=[common],
        help="translate a file (.txt .md .html .srt .docx .pptx .xlsx .odt .odp .epub .pdf .xlf .xliff) "
        "keeping its layout",
    )
    tf.add_argument("file", type=Path, help="the file to translate; its extension picks the format")
    add_languages(tf, source_default="auto", target_required=True)
    tf.add_argument("--out", type=Path, default=None, help="where to write it (default: NAME.<to>.EXT beside it)")
    tf.add_argument("--model", default="", help="model name (default: the one the languages pick)")
    tf.add_argument("--quiet", action="store_true", help="no progress bar")
    tf.add_argument("--job", action="store_true", help="as a job on the server: resumable, re-attach with 'job ID'")
    job_cli.add_parser(sub, parents=[common])

    cl = sub.add_parser("classify", parents=[common], help="classify image files")
    cl.add_argument("images", nargs="+", help="image files (PNG, JPEG, ...)")
    cl.add_argument("--model", default="", help="model name (default: the only classification model)")
    cl.add_argument("--top-k", type=_unsigned(pb.ClassifyRequest, "top_k"), default=3)

    sub.add_parser("models", parents=[common], help="list the served models and the language pairs they translate")
    sub.add_parser(
        "pairs", parents=[common], help="list the language pairs translated, directly and through the pivot language"
    )
    he = sub.add_parser("health", parents=[common], help="health of the server or of one model (exit 1 unless SERVING)")
    he.add_argument("service", nargs="?", default="", help="model name ('' = the whole server)")
    return parser
