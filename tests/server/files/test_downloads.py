"""The download store (``server.files.download_store``): an index in memory, so that a save or a
fetch never lists the directory; a cap on files and on the bytes the disk really holds
(sidecars and whole blocks counted); a restart rebuilds the index once and serves what was
promised; expired files are swept without anyone asking for them."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from attnserve.server.files.download_store import DownloadStore, Expired


def on_disk(directory: Path) -> int:
    return sum(max(p.stat().st_blocks * 512, p.stat().st_size) for p in directory.iterdir())


def test_a_save_or_fetch_never_lists_the_directory(tmp_path, monkeypatch):
    store = DownloadStore(tmp_path, 3600, 1 << 30, max_files=100)
    listed = []
    real = Path.iterdir
    monkeypatch.setattr(Path, "iterdir", lambda self: listed.append(self) or real(self))
    names = [store.save(b"translated", f"f{i}.txt", "text/plain", None) for i in range(50)]
    found = store.fetch(names[7], None, keys_on=False)
    assert found.path.read_bytes() == b"translated" and found.filename == "f7.txt"
    assert listed == []  # 50 saves and a fetch: not one listing (each listed every file before)


def test_files_are_capped_in_number_and_in_bytes_on_disk(tmp_path):
    store = DownloadStore(tmp_path, 3600, 1 << 30, max_files=3)
    names = [store.save(b"x", f"f{i}.txt", "text/plain", None) for i in range(5)]
    assert len(store) == 3 and len(list(tmp_path.iterdir())) == 6  # three files and their sidecars
    with pytest.raises(Expired):
        store.fetch(names[0], None, keys_on=False)
    assert store.fetch(names[4], None, keys_on=False).path.exists()

    limit = 64 << 10  # ten-byte files take a block each, and so do their sidecars
    small = DownloadStore(tmp_path / "small", 3600, limit, max_files=1000)
    for i in range(40):
        small.save(b"0123456789", f"f{i}.txt", "text/plain", None)
    assert on_disk(tmp_path / "small") <= limit, "the disk holds more than --max-download-bytes"
    assert small.bytes == on_disk(tmp_path / "small")


def test_a_restart_rebuilds_the_index_once(tmp_path):
    first = DownloadStore(tmp_path, 3600, 1 << 30)
    kept = first.save(b"kept", "a.txt", "text/plain", "key")
    (tmp_path / ".half.txt.tmp").write_bytes(b"a save cut short")
    (tmp_path / ("B" * 32 + ".b.txt")).write_bytes(b"no sidecar")
    (tmp_path / ("C" * 32 + ".c.txt.json")).write_text("{}")
    second = DownloadStore(tmp_path, 3600, 1 << 30)
    assert second.fetch(kept, "key", keys_on=True).path.read_bytes() == b"kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([kept, kept + ".json"])
    assert second.bytes == on_disk(tmp_path)


def test_expired_files_are_swept_and_fetches_see_them_gone(tmp_path):
    store = DownloadStore(tmp_path, 0.2, 1 << 30)
    name = store.save(b"soon gone", "a.txt", "text/plain", None)
    time.sleep(0.3)
    with pytest.raises(Expired):
        store.fetch(name, None, keys_on=False)
    store.sweep()
    assert os.listdir(tmp_path) == [] and len(store) == 0 and store.bytes == 0
