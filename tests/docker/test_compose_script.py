"""docker/compose.sh, the README's docker commands, against fake ``docker`` and
``docker-compose`` executables that record their arguments: it picks whichever compose the
machine has, builds offline by default, and a failed build leaves nothing behind. (The real
stack is built and started by test_compose_stack.py where a Docker daemon answers.)"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import DOCKER

SCRIPT = DOCKER / "compose.sh"
FAKE = """#!/usr/bin/env bash
# a fake docker CLI: records its arguments; its state lives in files under $FAKE
echo "$(basename "$0") $*" >> "$FAKE/log"
if [ "$(basename "$0")" = docker-compose ]; then set -- compose "$@"; fi
case "$1 ${2:-}" in
"compose version") [ -e "$FAKE/plugin" ] || [ "$(basename "$0")" = docker-compose ] ;;
"image inspect") shift 2; for image in "$@"; do grep -qxF "$image" "$FAKE/tagged" || exit 1; done ;;
"images -a") cat "$FAKE/untagged" ;;
"rmi "*) exit 0 ;;
compose*)
    case " $* " in
    *" build "*) echo "layer$RANDOM <none>" >> "$FAKE/untagged"; [ ! -e "$FAKE/build-fails" ] ;;
    *) exit 0 ;;
    esac ;;
*) exit 0 ;;
esac
"""


@pytest.fixture
def fake(tmp_path) -> Path:
    state = tmp_path / "state"
    state.mkdir()
    (state / "log").touch()
    (state / "untagged").write_text("old1 <none>\n")
    (state / "tagged").write_text("attnserve-base:py311-bookworm\n")
    (tmp_path / "bin").mkdir()
    wheels = tmp_path / "wheelhouse"
    wheels.mkdir()
    (wheels / "numpy-2.0-py3-none-any.whl").touch()
    return tmp_path


def _run(fake: Path, *args: str, clis: tuple[str, ...] = ("docker",)) -> subprocess.CompletedProcess:
    for cli in clis:
        (fake / "bin" / cli).write_text(FAKE)
        (fake / "bin" / cli).chmod(0o755)
    env = {
        "PATH": f"{fake / 'bin'}:{_system_tools(fake)}",
        "FAKE": str(fake / "state"),
        "ATTNSERVE_WHEELHOUSE": str(fake / "wheelhouse"),
        "HOME": os.environ.get("HOME", "/tmp"),
    }
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def _system_tools(fake: Path) -> Path:
    """The machine's commands, less any real docker CLI (CI installs docker.io and docker-compose):
    the script must see only the fakes."""
    tools = fake / "tools"
    if not tools.is_dir():
        tools.mkdir()
        for folder in (Path("/usr/bin"), Path("/bin")):
            for exe in folder.iterdir():
                if not exe.name.startswith("docker") and not (tools / exe.name).exists():
                    (tools / exe.name).symlink_to(exe)
    return tools


def _log(fake: Path) -> list[str]:
    return (fake / "state" / "log").read_text().splitlines()


def test_docker_compose_v2_when_the_cli_has_the_plugin(fake):
    (fake / "state" / "plugin").touch()
    assert _run(fake, "ps", clis=("docker", "docker-compose")).returncode == 0
    assert _log(fake)[-1] == "docker compose -f docker/docker-compose.yml ps"


def test_docker_compose_v1_where_only_it_exists(fake):
    assert _run(fake, "stop", clis=("docker", "docker-compose")).returncode == 0
    assert _log(fake)[-1] == "docker-compose -f docker/docker-compose.yml stop"


def test_no_compose_at_all_is_one_clear_line(fake):
    run = _run(fake, "up")
    assert run.returncode == 1
    assert run.stderr == "compose.sh: neither 'docker compose' nor 'docker-compose' is installed\n"


def test_up_builds_offline_from_the_local_base_image_then_starts_detached(fake):
    (fake / "state" / "plugin").touch()
    run = _run(fake, "up")
    assert run.returncode == 0, run.stderr
    log = _log(fake)
    assert "docker compose -f docker/docker-compose.yml build" in log
    assert log[-1] == "docker compose -f docker/docker-compose.yml up -d"
    assert not any(line.startswith("docker pull") for line in log)  # no registry


@pytest.mark.parametrize("tagged", [["attnserve:cpu"], ["attnserve:cpu", "attnserve:pull"]], ids=["one", "both"])
def test_up_builds_when_the_server_or_the_models_image_is_missing(fake, tagged):
    (fake / "state" / "plugin").touch()
    with open(fake / "state" / "tagged", "a") as f:
        f.write("".join(f"{image}\n" for image in tagged))
    assert _run(fake, "up").returncode == 0
    built = "docker compose -f docker/docker-compose.yml build" in _log(fake)
    assert built == (len(tagged) == 1)  # the models service's attnserve:pull is built with the server's


def test_a_failed_build_leaves_nothing_behind(fake):
    (fake / "state" / "build-fails").touch()
    run = _run(fake, "up", clis=("docker", "docker-compose"))
    assert run.returncode != 0
    assert "failed; removing what this run made" in run.stderr
    log = _log(fake)
    assert "docker-compose -f docker/docker-compose.yml down --volumes --remove-orphans" in log
    (removed,) = [line for line in log if line.startswith("docker rmi")]
    new_layer = (fake / "state" / "untagged").read_text().split()[2]
    assert removed == f"docker rmi -f {new_layer}"  # the build's layer, not the one that was there before
    assert "up -d" not in " ".join(log)
