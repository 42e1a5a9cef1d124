"""``attnserve-client classify``: image files in as few requests as the server takes, each
within its default limits, one line (or JSON object) per file."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc

from attnserve.contract import images

from . import AttnServeError, Client, job_cli
from .cli_errors import fail

# A request's images: at most this many, encoded bytes and declared pixels (the server's defaults
# of --max-images-per-request 64, --max-message-bytes 64 MiB and --max-request-pixels 100 million,
# halved or less): a folder of phone photos (12 megapixels, 3-5 MB each) goes in several requests.
CLASSIFY_BATCH = 32
CLASSIFY_BYTES = 32 << 20
CLASSIFY_PIXELS = 100_000_000
_IMAGE_INDEX = re.compile(r"^images\[(\d+)\]")


def _image_batches(paths: list[str]) -> Iterator[tuple[list[str], list[bytes]]]:
    """The files read, in order, grouped within the bounds above (a file alone over one goes alone:
    the server says which limit it is over)."""
    names: list[str] = []
    data: list[bytes] = []
    pixels = 0
    for path in paths:
        image = Path(path).read_bytes()
        declared = images.declared_pixels(image)
        if names and (
            len(names) >= CLASSIFY_BATCH
            or sum(map(len, data)) + len(image) > CLASSIFY_BYTES
            or pixels + declared > CLASSIFY_PIXELS
        ):
            yield names, data
            names, data, pixels = [], [], 0
        names.append(path)
        data.append(image)
        pixels += declared
    if names:
        yield names, data


def _request(client: Client, args: argparse.Namespace, paths: list[str], data: list[bytes]) -> list:
    """One request's results, in order: a Classification per file, or the AttnServeError of a file
    the server refused ("images[3]: cannot decode"), named, the others sent again without it.
    Refused as over the server's --max-request-pixels (set below the default above), its halves
    are sent instead."""
    try:
        return client.classify(data, args.model, top_k=args.top_k)
    except AttnServeError as exc:
        if len(paths) > 1 and exc.code == grpc.StatusCode.INVALID_ARGUMENT and "--max-request-pixels" in exc.details:
            half = len(paths) // 2
            return _request(client, args, paths[:half], data[:half]) + _request(client, args, paths[half:], data[half:])
        index = _IMAGE_INDEX.match(exc.details)
        if index is None or int(index[1]) >= len(paths):
            raise
        i = int(index[1])
        refused = AttnServeError(exc.code, job_cli.printable(paths[i]) + exc.details[index.end() :])
        others = _request(client, args, paths[:i] + paths[i + 1 :], data[:i] + data[i + 1 :]) if len(paths) > 1 else []
        return [*others[:i], refused, *others[i:]]


def classify(client: Client, args: argparse.Namespace) -> int:
    """Every file classified that can be: one the server refuses is named on stderr (in --json,
    an ``error`` in its place) and the exit code is 1, the others' results printed all the same."""
    missing = next((path for path in args.images if not os.path.isfile(path)), None)
    if missing is not None:  # before any request: not after the first batches were sent
        reason = "a folder, not an image" if os.path.isdir(missing) else "no such file"
        return fail(args.json, f"{job_cli.printable(missing)}: {reason}")
    results = []
    batches = _image_batches(args.images)
    while True:
        try:
            paths, data = next(batches, ([], []))
        except OSError as exc:
            return fail(args.json, f"{job_cli.printable(exc.filename)}: {exc.strerror}")
        if not paths:
            break
        results += _request(client, args, paths, data)
    refused = [r for r in results if isinstance(r, AttnServeError)]
    if args.json:
        print(json.dumps([{"file": path, **_as_json(r)} for path, r in zip(args.images, results)], indent=2))
    for path, result in zip(args.images, results):
        if isinstance(result, AttnServeError):
            print(f"attnserve-client: error: {result}", file=sys.stderr)
        elif not args.json:
            labels = ", ".join(f"{lab.label} {lab.probability:.3f}" for lab in result.labels)
            print(f"{job_cli.printable(path)}: {labels}")
    return 1 if refused else 0


def _as_json(result) -> dict:
    if isinstance(result, AttnServeError):
        return {"error": {"code": result.code.name, "message": result.details}}
    return dataclasses.asdict(result)
