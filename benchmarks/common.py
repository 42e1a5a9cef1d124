"""What every benchmark shares: interleaved timing, the machine's state, the result files.

Every comparison runs its contenders in one process and one run, taking turns one
repetition each (round-robin), so load from other processes on a shared machine lands
on all of them alike; each timed repetition comes right after an untimed one of the same
contender (warm caches for everyone, see :func:`interleaved`); results are medians and are
read as ratios.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnserve.contract.machine import cpu_summary, isa_flags

DEFAULT_OUT = Path("benchmarks/results")
DEFAULT_WORK = Path("/tmp/attnserve-bench")


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="tiny settings: a smoke test in seconds, not a result")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the JSON and PNG go")
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK, help="exported models (reused when present)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of every engine (same for all)")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds per contender (after one warm-up)")
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG")


def preset_name(kind: str) -> Callable[[str], str]:
    """An argparse ``type``: the name of a model preset of ``kind`` ("translation" or "vit"); any
    other name is a usage error that lists the known ones."""

    def check(name: str) -> str:
        from attnserve.models.presets import PRESETS
        from attnserve.models.vit import ViTConfig

        names = sorted(n for n, config in PRESETS.items() if isinstance(config, ViTConfig) == (kind == "vit"))
        if name not in names:
            raise argparse.ArgumentTypeError(f"unknown {kind} preset {name!r} (one of {', '.join(names)})")
        return name

    return check


def add_model_dir_argument(parser: argparse.ArgumentParser, committed: Path) -> None:
    """``--model-dir``: the translator a benchmark serves (default ``committed``, the checkout's)."""
    parser.add_argument(
        "--model-dir",
        type=Path,
        default=committed,
        help="the translator's model directory (default: the committed one; another export of it, to compare)",
    )


@dataclass
class Timing:
    """Seconds per run of one contender: all rounds, after its warm-up run."""

    seconds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def best(self) -> float:
        return min(self.seconds)

    def to_json(self) -> dict[str, Any]:
        return {"median_s": self.median, "best_s": self.best, "runs_s": self.seconds}


def interleaved(runs: dict[str, Callable[[], Any]], repeats: int) -> tuple[dict[str, Timing], dict[str, Any]]:
    """Time each named function ``repeats`` times, round-robin, after one warm-up call each.

    Each timed call follows an untimed call of the same function, so no contender starts on
    caches its predecessor filled with another engine's weights. (Without it the order
    decided: on mt-small at batch 1 whichever ran right after CTranslate2 was ~5% slower,
    and the plain onnxruntime loop, which ran right after the engine on the same sessions,
    started warm.) Returns (timings, the value each function returned on its warm-up call).
    """
    values = {name: fn() for name, fn in runs.items()}
    timings = {name: Timing() for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            fn()  # untimed: the caches hold this contender's weights, not the last one's
            t0 = time.perf_counter()
            fn()
            timings[name].seconds.append(time.perf_counter() - t0)
    return timings, values


def linked_repo(repo: Path, model: str, directory: Path) -> Path:
    """``repo``, a model repository whose ``model`` is a link to ``directory`` (a committed
    model directory, served as it is); a link left pointing elsewhere (another checkout) is
    pointed here again."""
    repo.mkdir(parents=True, exist_ok=True)
    link = repo / model
    if link.is_symlink() and link.resolve() != directory.resolve():
        link.unlink()
    if not link.exists():
        link.symlink_to(directory, target_is_directory=True)
    return repo


def in_fresh_process(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a spawned process: a CPU-time measurement fresh as a server's, in which the
    caller's other threads and its collector (a test runner's, say) do not count. ``fn`` is a
    module-level function; its arguments and result are pickled."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def loadavg() -> tuple[float, float, float]:
    return os.getloadavg()


def machine() -> dict[str, Any]:
    """CPU model, cores, memory, versions and the load average now (the machine may be shared)."""
    info: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version()}
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        fields = dict(line.split(":", 1) for line in lscpu.splitlines() if ":" in line)
        for key in ("CPU(s)", "Thread(s) per core"):  # the model and its ISA flags: "cpu" and "isa" below
            if key in fields:
                info[key.lower().replace("(s)", "s").replace(" ", "_")] = fields[key].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        meminfo = Path("/proc/meminfo").read_text().split()
        info["memory_gib"] = round(int(meminfo[1]) / 2**20, 1)
    except (OSError, IndexError, ValueError):
        pass
    # the flags that pick onnxruntime's kernels (int8 results differ between them): every result names them
    info["isa"] = isa_flags()
    info["cpu"] = cpu_summary()
    info["os_cpu_count"] = os.cpu_count()
    info["loadavg_start"] = loadavg()
    versions = {}
    for module in ("onnxruntime", "torch", "transformers", "ctranslate2", "numpy", "grpc"):
        mod = sys.modules.get(module)
        if mod is None:
            try:
                mod = __import__(module)
            except ImportError:
                continue
        versions[module] = getattr(mod, "__version__", "?")
    info["versions"] = versions
    return info


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain fixed-width table (numbers right-aligned)."""
    cells = [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths))]
    lines.append("  ".join("-" * w for w in widths))
    for row, raw in zip(cells, rows):
        lines.append(
            "  ".join(c.rjust(w) if isinstance(v, (int, float)) else c.ljust(w) for c, w, v in zip(row, widths, raw))
        )
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def write_results(out: Path, name: str, result: dict[str, Any], quick: bool) -> Path:
    """``out/NAME[-quick].json`` with the load average at the end added; returns the path."""
    out.mkdir(parents=True, exist_ok=True)
    result.setdefault("machine", {})["loadavg_end"] = loadavg()
    path = out / f"{name}{'-quick' if quick else ''}.json"
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"wrote {path}")
    return path


def plot_path(out: Path, name: str, quick: bool) -> Path:
    return out / f"{name}{'-quick' if quick else ''}.png"


def save_plot(fig, out: Path, name: str, quick: bool) -> Path:
    """Lay out ``fig``, write it to ``out/NAME[-quick].png`` and close it; returns the path."""
    fig.tight_layout()
    path = plot_path(out, name, quick)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (no display on servers)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def header(title: str, info: dict[str, Any], threads: int) -> None:
    print(f"== {title}")
    print(
        f"   {info.get('cpu', '?')}, {info.get('os_cpu_count')} CPUs, {threads} intra-op thread(s) per engine, "
        f"load average {' '.join(f'{x:.2f}' for x in info['loadavg_start'])} (medians of interleaved runs)"
    )


def without_step_attention_dir(directory: Path, out: Path, name: str) -> Path:
    """A copy of the translation model directory ``directory`` at ``out``, named ``name``, whose
    decoder does not return its step's attention (``export.step_attention.without_step_attention``):
    as exported before that output, so alignments run the aligner graph. Rewritten every time."""
    import onnx

    from attnserve.contract.graph_io import STEP_ATTENTION
    from attnserve.contract.manifest import MANIFEST_NAME, sha256_file
    from attnserve.export.step_attention import without_step_attention

    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(directory, out)
    data = json.loads((out / MANIFEST_NAME).read_text())
    decoder = data["graphs"]["decoder"]
    if decoder["outputs"][-1:] == [STEP_ATTENTION]:
        path = out / decoder["file"]
        onnx.save(without_step_attention(onnx.load(str(path))), str(path))
        decoder["outputs"] = decoder["outputs"][:-1]
        data["files"][decoder["file"]] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    data["name"] = name
    (out / MANIFEST_NAME).write_text(json.dumps(data, indent=2))
    return out


def shown_path(path: Path) -> str:
    """``path`` as results record it: relative to the checkout when inside it (a committed result
    names no machine's directories), else as given."""
    root = Path(__file__).resolve().parent.parent
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return str(path)


def load_summary(latencies: Sequence[float], wall: float, mean_batch: float) -> dict[str, Any]:
    """A load run's figures: requests, images/s over ``wall`` seconds, latency percentiles (ms)
    of ``latencies`` (seconds each), and the server's mean batch."""
    import numpy as np

    ms = 1000 * np.array(latencies)
    return {
        "requests": len(latencies),
        "images_per_s": len(latencies) / wall,
        "p50_ms": float(np.percentile(ms, 50)),
        "p95_ms": float(np.percentile(ms, 95)),
        "p99_ms": float(np.percentile(ms, 99)),
        "mean_batch": float(mean_batch),
    }
