"""Real models in the images, checked without a docker daemon: the Dockerfile's ``pull`` stage,
the compose stack's one-shot ``models`` service that fills the server's models volume from
``ATTNSERVE_LANGUAGES`` / ``ATTNSERVE_PULL_MODELS`` before the server starts, and the entry
script both run, executed here with a stand-in ``attnserve-export`` that records its arguments."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import DOCKER, DOCKERFILES, environment, parse_dockerfile, resolved_compose

SCRIPT = DOCKER / "pull-models.sh"


def test_the_pull_stage_adds_the_import_extra_and_runs_the_script():
    dockerfile = parse_dockerfile(DOCKERFILES["cpu"])
    pull = dockerfile.stage("pull")
    assert dockerfile.stages[-1].name == "runtime", "a plain build still ends in the torch-free runtime"
    assert pull.exec_form("ENTRYPOINT") == ["pull-models"]
    assert any("--extra import" in run for run in pull.all("RUN"))
    assert "docker/pull-models.sh /opt/build/bin/pull-models" in pull.all("COPY")
    assert pull.env()["ATTNSERVE_MODEL_REPO"] == "/models"
    assert not any("pull" in args for args in dockerfile.stages[-1].all("COPY"))


def test_the_models_service_fills_the_servers_volume_before_it_starts():
    compose = resolved_compose({"ATTNSERVE_LANGUAGES": "en,de,fr"})
    models, server = compose["services"]["models"], compose["services"]["attnserve"]
    assert "profiles" not in models and models["restart"] == "no"
    assert models["build"]["target"] == "pull"
    assert server["depends_on"]["models"]["condition"] == "service_completed_successfully"
    # the same volume, read-only for the server and writable for the pull (`compose config` of v1
    # spells a writable mount "name:/models:rw", the file itself "name:/models")
    volume = next(str(v) for v in server["volumes"] if str(v).endswith(":/models:ro"))
    assert volume.removesuffix(":ro") in [str(v).removesuffix(":rw") for v in models["volumes"]]
    assert environment(models)["ATTNSERVE_LANGUAGES"] == "en,de,fr"
    assert environment(resolved_compose({})["services"]["models"])["ATTNSERVE_LANGUAGES"] == ""


@pytest.fixture
def run_script(tmp_path):
    """run_script(env) -> (exit code, output, the arguments attnserve-export got or None)."""
    record = tmp_path / "args"
    fake = tmp_path / "bin" / "attnserve-export"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\nexit "${{FAKE_EXIT:-0}}"\n')
    fake.chmod(0o755)

    def run(env: dict, *args: str):
        record.unlink(missing_ok=True)
        path = f"{fake.parent}:{os.environ['PATH']}"
        done = subprocess.run(
            ["sh", str(SCRIPT), *args], env={"PATH": path, **env}, capture_output=True, text=True, timeout=30
        )
        got = record.read_text().splitlines() if record.exists() else None
        return done.returncode, done.stdout + done.stderr, got

    return run


def test_the_entry_script_pulls_what_the_environment_names(run_script):
    code, out, args = run_script({})
    assert (code, args) == (0, None) and "nothing to pull" in out
    assert run_script({"ATTNSERVE_LANGUAGES": "en,de"})[2] == ["pull", "--languages", "en,de"]
    _, _, args = run_script({"ATTNSERVE_PULL_MODELS": "Helsinki-NLP/opus-mt-en-de argos:en-es"})
    assert args == ["pull", "Helsinki-NLP/opus-mt-en-de", "argos:en-es"]
    _, _, args = run_script({"ATTNSERVE_PULL_MODELS": "a/b", "ATTNSERVE_LANGUAGES": "fr,it"})
    assert args == ["pull", "a/b", "--languages", "fr,it"]
    code, out, args = run_script({"ATTNSERVE_LANGUAGES": "en,de", "FAKE_EXIT": "1"})
    assert code == 0 and "failed to pull" in out  # the server still starts, with what did install
    code, _, args = run_script({"FAKE_EXIT": "3"}, "--list")
    assert (code, args) == (3, ["pull", "--list"])


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_the_entry_script_passes_shellcheck():
    subprocess.run(["shellcheck", "-s", "sh", str(SCRIPT)], check=True)


def test_the_script_is_in_the_build_context():
    from .test_static import _dockerignored

    assert not _dockerignored("docker/pull-models.sh")
    assert os.access(SCRIPT, os.X_OK) and Path(SCRIPT).read_text().startswith("#!/bin/sh")


def test_docker_stop_reaches_the_pull_through_the_entry_script(tmp_path):
    """The script is the container's PID 1 (docker stop, a deleted pod: SIGTERM to it alone): it
    passes the signal on, so the pull removes what it was writing and reports, rather than being
    killed outright when the grace period ends; and exits as the stopped pull does, not 0."""
    import contextlib
    import signal
    import time

    started, stopped = tmp_path / "started", tmp_path / "stopped"
    fake = tmp_path / "bin" / "attnserve-export"
    fake.parent.mkdir()
    fake.write_text(
        f"#!/bin/sh\ntrap 'echo TERM > {stopped}; exit 143' TERM\necho $$ > {started}\nwhile :; do sleep 0.1; done\n"
    )
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:{os.environ['PATH']}", "ATTNSERVE_LANGUAGES": "en,de"}
    script = subprocess.Popen(["sh", str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while not (started.exists() and started.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        script.send_signal(signal.SIGTERM)
        code = script.wait(timeout=10)
        deadline = time.monotonic() + 5
        while not stopped.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        if script.poll() is None:
            script.kill()
        if started.exists() and not stopped.exists():  # the pull the script left running
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(started.read_text()), signal.SIGKILL)
    assert stopped.exists(), "the pull never got the SIGTERM"
    assert code == 143
