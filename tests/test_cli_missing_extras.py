"""A command run where one of its optional extras is not installed (``make serve`` installs the
server only: no PyTorch, no onnx) says in one line what is missing and what to install, exit 1,
instead of a ``ModuleNotFoundError`` traceback. ``verify`` and ``inspect`` need onnx and
onnxruntime only, so their message does not send a user to install PyTorch.

Each run imports the command the way its installed script does, in a fresh interpreter where
the blocked modules cannot be imported (``sys.modules[name] = None``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODEL_DIR = ROOT / "models" / "repo" / "digits-vit"
ENTRY = {"attnserve-export": "attnserve.export.cli", "attnserve-train": "attnserve.models.training.cli"}


def run_without(blocked: tuple[str, ...], script: str, *args: str) -> subprocess.CompletedProcess:
    code = (
        f"import sys\nfor name in {blocked!r}:\n    sys.modules[name] = None\n"
        f"from {ENTRY[script]} import main\nsys.exit(main())\n"
    )
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


def one_line_error(proc: subprocess.CompletedProcess, prog: str) -> str:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), proc.stderr
    return lines[0]


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_export_verify_and_inspect_without_onnx_name_onnx_not_pytorch(command):
    line = one_line_error(
        run_without(("torch", "onnx"), "attnserve-export", command, str(MODEL_DIR)), "attnserve-export"
    )
    assert line == (
        f"attnserve-export: error: {command} needs onnx and onnxruntime (not PyTorch); "
        "onnx is not installed: pip install onnx"
    )


def test_export_verify_without_onnxruntime():
    line = one_line_error(
        run_without(("onnxruntime",), "attnserve-export", "verify", str(MODEL_DIR)), "attnserve-export"
    )
    assert "onnxruntime is not installed: pip install 'attnserve[cpu]'" in line


@pytest.mark.parametrize(
    ("blocked", "missing"), [(("torch",), "torch"), (("torch", "onnx"), "onnx")], ids=["torch", "onnx"]
)
def test_export_without_the_export_extra(blocked, missing, tmp_path):
    out = tmp_path / "mt"
    proc = run_without(blocked, "attnserve-export", "translation", "--preset", "mt-tiny", "--out", str(out))
    line = one_line_error(proc, "attnserve-export")
    assert line == (
        "attnserve-export: error: translation needs PyTorch, onnx and onnxruntime (the export extra); "
        f"{missing} is not installed: pip install 'attnserve[export]'"
    )
    assert not out.exists()


@pytest.mark.parametrize("missing", ["torch", "huggingface_hub"])
def test_pull_without_the_import_extra_says_so_before_downloading(missing, tmp_path):
    """A ``make serve`` venv has neither PyTorch nor huggingface_hub; ``pull --list`` needs neither."""
    proc = run_without((missing,), "attnserve-export", "pull", "a/b", "--model-repo", str(tmp_path / "repo"))
    line = one_line_error(proc, "attnserve-export")
    assert line == (
        "attnserve-export: error: pull needs PyTorch, transformers and huggingface_hub (the import extra); "
        f"{missing} is not installed: pip install 'attnserve[import]'"
    )
    assert not (tmp_path / "repo").exists()
    index = tmp_path / "index.json"
    index.write_text('[{"from_code": "en", "to_code": "de", "links": ["x.argosmodel"]}]')
    listed = run_without(
        ("torch", "huggingface_hub"), "attnserve-export", "pull", "--list", "--argos-index", str(index)
    )
    assert listed.returncode == 0 and "en-de" in listed.stdout, listed.stderr


def test_export_help_without_onnx():
    line = one_line_error(run_without(("torch", "onnx"), "attnserve-export", "--help"), "attnserve-export")
    assert "onnx is not installed: pip install 'attnserve[export]'" in line


def test_export_keeps_the_traceback_of_a_missing_module_of_its_own(monkeypatch):
    """Only the extras' modules become the one-line error: a missing module of attnserve is a bug."""
    from attnserve.export import cli

    def broken(args):
        raise ModuleNotFoundError("No module named 'attnserve.export.nope'", name="attnserve.export.nope")

    monkeypatch.setattr(cli, "_verify", broken)
    with pytest.raises(ModuleNotFoundError, match="attnserve.export.nope"):
        cli.main(["verify", str(MODEL_DIR)])


@pytest.mark.parametrize(
    "blocked",
    [
        ("babel",),  # an export-only venv (`make models`): PyTorch, not the data packages
        ("torch",),  # a `make serve` venv: attnserve.models loads its PyTorch modules lazily
    ],
    ids=lambda blocked: blocked[0],
)
def test_train_without_the_train_extra(blocked):
    line = one_line_error(run_without(blocked, "attnserve-train", "--help"), "attnserve-train")
    assert line == (
        "attnserve-train: error: training needs the train extra (PyTorch, data and metrics packages); "
        f"{blocked[0]} is not installed: pip install 'attnserve[train]'"
    )


def test_train_keeps_the_traceback_of_a_missing_module_of_its_own(monkeypatch):
    from attnserve.models.training import cli

    def broken():
        raise ModuleNotFoundError("No module named 'attnserve.models.nope'", name="attnserve.models.nope")

    monkeypatch.setattr(cli, "build_parser", broken)
    with pytest.raises(ModuleNotFoundError, match="attnserve.models.nope"):
        cli.main(["digits"])
