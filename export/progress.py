"""Stage progress for the export CLI: one line (or one tqdm step) per stage, with timings.

``Progress`` is the ``stage`` callback of :mod:`attnserve.export.modeldir`: calling it
with a stage name ends the previous stage and starts the next one. The timings end up
in the export report (``export-report.json``).
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from typing import TextIO


class Progress:
    """Shows each stage as it starts; records how long each one took.

    On a terminal a tqdm bar advances one step per stage; otherwise (CI logs, tests)
    each stage prints one plain line ``[2/6] export decoder`` and its time when done.
    ``total`` is the number of stages expected (the bar grows if more arrive).
    """

    def __init__(self, total: int, *, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.total = total
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.timings: list[tuple[str, float]] = []
        self._current: str | None = None
        self._started = 0.0
        self._bar = None
        if enabled and getattr(self.stream, "isatty", lambda: False)():
            from tqdm import tqdm

            self._bar = tqdm(total=total, file=self.stream, unit="stage", leave=False, dynamic_ncols=True)

    def __call__(self, name: str) -> None:
        self._close_current()
        self._current, self._started = name, time.perf_counter()
        index = len(self.timings) + 1
        if self._bar is not None:
            if index > self._bar.total:
                self._bar.total = index
            self._bar.set_description_str(name)
        elif self.enabled:
            print(f"[{index}/{max(index, self.total)}] {name} ...", file=self.stream, flush=True)

    def _close_current(self) -> None:
        if self._current is None:
            return
        seconds = time.perf_counter() - self._started
        self.timings.append((self._current, seconds))
        if self._bar is not None:
            self._bar.update(1)
        elif self.enabled:
            print(f"      {self._current}: {seconds:.1f} s", file=self.stream, flush=True)
        self._current = None

    def stages(self) -> list[dict[str, float | str]]:
        """Finished stages plus the running one (time so far), for the report."""
        done = [{"stage": name, "seconds": round(s, 3)} for name, s in self.timings]
        if self._current is not None:
            done.append({"stage": self._current, "seconds": round(time.perf_counter() - self._started, 3)})
        return done

    def close(self) -> None:
        self._close_current()
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def quiet_exporter() -> None:
    """The dynamo exporter warns about things that do not concern a user of this CLI
    (torchvision ops, dynamic-shape renames); keep the stage display readable."""
    for module in (r"torch(\..*)?", r"onnxscript(\..*)?", "copyreg"):  # copyreg: torch's pytree deprecation
        for category in (UserWarning, DeprecationWarning, FutureWarning):
            warnings.filterwarnings("ignore", category=category, module=module)
    for name in ("torch.onnx", "torch._export", "torch.export", "onnxscript"):
        logging.getLogger(name).setLevel(logging.ERROR)
