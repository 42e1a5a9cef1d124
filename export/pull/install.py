"""Import, export, verify and install one pulled model into a model repository.

The import is the one ``attnserve-export translation --from-hf`` / ``vit --from-hf-vit`` /
``translation --from-argos`` runs (:mod:`attnserve.export.sources`), and the export the one of
:mod:`attnserve.export.pipeline`, which writes into a hidden ``.<name>.partial-*`` folder of the
repository and renames it into place once verified: a server scanning the repository (it skips
hidden folders) sees the whole model or none of it, and a failure leaves nothing behind.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnserve.contract.manifest import Languages, ManifestError

from .. import partials
from ..errors import ExportError

log = logging.getLogger(__name__)

INSTALLED, PRESENT, FAILED = "installed", "present", "failed"


@dataclass(frozen=True)
class PullItem:
    """One model to pull: what the user named, the directory it installs as, how to fetch it."""

    label: str  # as given: Helsinki-NLP/opus-mt-en-de, argos:en-de
    name: str  # the model directory in the repository
    kind: str  # "hub" | "argos"
    fetch: Callable[[], Path]  # downloads (or finds in the cache) -> local snapshot folder or package file
    origin: dict[str, Any] = field(default_factory=dict)  # recorded in model.json extra.source.pulled


@dataclass(frozen=True)
class Outcome:
    label: str
    name: str
    status: str  # INSTALLED | PRESENT | FAILED
    detail: str = ""


@dataclass(frozen=True)
class InstallSettings:
    """The export flags ``pull`` takes (the rest are the export defaults)."""

    precision: str = "fp32"
    verify: bool = True
    force: bool = False
    threads: int = 0
    device: str = "cpu"


def installed_models(repo: Path) -> list[str]:
    """Model directories of ``repo`` (as the server finds them: not hidden, with a model.json)."""
    if not repo.is_dir():
        return []
    return sorted(p.name for p in repo.iterdir() if not p.name.startswith(".") and (p / "model.json").is_file())


def install(item: PullItem, repo: Path, settings: InstallSettings) -> Outcome:
    """Fetch, import, export and install ``item``; a failure is the outcome, never a raise
    (KeyboardInterrupt aside), so the other items still install."""
    out = repo / item.name
    held = pulled_origin(out)
    if held is not None and not settings.force:
        if same_origin(held, item.origin):
            return Outcome(item.label, item.name, PRESENT, f"{out} (use --force to pull it again)")
        return Outcome(
            item.label, item.name, FAILED, f"{out} holds another model ({held_by(held)}); --force replaces it"
        )
    problem = target_problem(out, repo, settings.force)  # before the download: it may be long
    if problem:
        return Outcome(item.label, item.name, FAILED, problem)
    for stale in partials.remove_stale(repo, item.name):
        print(f"  removed {repo / stale} (left by an export or pull that was stopped)", file=sys.stderr)
    # --force: the installed model is replaced only once the new one is whole (export/staging.py)
    kept = f"; {out} is kept as it was" if held is not None else ""
    local = None
    try:
        local = item.fetch()  # a download that fails its checksum is dropped there
        source = load_source(item, local)
    except Exception as exc:  # noqa: BLE001 - one model's failure is reported; the others install
        log.debug("pull %s failed", item.label, exc_info=True)
        if item.kind == "argos" and local is not None:  # a package that does not import may be damaged:
            local.unlink(missing_ok=True)  # the next pull downloads it again
        return Outcome(item.label, item.name, FAILED, _message(exc) + kept)
    try:
        result = export_pulled(item, source, out, settings)
    except Exception as exc:  # noqa: BLE001 - the package imported: it stays in the cache for the next pull
        log.debug("pull %s failed", item.label, exc_info=True)
        return Outcome(item.label, item.name, FAILED, _message(exc) + kept)
    manifest = result.manifest
    return Outcome(item.label, item.name, INSTALLED, f"{out} ({manifest.kind}, {manifest.precision})")


# The keys of extra.source.pulled that name the model (not its version or download links).
IDENTITY = ("hub", "revision", "argos_index")


def pulled_origin(out: Path) -> dict[str, Any] | None:
    """``extra.source.pulled`` of the model installed at ``out`` ({} for one not pulled); None: none there."""
    if not (out / "model.json").is_file():
        return None
    try:
        found = json.loads((out / "model.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    for key in ("extra", "source", "pulled"):
        found = found.get(key) if isinstance(found, dict) else None
    return found if isinstance(found, dict) else {}


def same_origin(held: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether the installed model is the one named (an Argos pair of another version is; a Hub id
    in other letter case is, as the Hub reads ids)."""
    return all(
        _key(key, held.get(key)) == _key(key, wanted.get(key)) for key in IDENTITY if key in wanted or key in held
    )


def _key(key: str, value: Any) -> Any:
    return value.casefold() if key == "hub" and isinstance(value, str) else value


def held_by(origin: dict[str, Any]) -> str:
    if "hub" in origin:
        revision = origin.get("revision")
        return f"pulled from {origin['hub']}" + (f"@{revision}" if revision not in (None, "main") else "")
    if "argos_index" in origin:
        return f"pulled as argos:{origin['argos_index']}"
    return "not pulled: exported there"


def target_problem(out: Path, repo: Path, force: bool) -> str | None:
    """Why ``out`` cannot receive the model (None: it can), in the pull's own terms."""
    if out.exists() and not out.is_dir():
        return f"{out} is a file, not a model folder; move it away"
    if not force and out.is_dir() and any(out.iterdir()):
        return f"{out} exists and holds no model.json; move it away, or pull with --force to replace it"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=f".{out.name}.probe-", dir=repo))
    except OSError as exc:
        return f"cannot write to the model repository {repo}: {exc.strerror or exc}"
    return None


def _message(exc: Exception) -> str:
    """One line: a typed error's own message (it names the file and field), else its type too."""
    verify = sys.modules.get("attnserve.export.verify")  # loaded by every export
    if verify is not None and isinstance(exc, verify.VerificationFailed):
        failed = [line.strip() for line in exc.verification.lines() if "FAIL" in line]
        return "; ".join([str(exc), *failed])
    if isinstance(exc, (ExportError, ManifestError)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def load_source(item: PullItem, local: Path):
    """The import ``--from-hf`` / ``--from-hf-vit`` / ``--from-argos`` would run on ``local``."""
    from attnserve.export import sources

    from .hub import model_type

    if item.kind == "argos":
        source = sources.from_argos(local)
    elif model_type(local) == "vit":
        source = sources.from_hf_vit(local)
    else:
        source = sources.from_hf(local)
    source.description = {**source.description, "pulled": item.origin}
    return source


def export_pulled(item: PullItem, source, out: Path, settings: InstallSettings):
    """``source`` (:func:`load_source`) exported to ``out`` exactly as the export subcommands do."""
    import torch

    from attnserve.models import VisionTransformer

    from .. import sources
    from ..options import ExportOptions
    from ..pipeline import export_translation, export_vit, planned_stages
    from ..progress import Progress, quiet_exporter

    exists = out.exists() and any(out.iterdir()) if out.is_dir() else out.exists()
    options = ExportOptions(
        out=out,
        name=item.name,
        precision=settings.precision,
        verify=settings.verify,
        force=settings.force and exists,
        device=settings.device,
        threads=settings.threads,
    )
    if options.threads > 0:
        torch.set_num_threads(options.threads)
    quiet_exporter()
    kind = "vit" if isinstance(source.model, VisionTransformer) else "translation"
    progress = Progress(planned_stages(kind, options))
    progress(f"import {item.label}")
    try:
        extra = {**source.extra, "source": source.description}
        if kind == "vit":
            return export_vit(
                source.model,
                options,
                labels=source.labels,
                preprocessing=source.preprocessing,
                extra=extra,
                progress=progress,
            )
        tokenizer, note = sources.tokenizer_for(source, None, checkpoint=None)
        return export_translation(
            source.model,
            tokenizer,
            options,
            max_source_len=source.limits.get("max_source_len"),
            max_target_len=source.limits.get("max_target_len"),
            extra={**extra, **note},
            progress=progress,
            family=source.family,
            languages=Languages(**source.languages) if source.languages else None,
            source_eos=source.source_eos,
        )
    finally:
        progress.close()
