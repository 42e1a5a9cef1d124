"""``ServerProcess``, ``attnserve-server`` as a child process; ``direct_probs``, what a
classifier must answer, from onnxruntime in process; ``post_json``, one JSON POST to a live
server's HTTP port."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import onnxruntime as ort

from attnserve.contract.manifest import load_manifest
from attnserve.server.images.classifier import softmax
from attnserve.server.images.preprocess import preprocess_image
from attnserve.server.shared.config import Settings

BIN = Path(sys.executable).parent  # the environment's console scripts (attnserve-server, -client)


class ServerProcess:
    """``attnserve-server`` as a child process; its port is read from its log."""

    def __init__(
        self, repo: Path | None, *args: str, cwd: Path | None = None, file_size_limit: int | None = None
    ) -> None:
        """``repo`` None: no ``--model-repo`` (the server's default), run in ``cwd``;
        ``file_size_limit``: no file the server writes grows past these bytes (``RLIMIT_FSIZE``),
        as on a disk that is full."""
        env = {**os.environ, "OMP_NUM_THREADS": "1", "ATTNSERVE_THREADS": "1", "ATTNSERVE_PROVIDER": "cpu"}
        # as the in-process test servers (tests/server/conftest.py): no translation cache unless
        # the test asks (--translation-cache-mb), so a text sent again is decoded again
        env.setdefault("ATTNSERVE_TRANSLATION_CACHE_MB", "0")
        env.pop("ATTNSERVE_MODEL_REPO", None)
        repo_args = [] if repo is None else ["--model-repo", str(repo)]
        cmd = [str(BIN / "attnserve-server"), *repo_args, "--port", "0", "--http-port", "0", *args]
        limit = None if file_size_limit is None else lambda: _limit_file_size(file_size_limit)
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd, preexec_fn=limit)
        self.log: list[str] = []
        self.metrics_port: int | None = None
        self.http_port: int | None = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("server exited during start-up:\n" + "".join(self.log))
            self.log.append(line)
            if m := re.search(r"metrics on http://[\d.]+:(\d+)/", line):
                self.metrics_port = int(m.group(1))
            if m := re.search(r"HTTP \(KServe v2 REST[^)]*\) on https?://[\d.]+:(\d+)", line):
                self.http_port = int(m.group(1))
            if m := re.search(r"serving \d+ model\(s\) on [\d.]+:(\d+)", line):
                self.port = int(m.group(1))
                break
        else:
            raise RuntimeError("server did not start in 60 s:\n" + "".join(self.log))
        self.address = f"127.0.0.1:{self.port}"
        self.http_address = f"127.0.0.1:{self.http_port}" if self.http_port else None
        self._reader = threading.Thread(target=self._drain_log, daemon=True)
        self._reader.start()

    def _drain_log(self) -> None:
        for line in self.proc.stderr:
            self.log.append(line)

    def logged(self, words: str, timeout: float = 10.0) -> bool:
        """Whether a line holding ``words`` reaches the log within ``timeout`` seconds: the log is
        read by a thread, so a line written just before a reply can arrive just after it."""
        deadline = time.monotonic() + timeout
        while not any(words in line for line in list(self.log)):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(30)
        self._reader.join(10)  # the log's last lines, written just before the exit, are read
        return code


def _limit_file_size(size: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))  # a write past it fails (Python ignores SIGXFSZ)


def direct_probs(model_dir: Path, images: list[bytes]) -> np.ndarray:
    """What the server must answer: onnxruntime in-process on the same preprocessed pixels. (N, K)."""
    manifest = load_manifest(model_dir)
    defaults = Settings()
    pixels = np.stack(
        [
            preprocess_image(
                data, manifest.preprocessing, max_pixels=defaults.max_image_pixels, max_bytes=defaults.max_image_bytes
            )
            for data in images
        ]
    )  # (N, C, H, W)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(str(model_dir / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    (logits,) = session.run(None, {"pixels": pixels})  # (N, K)
    return softmax(logits)


def resident_bytes(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of process ``pid`` in bytes (Linux)."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss, hwm = (int(re.search(rf"{key}:\s+(\d+) kB", status).group(1)) * 1024 for key in ("VmRSS", "VmHWM"))
    return rss, hwm


def post_json(server, path: str, body: bytes | dict, headers: dict | None = None) -> tuple[int, dict]:
    """(status, decoded JSON reply) of one JSON POST to ``server``'s HTTP port (errors too)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://{server.http_address}{path}",
        data=data,
        method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())
