"""A throwaway PostgreSQL server for the state store's tests: Debian's ``postgresql`` package
(``.ci/run`` installs it), a cluster made with ``initdb`` in a temporary folder and started with
``pg_ctl`` on a free port, as a non-root user (PostgreSQL refuses to run as root)."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

USER = "postgres"  # the account Debian's package makes; used when the tests run as root


def binaries() -> Path | None:
    """The newest installed PostgreSQL's bin folder (Debian keeps them out of PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[4]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


def missing() -> str:
    """Why no server can be started here ("" when one can)."""
    if binaries() is None:
        return "PostgreSQL is not installed (Debian's postgresql package: .ci/run installs it as root)"
    if os.getuid() == 0:
        try:
            pwd.getpwnam(USER)
        except KeyError:
            return f"running as root and there is no {USER!r} user to run PostgreSQL as"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed: pip install 'attnserve[postgres]'"
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_user(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", USER, "--", *cmd] if os.getuid() == 0 else cmd


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A running server; yields its URL (``postgresql://attnserve@127.0.0.1:PORT/postgres``)."""
    bin_dir = binaries()
    assert bin_dir is not None, missing()
    folder = Path(tempfile.mkdtemp(prefix="attnserve-pg-"))
    data = folder / "data"
    if os.getuid() == 0:
        shutil.chown(folder, USER, USER)
    port = _free_port()
    run = dict(check=True, capture_output=True, text=True, timeout=120)
    subprocess.run(_as_user([str(bin_dir / "initdb"), "-D", str(data), "-U", "attnserve", "--auth=trust"]), **run)
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
    log = folder / "server.log"
    subprocess.run(
        _as_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(log), "-w", "start"]), **run
    )
    try:
        yield f"postgresql://attnserve@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]), **run)
        shutil.rmtree(folder, ignore_errors=True)
