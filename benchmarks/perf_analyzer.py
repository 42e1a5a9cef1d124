"""Triton's perf_analyzer: where it comes from, whether it runs here, and one measurement with it.

perf_analyzer is a C++ binary. The last tritonclient wheel that ships it and runs on
Debian 12's glibc is 2.50.0 (later ones need a newer glibc; its own Python package pins
protobuf < 5, so it is never installed: only the binary is taken out of the wheel).
It links ``libb64.so.0d`` (Debian's ``libb64-0d``, installed by ``.ci/run``) and
``libcudart.so.12`` even on a CPU-only machine (the ``nvidia-cuda-runtime-cu12`` wheel of
the bench extra; put on ``LD_LIBRARY_PATH`` by :func:`environment`).

    python -m attnserve.benchmarks.perf_analyzer install   # into the venv's bin/ (make does this)
    python -m attnserve.benchmarks.perf_analyzer check     # exit 0 when it runs, else the reason
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

WHEEL = "tritonclient==2.50.0"
MEMBER = "tritonclient-2.50.0.data/data/bin/perf_analyzer"
ENV = "ATTNSERVE_PERF_ANALYZER"


class PerfAnalyzerError(RuntimeError):
    """perf_analyzer is missing, cannot start here, or a run failed (the message says which)."""


def default_path() -> Path:
    return Path(sys.prefix) / "bin" / "perf_analyzer"


def locate() -> Path | None:
    """``$ATTNSERVE_PERF_ANALYZER``, else the venv's bin/, else PATH."""
    for candidate in (os.environ.get(ENV), default_path(), shutil.which("perf_analyzer")):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def install(dest: Path | None = None) -> Path:
    """Take perf_analyzer out of the tritonclient 2.50.0 manylinux wheel (pip download, no install)."""
    dest = dest or default_path()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", tmp]
        cmd += ["--platform", "manylinux1_x86_64", "--python-version", "3", WHEEL]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        wheels = list(Path(tmp).glob("tritonclient-*.whl"))
        if done.returncode != 0 or not wheels:
            raise PerfAnalyzerError(f"pip download {WHEEL} failed: {done.stderr.strip()[-500:]}")
        with zipfile.ZipFile(wheels[0]) as wheel:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(wheel.read(MEMBER))
    dest.chmod(0o755)
    return dest


def environment() -> dict[str, str]:
    """os.environ with libcudart.so.12 of the nvidia-cuda-runtime-cu12 wheel on LD_LIBRARY_PATH."""
    env = dict(os.environ)
    try:
        import nvidia.cuda_runtime as cuda_runtime

        lib = Path(next(iter(cuda_runtime.__path__))) / "lib"
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(lib), env.get("LD_LIBRARY_PATH", "")) if p)
    except ImportError:
        pass
    return env


def check() -> Path:
    """The binary, once it has started here (``--version``); else PerfAnalyzerError with the reason."""
    path = locate()
    if path is None:
        raise PerfAnalyzerError(
            f"perf_analyzer not found (${ENV}, {default_path()}, PATH): "
            "`python -m attnserve.benchmarks.perf_analyzer install` takes it out of the tritonclient 2.50.0 wheel"
        )
    try:
        done = subprocess.run([str(path), "--version"], capture_output=True, text=True, env=environment(), timeout=60)
    except OSError as exc:
        raise PerfAnalyzerError(f"{path} does not start: {exc}") from None
    if done.returncode != 0:
        missing = [line.strip() for line in (done.stderr + done.stdout).splitlines() if "error while loading" in line]
        hint = " (apt-get install libb64-0d; pip install nvidia-cuda-runtime-cu12)" if missing else ""
        raise PerfAnalyzerError(f"{path} does not run here: {(missing or [done.stderr.strip()])[0]}{hint}")
    return path


@dataclass(frozen=True)
class Row:
    """One concurrency level of a perf_analyzer report (its -f CSV)."""

    concurrency: int
    throughput: float  # inferences/s
    p50_ms: float
    p99_ms: float


def run(
    model: str,
    url: str,
    protocol: str,
    concurrency: tuple[int, int],
    input_data: Path,
    *,
    streaming: bool = False,
    requests_per_window: int = 20,
    extra: list[str] | None = None,
    timeout: float = 600.0,
) -> tuple[list[Row], str]:
    """perf_analyzer at ``concurrency`` (first, last) with the data of ``input_data``; (rows, its output).

    Count windows with a tolerance so wide that three windows always count as stable: on a
    shared machine the default 10% would retry for minutes; the spread shows in p50/p99.
    """
    path = check()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.csv"
        cmd = [str(path), "-m", model, "-u", url, "-i", protocol, "--input-data", str(input_data)]
        cmd += ["--concurrency-range", f"{concurrency[0]}:{concurrency[1]}", "-f", str(report)]
        cmd += ["--measurement-mode", "count_windows", "--measurement-request-count", str(requests_per_window)]
        cmd += ["-s", "1000", "-r", "3", "--percentile", "99"]
        cmd += (["--streaming"] if streaming else []) + (extra or [])
        done = subprocess.run(cmd, capture_output=True, text=True, env=environment(), timeout=timeout)
        output = done.stdout + done.stderr
        if done.returncode != 0:
            raise PerfAnalyzerError(f"perf_analyzer exited with {done.returncode}:\n{output[-3000:]}")
        with report.open() as f:
            rows = [
                Row(
                    int(r["Concurrency"]),
                    float(r["Inferences/Second"]),
                    float(r["p50 latency"]) / 1e3,
                    float(r["p99 latency"]) / 1e3,
                )
                for r in csv.DictReader(f)
            ]
    return sorted(rows, key=lambda r: r.concurrency), output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attnserve.benchmarks.perf_analyzer", description=__doc__.split("\n")[0]
    )
    parser.add_argument("action", choices=["install", "check"])
    args = parser.parse_args(argv)
    try:
        path = install() if args.action == "install" else check()
    except (PerfAnalyzerError, OSError, subprocess.SubprocessError) as exc:
        print(f"perf_analyzer: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
