"""A new user's install, as the README writes it: ``pip install 'attnserve[cpu]'`` and ``pip
install 'tritonclient[grpc]'`` as two separate steps, in either order, into a fresh venv.

tritonclient caps protobuf below 7 and pip does not revisit what is already installed, so a
second step that moves protobuf must not break the first: the server starts with no arguments
(the bundled models, which the wheel ships), attnserve-client translates, and Triton's own
client talks to the same server. Integration tier (two venvs, a built wheel, about two minutes
from pip's cache); skipped, with pip's words, only when the package index cannot be reached.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRITON = """
import numpy as np, sys, tritonclient.grpc as triton
client = triton.InferenceServerClient(sys.argv[1])
text = triton.InferInput("TEXT", [1], "BYTES")
text.set_data_from_numpy(np.array([b"Monday, March 3, 2025"], dtype=object))
print(client.infer("translator-en-de", [text]).as_numpy("TRANSLATION")[0].decode())
"""

DETECT = """
from attnserve.server.shared.config import Settings
from attnserve.server.service.detection import make_detector
detector = make_detector(Settings().language_detection)
found = [detector.detect(text, ["en", "de", "fr"])[0].language for text in ("guten Morgen", "merci beaucoup")]
print(detector.name, *found)
"""


def _pip(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    probe = _pip("download", "--no-deps", "-q", "-d", str(out / "probe"), "tritonclient")
    if probe.returncode != 0:
        pytest.skip(f"package index unreachable: {probe.stderr.strip()[-300:]}")
    built = _pip("wheel", "--no-deps", "-q", "-w", str(out), str(ROOT))
    assert built.returncode == 0, built.stderr[-2000:]
    # setuptools' deprecations (the license table) and "Package would be ignored" (package data)
    assert not re.search(r"(BuildBackend|SetuptoolsDeprecation)Warning|would be ignored", built.stderr), built.stderr
    (found,) = out.glob("attnserve-*.whl")
    names = zipfile.ZipFile(found).namelist()
    assert "attnserve/models/repo/translator-en-de/model.json" in names  # the bundled models ship
    assert not [n for n in names if n.startswith(("experiments/", "tests/"))]  # the product only
    return found


@pytest.mark.parametrize("order", ["attnserve-first", "tritonclient-first"])
def test_two_separate_installs_in_either_order_leave_a_working_server_and_clients(order, wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    steps = [f"attnserve[cpu] @ {wheel.as_uri()}", "tritonclient[grpc]"]
    for requirement in steps if order == "attnserve-first" else steps[::-1]:
        done = _pip("--python", str(venv / "bin" / "python"), "install", "-q", requirement)
        assert done.returncode == 0, done.stderr[-2000:]

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # TMPDIR: the default state folder (file jobs' queue) and download folder are in the system
    # temp dir, shared by every server on the machine started without --state-dir. A new user's
    # machine has no other server; here other tests' servers run at once, and this server would
    # claim their queued file jobs and translate them on its one thread while the client's call
    # waits (a failure only under load). Its own temp dir keeps it the only server on its queue.
    env.update(OMP_NUM_THREADS="1", ATTNSERVE_THREADS="1", ATTNSERVE_PROVIDER="cpu", TMPDIR=str(tmp_path))
    server = subprocess.Popen(
        [str(venv / "bin" / "attnserve-server"), "--port", "0", "--http-port", "-1", "--metrics-port", "-1"],
        cwd=tmp_path,  # no ./model-repo here: the bundled models
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        log = []
        for line in server.stderr:
            log.append(line)
            if m := re.search(r"serving \d+ model\(s\) on [\d.]+:(\d+)", line):
                address = f"127.0.0.1:{m.group(1)}"
                break
        else:
            pytest.fail("the server exited during start-up:\n" + "".join(log))
        assert "serving the bundled models" in log[0], log[0]
        client = subprocess.run(
            [str(venv / "bin" / "attnserve-client"), "--address", address, "translate", "Monday, March 3, 2025"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert (client.returncode, client.stdout) == (0, "Montag, 3. März 2025\n"), client.stderr[-2000:]
        triton = subprocess.run(
            [str(venv / "bin" / "python"), "-c", TRITON, address], capture_output=True, text=True, timeout=60, env=env
        )
        assert (triton.returncode, triton.stdout) == (0, "Montag, 3. März 2025\n"), triton.stderr[-2000:]
        # source auto and /detect out of the box: the default detector comes with the base install
        detect = subprocess.run(
            [str(venv / "bin" / "python"), "-c", DETECT], capture_output=True, text=True, timeout=60, env=env
        )
        assert (detect.returncode, detect.stdout) == (0, "langid de fr\n"), detect.stderr[-2000:]
    finally:
        server.send_signal(signal.SIGINT)  # Ctrl-C, as the README says: drain, exit 0
        assert server.wait(60) == 0
        assert list(tmp_path.glob("attnserve-state-*/state.sqlite3"))  # its queue, no other server's
