"""Translated files waiting for download (LibreTranslate's ``/download_file/<name>``).

Each file is stored in ``--download-dir`` under an unguessable name
(``secrets.token_urlsafe(24)``, 192 random bits, then the original file name) with a JSON
sidecar: its file name, media type, when it expires and, when the server has api keys, the
sha256 of the key that asked for it (never the key), so only that key downloads it.

The store keeps an index of its files in memory (name -> sidecar, bytes on disk), in the
order they expire (the retention is one setting, so saving order is expiry order):

- a save or a fetch never lists the directory: a save deletes what has expired and, to make
  room, the oldest files from the front of the index; a fetch looks its name up;
- all files together stay under ``--max-download-files`` files and ``--max-download-bytes``
  bytes as the disk counts them (allocated blocks, sidecars included);
- expired files are deleted by :meth:`DownloadStore.sweep`, which the HTTP server runs on a
  timer, and on every save. A URL of a deleted or unknown file answers 404 "expired";
- the directory is the state: a restarted server rebuilds the index once, by listing it, and
  serves every file it promised that has not expired (a file whose sidecar is missing or
  unreadable, and a half-written one, is deleted then). With ``--workers N`` each server
  process indexes the files it saved; a fetch of another process's file reads that one
  file's sidecar by its name.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import threading
import time
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from ..shared.errors import InvalidRequest, ModelNotFound, Overloaded
from ..shared.security import key_digest

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9_-]{32}\.[^/\\]{1,200}$")
_UNSAFE = re.compile(r"[^\w.-]+")  # \w: letters and digits of every script, and "_"
MAX_NAME_BYTES = 120  # of a stored name, in UTF-8 (the file system allows 255 bytes, the token and sidecar take some)
META = ".json"


class Expired(ModelNotFound):
    """A download URL whose file is gone (expired, deleted to make room, or never made): 404."""


class Forbidden(InvalidRequest):
    """A download asked for with another api key than the translation's: 403."""

    status = "PERMISSION_DENIED"
    http_status = 403


@dataclass(frozen=True)
class Download:
    path: Path
    filename: str
    media_type: str


@dataclass(frozen=True)
class _Entry:
    meta: dict
    disk_bytes: int  # the file's and its sidecar's allocated blocks

    @property
    def expires(self) -> float:
        return float(self.meta["expires"])


def safe_filename(filename: str, marker: str = "") -> str:
    """The base name with anything but letters and digits (of any script: ``报告.txt`` and
    ``März.txt`` keep their names) and ``._-`` replaced by ``_`` (werkzeug's secure_filename, as
    LibreTranslate uses, in spirit), cut to :data:`MAX_NAME_BYTES` bytes, its extension kept;
    ``marker`` (a translation's ``.de``) goes before the extension, the stem cut to make room for
    it, so a long name keeps it too."""
    base = unicodedata.normalize("NFC", os.path.basename(filename.replace("\\", "/"))).strip()
    cleaned = _UNSAFE.sub("_", base).rstrip("._ ") or "file"
    stem, ext = os.path.splitext(cleaned)
    if len(ext.encode()) > MAX_NAME_BYTES // 2:  # not an extension: a name with a dot in it
        stem, ext = cleaned, ""
    # a stem of symbols alone (🙂.txt, ???.md) is all "_": it becomes "file", and the extension,
    # which picks the file's reader, stays
    stem = stem.lstrip("._ ") or "file"
    marker = _UNSAFE.sub("_", marker)[: MAX_NAME_BYTES // 4]
    room = MAX_NAME_BYTES - len(ext.encode()) - len(marker.encode())
    return stem.encode()[:room].decode("utf-8", "ignore") + marker + ext


def disk_bytes(*paths: Path) -> int:
    """What ``paths`` take on disk: allocated blocks (a 10-byte file takes a whole block)."""
    total = 0
    for path in paths:
        try:
            info = path.stat()
        except FileNotFoundError:
            continue
        total += max(info.st_blocks * 512, info.st_size)
    return total


class DownloadStore:
    """See the module docstring. Methods do blocking file I/O: call them off the event loop."""

    def __init__(self, directory: str | Path, retention_s: float, max_bytes: int, max_files: int = 10_000) -> None:
        self.directory = Path(directory)
        self.retention_s, self.max_bytes, self.max_files = retention_s, max_bytes, max_files
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock = threading.Lock()
        self._index: OrderedDict[str, _Entry] = OrderedDict()  # oldest first
        self.bytes = 0
        self._rebuild()

    def __len__(self) -> int:
        return len(self._index)

    def _rebuild(self) -> None:
        """The index from the directory, once at start: orphans and half-written files deleted."""
        found = []
        for path in self.directory.iterdir():
            if path.suffix == META and path.with_suffix("").exists():
                continue
            if path.name.startswith(".") or path.suffix == META:  # a save cut short; a sidecar alone
                self._delete(path)
                continue
            try:
                meta = json.loads(path.with_name(path.name + META).read_text())
                found.append((float(meta["expires"]), path.name, meta))
            except (OSError, ValueError, KeyError, TypeError):
                self._delete(path)
        for _, name, meta in sorted(found, key=lambda f: f[0]):
            path = self.directory / name
            self._add(name, _Entry(meta, disk_bytes(path, path.with_name(name + META))))
        self.sweep()

    def _add(self, name: str, entry: _Entry) -> None:
        self._index[name] = entry
        self.bytes += entry.disk_bytes

    def _drop(self, name: str) -> None:
        entry = self._index.pop(name, None)
        if entry is not None:
            self.bytes -= entry.disk_bytes
        self._delete(self.directory / name)

    def _delete(self, path: Path) -> None:
        for p in (path, path.with_name(path.name + META)):
            try:
                p.unlink()
            except FileNotFoundError:
                pass

    def sweep(self, room: int = 0, files: int = 0) -> None:
        """Delete expired files, then the oldest until ``room`` more bytes and ``files`` more files fit."""
        now = time.time()
        with self._lock:
            while self._index:
                name, entry = next(iter(self._index.items()))
                full = self.bytes + room > self.max_bytes or len(self._index) + files > self.max_files
                if entry.expires > now and not full:
                    break
                if entry.expires > now:
                    log.info("downloads: deleted %s to make room (--max-download-bytes, --max-download-files)", name)
                self._drop(name)

    def save(self, content: bytes, filename: str, media_type: str, api_key: str | None) -> str:
        """Store ``content``; returns the name its download URL ends in."""
        if len(content) > self.max_bytes:
            raise Overloaded(
                f"the translated file is {len(content):,} bytes, over --max-download-bytes ({self.max_bytes:,})"
            )
        name = f"{secrets.token_urlsafe(24)}.{safe_filename(filename)}"
        path = self.directory / name
        meta = {
            "filename": safe_filename(filename),
            "media_type": media_type,
            "expires": time.time() + self.retention_s,
            "key": key_digest(api_key),
        }
        self.sweep(room=len(content) + 4096, files=1)  # 4 KiB: the sidecar's block
        tmp = self.directory / f".{name}.tmp"
        tmp.write_bytes(content)
        sidecar = path.with_name(name + META)
        sidecar.write_text(json.dumps(meta))
        os.replace(tmp, path)  # the file appears whole, after its sidecar
        with self._lock:
            self._add(name, _Entry(meta, disk_bytes(path, sidecar)))
        return name

    def fetch(self, name: str, api_key: str | None, keys_on: bool) -> Download:
        """The stored file ``name``, for a caller holding ``api_key``; Expired or Forbidden."""
        expired = Expired(f"the file {name[:80]!r} has expired or never existed; translate it again")
        if not _NAME.match(name):
            raise expired
        path = self.directory / name
        with self._lock:
            entry = self._index.get(name)
        meta = entry.meta if entry is not None else self._sidecar(path)  # another server process's file
        if meta is None or float(meta.get("expires", 0)) <= time.time() or not path.exists():
            raise expired
        if keys_on and meta.get("key") and not secrets.compare_digest(meta["key"], key_digest(api_key)):
            if not api_key:
                raise Forbidden("Invalid API key: this file is downloaded with the api key it was translated with")
            raise Forbidden("Invalid API key: this file was translated for another key")
        return Download(path, meta.get("filename") or "file", meta.get("media_type") or "application/octet-stream")

    def _sidecar(self, path: Path) -> dict | None:
        try:
            meta = json.loads(path.with_name(path.name + META).read_text())
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) else None
