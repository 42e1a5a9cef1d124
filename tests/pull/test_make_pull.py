"""``make pull`` / ``make serve`` build the pull's command line from LANGUAGES, MODELS, PULL_REPO and
ARGOS_INDEX as a user writes them (``make -n``: the commands, none run)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.server import BIN

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def pull_command(tmp_path: Path, *variables: str) -> list[str]:
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "bin").symlink_to(BIN)
    (venv / ".import-installed").touch()  # installed: make runs (here: prints) the pull alone
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(ROOT), "pull", f"VENV={venv}", *variables],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    lines = done.stdout.replace("\\\n", " ").splitlines()  # the recipe's continued lines, joined
    line = next(line for line in lines if "attnserve-export pull" in line)
    return shlex.split(line)[1:]


def test_a_language_list_with_spaces_and_paths_with_spaces_reach_the_pull_whole(tmp_path):
    args = pull_command(
        tmp_path, "LANGUAGES=en, de, fr", "PULL_REPO=my models", "ARGOS_INDEX=/mnt/argos mirror",
        "MODELS=Helsinki-NLP/opus-mt-en-de argos:en-es",
    )  # fmt: skip
    assert args == [
        "pull", "Helsinki-NLP/opus-mt-en-de", "argos:en-es", "--languages", "en, de, fr",
        "--model-repo", "my models", "--argos-index", "/mnt/argos mirror",
    ]  # fmt: skip
