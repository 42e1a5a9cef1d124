"""Where a model directory is written: a hidden temporary sibling of ``--out``
(``.<name>.partial-*``) renamed into place once whole, so an interrupted or failed export never
leaves half a model where a server looks; and the ``--out`` paths that cannot receive one."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import partials
from .errors import ExportError


@contextmanager
def staged_directory(out: Path, force: bool = False) -> Iterator[Path]:
    """Yield an empty temporary directory beside ``out``; on success it replaces ``out``.

    Refuses an existing non-empty ``out`` unless ``force``. On any error the temporary
    directory is removed and ``out`` is left as it was.
    """
    out = _checked_out(out, force)
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"cannot write to {parent}: {exc.strerror or exc}") from None
    with partials.writing(parent):  # held while the partial folder exists: a pull leaves it alone
        try:
            tmp = Path(tempfile.mkdtemp(prefix=partials.prefix(out.name), dir=parent))
            os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it 0700; the server may run as another user
        except OSError as exc:
            raise ExportError(f"cannot write to {parent}: {exc.strerror or exc}") from None
        try:
            yield tmp
            if out.exists():
                shutil.rmtree(out)
            os.replace(tmp, out)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


def _checked_out(given: Path, force: bool) -> Path:
    """``given`` as an absolute path (``.`` and ``a/..`` have no name of their own to stage beside),
    or ExportError when it cannot receive the model directory."""
    out = Path(os.path.abspath(given))
    try:
        cwd = Path.cwd()
    except OSError:  # the current directory was removed: nothing under it to protect
        cwd = None
    if cwd is not None and out.resolve() in (cwd, *cwd.parents):  # replacing it pulls it from under the shell
        raise ExportError(
            f"--out {given} is the current directory or holds it, and the export replaces that directory; "
            "run it from another directory or name a new one"
        )
    if out.is_symlink():  # the new directory would replace the link, not what it points to
        raise ExportError(
            f"--out {given} is a symbolic link (to {os.readlink(out)}); name the directory itself, or remove the link"
        )
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {given} exists and is not a directory")
    models = sorted(p.name for p in out.iterdir() if (p / "model.json").is_file()) if out.is_dir() else []
    if models:  # a repository named where one model's folder was meant: --force would delete them all
        shown = ", ".join(models[:3]) + (", ..." if len(models) > 3 else "")
        raise ExportError(
            f"--out {given} holds model directories ({shown}): a model repository, which is never replaced; "
            f"name the model's own folder, {given}/NAME"
        )
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ExportError(f"--out {given} exists and is not empty (use --force to replace it)")
    return out


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
