"""Print the pip requirements of an image stage, one per line, from ``pyproject.toml``.

``pyproject.toml`` stays the single source of truth: the runtime needs its ``dependencies``
plus the onnxruntime build chosen for the image (the package takes it from its ``cpu`` or
``cuda`` extra; ``onnxruntime-gpu`` is ~10x larger than the CPU build the CPU image wants),
and the build stage adds the ``export`` extra (torch, onnx) to build the model repository.
The attnserve wheel itself is then installed with ``--no-deps``.

    python3 docker/requirements.py --onnxruntime onnxruntime             # CPU runtime
    python3 docker/requirements.py --onnxruntime onnxruntime-gpu         # CUDA runtime
    python3 docker/requirements.py --onnxruntime onnxruntime --extra export   # build stage
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the images run 3.11+, the host tests may not
    tomllib = None

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
ORT = re.compile(r"^onnxruntime(-gpu)?\b")


def _load(path: Path) -> dict:
    if tomllib is not None:
        return tomllib.loads(path.read_text())
    import tomli  # pragma: no cover - 3.10 only

    return tomli.loads(path.read_text())


def requirements(onnxruntime: str, extras: list[str], pyproject: Path = PYPROJECT) -> list[str]:
    """``dependencies`` (+ each extra, recursively) without markers' onnxruntime choice, plus ``onnxruntime``."""
    project = _load(pyproject)["project"]
    optional = project.get("optional-dependencies", {})
    out: list[str] = []
    ort_spec = ""
    pending = [*project["dependencies"], *optional.get("cpu", [])]  # the version range of onnxruntime
    for extra in extras:
        if extra not in optional:
            raise SystemExit(f"requirements.py: no extra {extra!r} in {pyproject} (known: {', '.join(optional)})")
        pending.extend(optional[extra])
    while pending:
        req = pending.pop(0).split(";")[0].strip()  # markers are the ones being overridden here
        if m := re.match(r"^attnserve\[(.+)\]$", req):
            pending.extend(optional[m.group(1)])
            continue
        if ORT.match(req):
            ort_spec = ort_spec or req[len(ORT.match(req).group(0)) :]
            continue
        if req not in out:
            out.append(req)
    return [f"{onnxruntime}{ort_spec}", *out]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--onnxruntime", choices=("onnxruntime", "onnxruntime-gpu"), default="onnxruntime")
    parser.add_argument("--extra", action="append", default=[], help="an optional-dependencies group to add")
    parser.add_argument("--pyproject", type=Path, default=PYPROJECT)
    args = parser.parse_args(argv)
    print("\n".join(requirements(args.onnxruntime, args.extra, args.pyproject)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
