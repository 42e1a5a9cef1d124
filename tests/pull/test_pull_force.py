"""``pull --force`` over a model already installed: a server reading the repository sees the old
model, whole, until the new one is whole, then the new one (one rename swaps them, never a moment
with the folder gone or half deleted); a pull that fails (a download, an export) leaves the old
model as it was and says so."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import pytest

FILES = 3000  # a model of many files: deleting the old one takes long enough to be seen doing it
PACKAGE = "translate-en_de-1_0.argosmodel"


@pytest.fixture
def many_files_export(monkeypatch):
    """Installs write ``model.json`` (naming the run) and FILES files, through the export's own
    hidden folder renamed into place; ``fail`` set: the export stops half-way with an error."""
    from attnserve.export.errors import ExportError
    from attnserve.export.pull import install
    from attnserve.export.staging import staged_directory

    state = SimpleNamespace(runs=0, fail=False)

    def export_pulled(item, source, out, settings):
        state.runs += 1
        with staged_directory(out, force=settings.force) as tmp:
            for i in range(FILES):
                (tmp / f"part-{i}.bin").write_bytes(b"%d" % state.runs)
                if state.fail and i == FILES // 2:
                    raise ExportError(f"{item.label}: the export failed half-way")
            pulled = {"pulled": item.origin, "run": state.runs}
            (tmp / "model.json").write_text(json.dumps({"extra": {"source": pulled}}))
        return SimpleNamespace(manifest=SimpleNamespace(kind="translation", precision="fp32"))

    monkeypatch.setattr(install, "load_source", lambda item, local: local)
    monkeypatch.setattr(install, "export_pulled", export_pulled)
    return state


def run_of(model):
    return json.loads((model / "model.json").read_text())["extra"]["source"]["run"]


def test_force_swaps_the_model_without_a_moment_of_a_missing_or_half_model(run, hub, many_files_export, tmp_path):
    repo = tmp_path / "repo"
    model = repo / "opus-mt-en-de"
    assert run("pull", "Helsinki-NLP/opus-mt-en-de", "--model-repo", repo)[0] == 0
    sample = [model / "model.json", *(model / f"part-{i}.bin" for i in range(0, FILES, FILES // 50))]
    seen, done = [], threading.Event()

    def watch():  # what a server's reads meet, by path, all through the pull
        while not done.is_set():
            seen.append(sum(not path.is_file() for path in sample))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        code, out, err = run("pull", "Helsinki-NLP/opus-mt-en-de", "--model-repo", repo, "--force")
    finally:
        done.set()
        watcher.join()
    assert code == 0, err
    assert run_of(model) == 2 and len(list(model.iterdir())) == FILES + 1
    assert len(seen) > 100 and max(seen) == 0, f"{sum(map(bool, seen))} of {len(seen)} looks missed files"
    assert sorted(p.name for p in repo.iterdir()) == ["opus-mt-en-de"]  # the old one is not left aside


def test_a_failed_force_pull_keeps_the_old_model_and_says_so(run, argos, many_files_export, tmp_path):
    repo, cache = tmp_path / "repo", tmp_path / "cache"
    model = repo / "argos-en-de"
    (argos.root / PACKAGE).write_bytes(b"PK a package")
    pull = ("pull", "argos:en-de", "--argos-index", f"{argos.url}/index.json", "--model-repo", repo,
            "--cache-dir", cache)  # fmt: skip
    assert run(*pull)[0] == 0
    (cache / "argos" / PACKAGE).unlink()
    argos.missing.add(PACKAGE)  # the download fails
    code, out, err = run(*pull, "--force")
    assert code == 1 and "HTTP 404" in err
    assert f"{model} is kept as it was" in err
    assert run_of(model) == 1 and len(list(model.iterdir())) == FILES + 1
    argos.missing.clear()
    many_files_export.fail = True  # the download works; the export fails half-way
    code, out, err = run(*pull, "--force")
    assert code == 1 and "the export failed half-way" in err and f"{model} is kept as it was" in err
    assert run_of(model) == 1 and len(list(model.iterdir())) == FILES + 1
    assert sorted(p.name for p in repo.iterdir()) == ["argos-en-de"]


def test_force_where_the_file_system_cannot_exchange_two_folders(run, hub, many_files_export, tmp_path, monkeypatch):
    """NFS, or a kernel without renameat2: the old model is renamed aside, the new one in, the old removed."""
    from attnserve.export import staging

    monkeypatch.setattr(staging, "_exchange", lambda a, b: False)
    repo = tmp_path / "repo"
    assert run("pull", "Helsinki-NLP/opus-mt-en-de", "--model-repo", repo)[0] == 0
    code, _, err = run("pull", "Helsinki-NLP/opus-mt-en-de", "--model-repo", repo, "--force")
    assert code == 0, err
    assert run_of(repo / "opus-mt-en-de") == 2 and len(list((repo / "opus-mt-en-de").iterdir())) == FILES + 1
    assert sorted(p.name for p in repo.iterdir()) == ["opus-mt-en-de"]
