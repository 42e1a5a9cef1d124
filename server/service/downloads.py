"""Translated files kept for download (LibreTranslate's ``/download_file/<name>``), for the door
that offers them: the store of ``files.download_store`` in ``--download-dir`` (else a folder per
model repository), its blocking file work on the bounded work pool, off the event loop, and its
expired files deleted on a timer so that no save or fetch pays for them.

The door that serves downloads opens the store as it is built (``open``: the folder made, its index
read from it, so a restarted server serves what it promised; a folder it cannot make stops the
server before it serves) and runs the timer while it serves (``start`` / ``stop``); a server
without that door keeps no folder."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

import langcodes

from ..files.download_store import Download, DownloadStore, safe_filename
from ..shared.config import ConfigError, Settings
from ..shared.locations import per_repository_dir

log = logging.getLogger(__name__)

SWEEP_S = 60.0  # at most, between two sweeps of the store
T = TypeVar("T")


def translated_filename(filename: str, target: str) -> str:
    """``report.docx`` -> ``report.de.docx``: the name ``attnserve-client translate-file`` gives it,
    as stored (``safe_filename``: a long name's stem is cut, never the language), the language as
    BCP 47 spells it whatever case it was asked in (``DE``: ``report.de.docx``, ``PT-br``:
    ``report.pt-BR.docx``). No ``target`` (a model that declares no languages, asked for none):
    there is no language to name it for, so ``report.docx``, as a file job's result and DeepL's
    document are named."""
    return safe_filename(filename or "file", f".{_spelled(target)}" if target else "")


def _spelled(target: str) -> str:
    try:
        return langcodes.standardize_tag(target)
    except (langcodes.tag_parser.LanguageTagError, ValueError):
        return target  # a model's own code that is no tag: as it is served


class Downloads:
    """See the module docstring; one per server, in the doors' context."""

    def __init__(self, settings: Settings, pool: Executor) -> None:
        self.settings, self._pool = settings, pool
        self._store: DownloadStore | None = None
        self._sweeper: asyncio.Task | None = None

    @property
    def store(self) -> DownloadStore:
        if self._store is None:
            raise RuntimeError("the download store is not open: start() it first")
        return self._store

    def open(self) -> None:
        s = self.settings
        folder = s.download_dir or per_repository_dir("attnserve-downloads", s.model_repo)
        try:
            self._store = DownloadStore(folder, s.download_retention_s, s.max_download_bytes, s.max_download_files)
        except OSError as exc:
            raise ConfigError(f"download_dir: cannot use the folder {folder}: {exc.strerror or exc}") from None

    def start(self) -> None:
        """Sweep the open store on a timer (on the running event loop)."""
        self._sweeper = asyncio.ensure_future(self._sweep())

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None

    async def save(self, content: bytes, filename: str, media_type: str, api_key: str | None) -> str:
        """Keep a translated file; its name in the download URL."""
        return await self._off_loop(self.store.save, content, filename, media_type, api_key)

    async def fetch(self, name: str, api_key: str | None, keys_on: bool) -> Download:
        """A kept file by its URL's name (404 once expired; 403 for another key than its own, with keys on)."""
        return await self._off_loop(self.store.fetch, name, api_key, keys_on)

    async def _sweep(self) -> None:
        every = min(SWEEP_S, self.store.retention_s / 4)
        while True:
            await asyncio.sleep(every)
            try:
                await self._off_loop(self.store.sweep)
            except OSError as exc:  # a full or vanished disk: the next sweep tries again
                log.warning("downloads: sweep failed: %s", exc)

    async def _off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
