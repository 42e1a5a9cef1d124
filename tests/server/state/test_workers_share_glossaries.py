"""``attnserve-server --workers 2`` on one state folder: glossaries created at once through
both worker processes (each request on a connection of its own, spread by SO_REUSEPORT) are
all kept, each listed once, by whichever worker answers."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # a live server process with two workers

REPO = Path(__file__).resolve().parents[3] / "models" / "repo"
BIN = Path(sys.executable).parent
KEY = {"Authorization": "DeepL-Auth-Key any"}


def start(state: Path) -> tuple[subprocess.Popen, int, int]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ATTNSERVE_THREADS": "1", "ATTNSERVE_PROVIDER": "cpu"}
    cmd = [str(BIN / "attnserve-server"), "--model-repo", str(REPO), "--workers", "2", "--port", "0"]
    cmd += ["--http-port", "0", "--metrics-port", "0", "--state-dir", str(state)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    log, metrics = [], 0
    for line in proc.stderr:
        log.append(line)
        if m := re.search(r"metrics on http://[\d.]+:(\d+)/", line):
            metrics = int(m.group(1))
        if m := re.search(r"serving with 2 workers on .*, HTTP port (\d+)", line):
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, int(m.group(1)), metrics
    raise RuntimeError("the server did not start:\n" + "".join(log))


def create(port: int, i: int) -> str:
    body = f"name=g{i}&source_lang=EN&target_lang=DE&entries=Monday%09Montag{i}".encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/glossaries", body, KEY)
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())["glossary_id"]


def test_two_workers_creating_glossaries_at_once_lose_none(tmp_path):
    proc, port, metrics = start(tmp_path / "state")
    try:
        with ThreadPoolExecutor(8) as pool:
            made = list(pool.map(lambda i: create(port, i), range(40)))
        for _ in range(4):  # whichever worker answers lists every one
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/glossaries", headers=KEY)
            with urllib.request.urlopen(request, timeout=60) as reply:
                listed = [g["glossary_id"] for g in json.loads(reply.read())["glossaries"]]
            assert sorted(listed) == sorted(made) and len(set(made)) == 40
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as reply:
            created = re.findall(
                r'attnserve_requests_total\{[^}]*method="deepl.create_glossary"[^}]*\} (\S+)', reply.read().decode()
            )
        assert len(created) == 2 and sum(map(float, created)) == 40  # both workers created some
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
