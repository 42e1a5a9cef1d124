"""One file from a URL (or a local mirror's path) into a cache folder: resumable, checksummed.

The bytes go to ``<file>.part`` first. A connection that drops mid-body (or a run that was
interrupted) leaves the ``.part`` file, and the next attempt asks only for the rest with an HTTP
``Range`` header (a server that ignores it answers 200 and the file starts over). The file gets its
final name only once it is whole: its length equals the server's ``Content-Length`` /
``Content-Range`` and, where the source gives one, its sha256 matches. A file that fails its
checksum is deleted, so the next run downloads it again rather than trusting it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.client
import logging
import os
import re
import shutil
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from .errors import PullError

try:
    import fcntl
except ImportError:  # no flock (Windows): downloads go unlocked
    fcntl = None

log = logging.getLogger(__name__)

CHUNK = 1 << 20
ATTEMPTS = 4  # a dropped connection is retried from where it stopped, this many times in all
TIMEOUT_S = 60.0
USER_AGENT = "attnserve-export-pull"
# Errors worth another attempt: the connection, not the request (a 404 is not retried).
TRANSIENT = (http.client.IncompleteRead, http.client.RemoteDisconnected, ConnectionError, socket.timeout, TimeoutError)


class _Truncated(Exception):
    """The body ended before its announced length."""


def is_url(location: str) -> bool:
    return urllib.parse.urlsplit(location).scheme in ("http", "https")


def local_path(location: str) -> Path | None:
    """A ``file://`` URL or a plain path -> the path; an http(s) URL -> None."""
    parts = urllib.parse.urlsplit(location)
    if parts.scheme == "file":
        return Path(urllib.request.url2pathname(parts.path))
    if parts.scheme in ("http", "https"):
        return None
    return Path(location)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def download(
    location: str, dest: Path, *, sha256: str | None = None, label: str | None = None, show: bool = True
) -> Path:
    """``location`` (an http(s) URL, a ``file://`` URL or a path) -> ``dest``, whole and checked.

    An existing ``dest`` whose checksum matches (or that has no checksum to match) is reused.
    Raises :class:`PullError` naming the location when the file cannot be had.
    """
    dest = Path(dest)
    label = label or dest.name
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with _one_writer(dest, label):  # a second pull of the same file waits, then finds it whole
            if dest.is_file() and (sha256 is None or sha256_of(dest) == sha256.lower()):
                return dest
            part = dest.with_name(dest.name + ".part")
            source = local_path(location)
            if source is not None:
                _copy(source, part, label)
            else:
                _fetch(location, part, label, show)
            if sha256 is not None:
                found = sha256_of(part)
                if found != sha256.lower():
                    part.unlink(missing_ok=True)
                    raise PullError(
                        f"{label}: checksum mismatch for {location}: sha256 {found}, the source says {sha256}"
                    )
            os.replace(part, dest)
            return dest
    except OSError as exc:  # the cache folder: not a folder, not writable, full
        raise PullError(f"{label}: cannot write to {exc.filename or dest.parent}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _one_writer(dest: Path, label: str) -> Iterator[None]:
    """An exclusive ``flock`` on ``<file>.lock`` beside ``dest`` while it is checked and written.

    The lock file is removed while still held; a waiter that then gets the lock of the removed file
    sees that the path names another file (or none) and locks again, so two never write at once."""
    if fcntl is None:
        yield
        return
    lock = dest.with_name(dest.name + ".lock")
    fd = _lock(lock, label)
    try:
        yield
    finally:
        if fd is not None:
            lock.unlink(missing_ok=True)
            os.close(fd)


def _lock(lock: Path, label: str) -> int | None:
    """The locked descriptor of ``lock``; None where the file system has no flock (written unlocked)."""
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"{label}: another pull is downloading it; waiting", file=sys.stderr, flush=True)
                fcntl.flock(fd, fcntl.LOCK_EX)
            if os.path.samestat(os.fstat(fd), os.stat(lock)):
                return fd
        except FileNotFoundError:  # removed by the writer that held it: lock the next one
            pass
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                return None
            raise
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _copy(source: Path, part: Path, label: str) -> None:
    try:
        shutil.copyfile(source, part)
    except OSError as exc:
        part.unlink(missing_ok=True)
        raise PullError(f"{label}: cannot read {source}: {exc.strerror or exc}") from None


def _fetch(url: str, part: Path, label: str, show: bool) -> None:
    """Download ``url`` into ``part``, resuming what an earlier attempt left there."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            _fetch_once(url, part, label, show)
            return
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and part.exists():  # the range asked starts past the end: start over
                part.unlink()
                continue
            if exc.code < 500 or attempt == ATTEMPTS:
                raise PullError(f"{label}: {url}: HTTP {exc.code} {exc.reason}") from None
            reason = f"HTTP {exc.code}"
        except urllib.error.URLError as exc:
            if attempt == ATTEMPTS:
                raise PullError(f"{label}: {url}: {exc.reason}") from None
            reason = str(exc.reason)
        except (*TRANSIENT, _Truncated) as exc:
            if attempt == ATTEMPTS:
                have = part.stat().st_size if part.exists() else 0
                raise PullError(
                    f"{label}: {url}: the connection dropped {ATTEMPTS} times ({type(exc).__name__}); "
                    f"{have} bytes kept in {part}, the next pull resumes from there"
                ) from None
            reason = type(exc).__name__
        log.warning("%s: attempt %d of %d failed (%s); resuming", label, attempt, ATTEMPTS, reason)
        time.sleep(min(0.2 * 2**attempt, 5.0))


def _fetch_once(url: str, part: Path, label: str, show: bool) -> None:
    offset = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S) as response:
        if response.status == 206:
            total = _range_total(response.headers.get("Content-Range"))
        else:  # 200: the whole body (a server without ranges): start over
            offset, total = 0, _int(response.headers.get("Content-Length"))
        mode = "ab" if offset else "wb"
        with open(part, mode) as out, _bar(label, total, offset, show) as bar:
            while block := response.read(CHUNK):
                out.write(block)
                bar.update(len(block))
    size = part.stat().st_size
    if total is not None and size < total:
        raise _Truncated(f"{size} of {total} bytes")


def _range_total(content_range: str | None) -> int | None:
    match = re.fullmatch(r"bytes \d+-\d+/(\d+)", (content_range or "").strip())
    return int(match.group(1)) if match else None


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def _bar(label: str, total: int | None, initial: int, show: bool):
    """A tqdm byte bar on a terminal; elsewhere (logs, tests) one line when the download starts."""
    from tqdm import tqdm

    interactive = show and sys.stderr.isatty()
    if show and not interactive:
        resumed = f", resuming at {initial} bytes" if initial else ""
        size = f"{total} bytes" if total is not None else "size unknown"
        print(f"downloading {label} ({size}{resumed})", file=sys.stderr, flush=True)
    return tqdm(
        total=total,
        initial=initial,
        desc=label,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        disable=not interactive,
        file=sys.stderr,
        leave=False,
    )
