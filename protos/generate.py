"""Generate the gRPC stubs of ``protos/attnserve/{v1,triton}/*.proto`` with grpcio-tools.

``python -m attnserve.protos.generate`` rewrites the committed stubs in place;
``--out DIR`` writes them elsewhere (the freshness test compares the two).
protoc writes absolute imports (``from attnserve.v1 import x_pb2``), which would need
a top-level ``attnserve.v1`` package; they are rewritten to relative ones so the stubs
live inside ``attnserve.protos.attnserve.v1`` (and ``.triton``). The stubs are never
edited by hand.

The generator is the pinned grpcio-tools of the dev extra (1.76.0, protobuf 6.31.1 gencode):
the oldest gencode the runtime range ``protobuf>=6.31.1,<8`` accepts, so the same stubs
import under protobuf 6 (beside tritonclient) and 7.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path

log = logging.getLogger(__name__)

PROTO_ROOT = Path(__file__).resolve().parent  # holds attnserve/v1/*.proto
PACKAGE_DIRS = (Path("attnserve") / "v1", Path("attnserve") / "triton")
PACKAGE_DIR = PACKAGE_DIRS[0]
_ABSOLUTE_IMPORT = re.compile(r"^from attnserve\.(v1|triton) import (\w+_pb2)", re.MULTILINE)


class GenerateError(RuntimeError):
    """protoc failed; the message carries its output."""


def proto_files(root: Path = PROTO_ROOT) -> list[Path]:
    return sorted(p for package in PACKAGE_DIRS for p in (root / package).glob("*.proto"))


def generate(out: Path = PROTO_ROOT, root: Path = PROTO_ROOT) -> list[Path]:
    """Run protoc on every proto of :data:`PACKAGE_DIRS` under ``root`` into ``out``; return the files written."""
    from grpc_tools import protoc  # dev dependency: imported only when generating

    out = Path(out)
    for package in PACKAGE_DIRS:
        (out / package).mkdir(parents=True, exist_ok=True)
    protos = [str(p.relative_to(root)) for p in proto_files(root)]
    if not protos:
        raise GenerateError(f"no .proto files under {', '.join(str(root / p) for p in PACKAGE_DIRS)}")
    include = Path(protoc.__file__).parent / "_proto"  # the well-known types shipped with grpcio-tools
    args = ["protoc", f"-I{root}", f"-I{include}", f"--python_out={out}", f"--pyi_out={out}"]
    args += [f"--grpc_python_out={out}", *protos]
    if protoc.main(args) != 0:
        raise GenerateError(f"protoc failed on {', '.join(protos)} (see its output above)")
    written = []
    for path in sorted(p for package in PACKAGE_DIRS for p in (out / package).glob("*_pb2*.py*")):
        text = path.read_text()
        fixed = _ABSOLUTE_IMPORT.sub(r"from . import \2", text)
        if fixed != text:
            path.write_text(fixed)
        written.append(path)
    return written


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m attnserve.protos.generate", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=PROTO_ROOT, help="output root (default: next to the protos)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        written = generate(args.out)
    except GenerateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
