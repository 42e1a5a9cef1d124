"""``attnserve-client`` as a user runs it: one line on stderr and the documented exit code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from attnserve.client import Client

REPO = Path(__file__).resolve().parents[2]


def client_cli(*args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """The CLI in its own process: what a failure does to the process (an abort, a traceback) shows."""
    command = [sys.executable, "-m", "attnserve.client.cli", *args]
    return subprocess.run(command, input=input, capture_output=True, timeout=timeout, cwd=REPO)


@pytest.mark.parametrize("half", [["--tls-cert", "cert.pem"], ["--tls-ca", "ca.pem", "--tls-key", "key.pem"]])
def test_half_a_client_certificate_is_a_usage_error_not_an_abort(half, tmp_path):
    for name in ("cert.pem", "ca.pem", "key.pem"):
        (tmp_path / name).write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    paths = [str(tmp_path / arg) if arg.endswith(".pem") else arg for arg in half]
    done = client_cli("--address", "127.0.0.1:1", "--retries", "0", *paths, "health")
    assert done.returncode == 2, done.stderr
    said = done.stderr.decode().splitlines()
    assert said[-1].endswith("--tls-cert and --tls-key go together (mutual TLS): give both")


def test_the_client_refuses_a_private_key_without_its_certificate():
    """Without the check it connected in plaintext, the key unused, and nothing said so."""
    with pytest.raises(ValueError, match="private_key and certificate_chain go together"):
        Client("127.0.0.1:1", private_key=b"-----BEGIN PRIVATE KEY-----\n")
