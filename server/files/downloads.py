"""Translated files waiting for download (LibreTranslate's ``/download_file/<name>``).

Each file is stored in ``--download-dir`` under an unguessable name
(``secrets.token_urlsafe(24)``, 192 random bits, then the original file name) with a JSON
sidecar: its file name, media type, when it expires and, when the server has api keys, the
sha256 of the key that asked for it (never the key), so only that key downloads it.

- A file lives ``--download-retention-s`` seconds; then it is deleted (on every save and
  fetch, and at start). A URL of a deleted or unknown file answers 404 "expired".
- All files together stay under ``--max-download-bytes``: the oldest are deleted to make room.
- The directory is the state: a restarted server serves every file it promised that has not
  expired (files whose sidecar is missing or unreadable are deleted at start).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import InvalidRequest, ModelNotFound, Overloaded

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9_-]{32}\.[^/\\]{1,200}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
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


def safe_filename(filename: str) -> str:
    """The base name with anything but letters, digits and ``._-`` replaced (werkzeug's
    secure_filename, as LibreTranslate uses, in spirit)."""
    base = os.path.basename(filename.replace("\\", "/")).strip()
    cleaned = _UNSAFE.sub("_", base).strip("._ ") or "file"
    stem, ext = os.path.splitext(cleaned)
    return stem[: 120 - len(ext)] + ext


def key_digest(api_key: str | None) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest() if api_key else ""


def default_dir() -> Path:
    return Path(tempfile.gettempdir()) / "attnserve-downloads"


class DownloadStore:
    """See the module docstring. Methods do blocking file I/O: call them off the event loop."""

    def __init__(self, directory: str | Path, retention_s: float, max_bytes: int) -> None:
        self.directory = Path(directory) if directory else default_dir()
        self.retention_s, self.max_bytes = retention_s, max_bytes
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.sweep()

    def _entries(self) -> list[tuple[float, Path, dict]]:
        """(expires, path, metadata) of every stored file, oldest first; orphans deleted."""
        out = []
        for path in self.directory.iterdir():
            if path.suffix == META or path.name.startswith("."):
                continue
            try:
                meta = json.loads(path.with_name(path.name + META).read_text())
                out.append((float(meta["expires"]), path, meta))
            except (OSError, ValueError, KeyError, TypeError):
                self._delete(path)
        return sorted(out, key=lambda e: e[0])

    def _delete(self, path: Path) -> None:
        for p in (path, path.with_name(path.name + META)):
            try:
                p.unlink()
            except FileNotFoundError:
                pass

    def sweep(self, room: int = 0) -> None:
        """Delete expired files, then the oldest until ``room`` more bytes fit."""
        now, entries = time.time(), self._entries()
        kept = []
        for expires, path, _ in entries:
            if expires <= now:
                self._delete(path)
            else:
                kept.append((path, path.stat().st_size if path.exists() else 0))
        total = sum(size for _, size in kept)
        for path, size in kept:
            if total + room <= self.max_bytes:
                break
            log.info("downloads: deleted %s to make room (--max-download-bytes %d)", path.name, self.max_bytes)
            self._delete(path)
            total -= size

    def save(self, content: bytes, filename: str, media_type: str, api_key: str | None) -> str:
        """Store ``content``; returns the name its download URL ends in."""
        if len(content) > self.max_bytes:
            raise Overloaded(
                f"the translated file is {len(content):,} bytes, over --max-download-bytes ({self.max_bytes:,})"
            )
        self.sweep(room=len(content))
        name = f"{secrets.token_urlsafe(24)}.{safe_filename(filename)}"
        path = self.directory / name
        meta = {
            "filename": safe_filename(filename),
            "media_type": media_type,
            "expires": time.time() + self.retention_s,
            "key": key_digest(api_key),
        }
        tmp = self.directory / f".{name}.tmp"
        tmp.write_bytes(content)
        path.with_name(name + META).write_text(json.dumps(meta))
        os.replace(tmp, path)  # the file appears whole, after its sidecar
        return name

    def fetch(self, name: str, api_key: str | None, keys_on: bool) -> Download:
        """The stored file ``name``, for a caller holding ``api_key``; Expired or Forbidden."""
        expired = Expired(f"the file {name[:80]!r} has expired or never existed; translate it again")
        if not _NAME.match(name):
            raise expired
        self.sweep()
        path = self.directory / name
        try:
            meta = json.loads(path.with_name(name + META).read_text())
        except (OSError, ValueError):
            raise expired from None
        if not path.exists() or float(meta.get("expires", 0)) <= time.time():
            raise expired
        if keys_on and meta.get("key") and not secrets.compare_digest(meta["key"], key_digest(api_key)):
            raise Forbidden("Invalid API key: this file was translated for another key")
        return Download(path, meta.get("filename") or "file", meta.get("media_type") or "application/octet-stream")
