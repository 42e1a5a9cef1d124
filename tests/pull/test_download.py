"""Downloads of ``attnserve-export pull``: resumed with Range after a dropped connection, checked
against the source's sha256, a 404 refused at once, and nothing but a ``.part`` file left behind
by a failure (the final name holds only whole, checked files)."""

from __future__ import annotations

import hashlib

import pytest

from attnserve.export.pull import download as downloads
from attnserve.export.pull.download import download
from attnserve.export.pull.errors import PullError
from tests.support.stand_ins import FileStandIn

DATA = bytes(range(256)) * 4096  # 1 MiB: more than one read chunk


@pytest.fixture
def files(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    (root / "pkg.argosmodel").write_bytes(DATA)
    with FileStandIn(root) as stand_in:
        yield stand_in


def test_a_dropped_connection_is_resumed_with_range(files, tmp_path):
    files.cut_once["pkg.argosmodel"] = 300_000
    dest = download(f"{files.url}/pkg.argosmodel", tmp_path / "cache" / "pkg.argosmodel", show=False)
    assert dest.read_bytes() == DATA
    ranges = [r for method, path, r in files.requests if path == "pkg.argosmodel"]
    assert ranges == [None, "bytes=300000-"], ranges
    assert sorted(p.name for p in dest.parent.iterdir()) == ["pkg.argosmodel"]


def test_an_interrupted_run_leaves_a_part_file_the_next_run_resumes(files, tmp_path, monkeypatch):
    monkeypatch.setattr(downloads, "ATTEMPTS", 1)
    monkeypatch.setattr(downloads.time, "sleep", lambda s: None)
    files.cut_once["pkg.argosmodel"] = 100_000
    dest = tmp_path / "cache" / "pkg.argosmodel"
    with pytest.raises(PullError, match="connection dropped"):
        download(f"{files.url}/pkg.argosmodel", dest, show=False)
    assert not dest.exists()
    assert (tmp_path / "cache" / "pkg.argosmodel.part").stat().st_size == 100_000
    download(f"{files.url}/pkg.argosmodel", dest, show=False)
    assert dest.read_bytes() == DATA
    assert files.requests[-1][2] == "bytes=100000-"


def test_a_checksum_mismatch_keeps_nothing(files, tmp_path):
    dest = tmp_path / "cache" / "pkg.argosmodel"
    with pytest.raises(PullError, match="checksum mismatch"):
        download(f"{files.url}/pkg.argosmodel", dest, sha256="ab" * 32, show=False)
    assert list(dest.parent.iterdir()) == []
    good = hashlib.sha256(DATA).hexdigest()
    assert download(f"{files.url}/pkg.argosmodel", dest, sha256=good, show=False).read_bytes() == DATA


def test_a_404_is_not_retried(files, tmp_path):
    with pytest.raises(PullError, match="HTTP 404"):
        download(f"{files.url}/missing.argosmodel", tmp_path / "m.argosmodel", show=False)
    assert [path for _, path, _ in files.requests] == ["missing.argosmodel"]
    assert not list(tmp_path.glob("m.argosmodel*"))


def test_a_local_mirror_path_is_copied(tmp_path):
    source = tmp_path / "mirror" / "pkg.argosmodel"
    source.parent.mkdir()
    source.write_bytes(DATA[:1000])
    dest = download(str(source), tmp_path / "cache" / "pkg.argosmodel", show=False)
    assert dest.read_bytes() == DATA[:1000]
    with pytest.raises(PullError, match="cannot read"):
        download(str(tmp_path / "mirror" / "nope"), tmp_path / "cache" / "nope", show=False)


def test_two_pulls_of_one_file_download_it_once(files, tmp_path, monkeypatch):
    """A second pull sharing the cache waits for the first's download, then uses the whole file."""
    import threading

    started, go_on, fetched = threading.Event(), threading.Event(), []
    fetch = downloads._fetch

    def slow_fetch(url, part, label, show):
        fetched.append(url)
        fetch(url, part, label, show)
        started.set()
        assert go_on.wait(10)

    monkeypatch.setattr(downloads, "_fetch", slow_fetch)
    dest, results = tmp_path / "cache" / "pkg.argosmodel", []

    def pull():
        try:
            results.append(download(f"{files.url}/pkg.argosmodel", dest, show=False).read_bytes())
        except Exception as exc:  # noqa: BLE001 - what the second pull met is the assertion
            results.append(exc)

    first = threading.Thread(target=pull)
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=pull)
    second.start()
    second.join(0.5)
    go_on.set()
    first.join(10)
    second.join(10)
    assert results == [DATA, DATA] and len(fetched) == 1
    assert sorted(p.name for p in dest.parent.iterdir()) == ["pkg.argosmodel"]


def test_a_cache_folder_that_is_a_file_is_one_line(files, tmp_path):
    (tmp_path / "cache").write_text("not a folder")
    with pytest.raises(PullError, match=r"^pkg: cannot write to .*cache.*: Not a directory$"):
        download(f"{files.url}/pkg.argosmodel", tmp_path / "cache" / "argos" / "pkg.argosmodel", label="pkg")
