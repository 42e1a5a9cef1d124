"""Where a model directory is written: a hidden temporary sibling of ``--out``
(``.<name>.partial-*``) renamed into place once whole, so an interrupted or failed export never
leaves half a model where a server looks; and the ``--out`` paths that cannot receive one."""

from __future__ import annotations

import ctypes
import errno
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
            _swap_into_place(tmp, out)
        finally:
            if tmp.exists():  # the new model that failed, or the old one swapped out
                shutil.rmtree(tmp, ignore_errors=True)


def _swap_into_place(tmp: Path, out: Path) -> None:
    """``tmp`` becomes ``out``; an old ``out`` stays whole in place until then and ends at ``tmp``.

    One ``renameat2(RENAME_EXCHANGE)`` where the kernel and file system have it (Linux): a reader of
    ``out`` meets the old model or the new one, never neither. Elsewhere the old one is renamed
    aside (a partial folder's name: a pull removes it if the process dies here) and the new one in,
    a moment without ``out`` but never half a model; a rename that fails puts the old one back."""
    if not out.exists():
        os.replace(tmp, out)
        return
    if _exchange(tmp, out):
        return
    aside = tmp.with_name(tmp.name + ".replaced")
    os.replace(out, aside)
    try:
        os.replace(tmp, out)
    except BaseException:
        os.replace(aside, out)
        raise
    os.replace(aside, tmp)  # removed with the staging folder


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically; False where there is no such call (not Linux, an old kernel, a
    file system without it, such as NFS)."""
    renameat2 = getattr(_libc(), "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:  # no C library to look in (Windows)
        return None


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
