"""Fixtures of the server tests: tiny exported models, a background event loop, live servers.

Every server test talks to a real server on 127.0.0.1 (port 0) over a real channel.
Model directories are exported once per session (exports take seconds on 2 cores).
"""

from __future__ import annotations

import asyncio
import io
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from attnserve.client import Client
from attnserve.server.entry.app import AttnServer, create_server
from attnserve.server.shared.config import Settings
from tests.support.server import direct_probs  # noqa: F401 - used by the server tests as .conftest.direct_probs

DIGIT_LABELS = [str(i) for i in range(10)]
COLOR_LABELS = ["red", "green", "blue"]


def _export_vit(out: Path, name: str, channels: int, labels: list[str], preprocessing: dict) -> None:
    import torch

    from attnserve.export.modeldir import write_vit_dir
    from attnserve.models import VisionTransformer, ViTConfig

    torch.manual_seed(0 if channels == 1 else 1)
    cfg = ViTConfig(
        image_size=16, patch_size=8, in_channels=channels, num_classes=len(labels), dim=16, depth=1, num_heads=2
    )
    write_vit_dir(VisionTransformer(cfg).eval(), out, name=name, labels=labels, preprocessing=preprocessing)


@pytest.fixture(scope="session")
def vit_dirs(tmp_path_factory) -> dict[str, Path]:
    """Two tiny random ViTs: ``digits`` (1 channel, inverted, bilinear) and ``colors`` (RGB, bicubic)."""
    root = tmp_path_factory.mktemp("vits")
    _export_vit(root / "digits", "digits", 1, DIGIT_LABELS, {"invert": True})
    _export_vit(
        root / "colors",
        "colors",
        3,
        COLOR_LABELS,
        {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "resample": "bicubic"},
    )
    return {"digits": root / "digits", "colors": root / "colors"}


@pytest.fixture(scope="session")
def repo(vit_dirs, tmp_path_factory) -> Path:
    """A model repository holding both ViTs (symlinked model directories)."""
    root = tmp_path_factory.mktemp("repo")
    for name, path in vit_dirs.items():
        (root / name).symlink_to(path, target_is_directory=True)
    return root


def digit_png(digit: int, size: int = 28, mode: str = "L", fmt: str = "PNG") -> bytes:
    """A dark digit on light paper, as a person would photograph or draw it."""
    image = Image.new("L", (size, size), 255)
    ImageDraw.Draw(image).text((size // 3, size // 5), str(digit), fill=0)
    buf = io.BytesIO()
    image.convert(mode).save(buf, fmt)
    return buf.getvalue()


@pytest.fixture(scope="session")
def digit_images() -> list[bytes]:
    return [digit_png(d) for d in range(10)]


class LoopThread:
    """One asyncio loop in a background thread for every in-process server of the session."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="server-loop", daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 60.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="session")
def loop_thread() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.close()


class ServerHandle:
    def __init__(self, loop_thread: LoopThread, settings: Settings) -> None:
        self.loop_thread = loop_thread
        self.app: AttnServer
        self.app, self.port = loop_thread.run(create_server("127.0.0.1:0", settings))
        loop_thread.run(self.app.start())
        self.address = f"127.0.0.1:{self.port}"
        self.http_address = f"127.0.0.1:{self.app.http_port}" if self.app.http_port else None

    def client(self, **kw) -> Client:
        kw.setdefault("retries", 0)
        kw.setdefault("timeout", 20.0)
        return Client(self.address, **kw)

    def metric(self, name: str, **labels: str) -> float:
        return self.app.metrics.value(name, **labels)

    def stop(self, grace: float = 2.0) -> None:
        self.loop_thread.run(self.app.stop(grace))


def settings_for(repo: Path, **overrides) -> Settings:
    """The settings of a test server. The translation cache is off unless a test turns it on: the
    tests of queues, deadlines, cancels and tokens decoded send the same texts again and need
    them decoded (tests/server/service/test_translation_cache.py and the door-parity tests serve with it)."""
    base = dict(model_repo=repo, threads=1, preprocess_threads=1, metrics_port=-1, http_port=-1, provider="cpu")
    base["translation_cache_mb"] = 0
    return Settings(**{**base, **overrides})


@pytest.fixture(scope="session")
def serve(loop_thread, tmp_path_factory):
    """``with serve(repo, max_batch_size=4) as server:`` a live server with those settings. Unless a
    test names them, each server keeps its jobs and downloads in folders of its own: the default
    ones are shared by every server of a repository (the committed ``models/repo`` above all), so
    the jobs and files of earlier runs would count against a test's quotas.

    The access log is at INFO, as ``attnserve-server`` logs unless told otherwise, so it wraps
    every RPC's handler as it does in production (a test that wants it quiet sets its level, as
    ``caplog.set_level`` does, and INFO comes back after)."""
    access_log = logging.getLogger("attnserve.server.access_log")
    level = access_log.level
    access_log.setLevel(logging.INFO)

    @contextmanager
    def _serve(repo: Path, **overrides) -> Iterator[ServerHandle]:
        overrides.setdefault("state_dir", str(tmp_path_factory.mktemp("state")))
        overrides.setdefault("download_dir", str(tmp_path_factory.mktemp("downloads")))
        handle = ServerHandle(loop_thread, settings_for(repo, **overrides))
        try:
            yield handle
        finally:
            handle.stop()

    yield _serve
    access_log.setLevel(level)
