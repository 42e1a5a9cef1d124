"""A pull stopped part way, as ``docker stop`` (SIGTERM), an OOM kill (SIGKILL) or Ctrl-C stop it:
the model being written leaves nothing in the repository, a folder a killed pull left is removed by
the next pull (never one a live writer holds), and what was installed before the stop is reported.

The pull runs in its own process, against a local Argos index folder; its export writes only
``model.json`` and, for the pairs named in ``SLOW``, then waits to be stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from attnserve.export import partials

PULL = textwrap.dedent("""
    import os, sys, time
    from attnserve.export.modeldir import staged_directory
    from attnserve.export.pull import install

    def export_pulled(item, source, out, settings):
        with staged_directory(out, force=settings.force) as tmp:
            (tmp / "model.json").write_text("{}")
            if item.label in os.environ["SLOW"].split(","):
                print("writing", item.label, file=sys.stderr, flush=True)
                time.sleep(120)
        return type("R", (), {"manifest": type("M", (), {"kind": "translation", "precision": "fp32"})})

    install.load_source = lambda item, local: local
    install.export_pulled = export_pulled
    from attnserve.export.cli import main
    sys.exit(main(sys.argv[1:]))
""")


@pytest.fixture
def index(tmp_path):
    root = tmp_path / "argos"
    root.mkdir()
    entries = []
    for s, t in (("en", "de"), ("de", "en")):
        name = f"translate-{s}_{t}-1_0.argosmodel"
        (root / name).write_bytes(b"PK package")
        entries.append({"from_code": s, "to_code": t, "package_version": "1.0", "links": [name]})
    (root / "index.json").write_text(json.dumps(entries))
    return root


def start(tmp_path, index, *names, slow=""):
    env = {**os.environ, "SLOW": slow, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    cmd = [sys.executable, "-c", PULL, "pull", *names, "--argos-index", str(index),
           "--model-repo", str(tmp_path / "repo"), "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop_while_writing(process, sig):
    lines = []
    while not (lines and lines[-1].startswith("writing")):
        line = process.stderr.readline()
        assert line, "".join(lines)
        lines.append(line)
    process.send_signal(sig)
    out, err = process.communicate(timeout=60)
    return process.returncode, out, "".join(lines) + err


def test_sigterm_removes_what_it_was_writing_and_a_kill_leaves_it_to_the_next_pull(tmp_path, index):
    repo = tmp_path / "repo"
    code, _, err = stop_while_writing(start(tmp_path, index, "argos:en-de", slow="argos:en-de"), signal.SIGTERM)
    assert code == 143, err
    assert "interrupted" in err and "Traceback" not in err
    assert list(repo.iterdir()) == []
    stop_while_writing(start(tmp_path, index, "argos:en-de", slow="argos:en-de"), signal.SIGKILL)
    assert [p.name.startswith(".argos-en-de.partial-") for p in repo.iterdir()] == [True]
    done = start(tmp_path, index, "argos:en-de")
    out, err = done.communicate(timeout=120)
    assert done.returncode == 0, err
    assert sorted(p.name for p in repo.iterdir()) == ["argos-en-de"]


def test_a_partial_folder_whose_writer_is_alive_is_kept(run, argos, hub, fake_export, tmp_path):
    repo = tmp_path / "repo"
    live = repo / ".opus-mt-en-de.partial-x1"
    live.mkdir(parents=True)
    with partials.writing(repo):  # another export, still writing
        code, _, err = run("pull", "Helsinki-NLP/opus-mt-en-de", "--model-repo", repo)
    assert code == 0, err
    assert live.is_dir() and (repo / "opus-mt-en-de" / "model.json").is_file()
    code, _, err = run("pull", "Helsinki-NLP/opus-mt-en-de", "--model-repo", repo, "--force")  # that export died
    assert code == 0 and f"removed {live}" in err
    assert sorted(p.name for p in repo.iterdir()) == ["opus-mt-en-de"]


def test_ctrl_c_reports_the_models_installed_before_it(tmp_path, index):
    pull = start(tmp_path, index, "argos:en-de", "argos:de-en", slow="argos:de-en")
    code, out, err = stop_while_writing(pull, signal.SIGINT)
    assert code == 130, err
    assert "installed argos:en-de -> argos-en-de" in out and "1 of 2 model(s)" in out
    assert "interrupted during argos:de-en: nothing of it was written" in err
    assert "nothing was written" not in err.replace("nothing of it was written", "")
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == ["argos-en-de"]


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def test_ctrl_c_stops_a_hub_download_at_once(hub):
    """Ctrl-C (or SIGTERM) during a Hub download stops it then, not once every file being fetched
    is whole: a stalled weight file must not hold the pull."""
    from attnserve.export.pull.hub import download_snapshot

    hub.stalled.add(("Helsinki-NLP/opus-mt-en-de", "model.safetensors"))
    previous = signal.signal(signal.SIGALRM, _interrupt)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            download_snapshot("Helsinki-NLP/opus-mt-en-de")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - started < 5
